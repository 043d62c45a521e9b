"""What the harvester hands over, told through the CLI at the daily cadence on the harvester's clock (the stranger's
black-box trial of stop 46), against a real loopback server whose own log says what it was asked and sent:

- a 200 repeating a stored page byte for byte with a new ETag or Last-Modified is archived with them (the WARC
  revisit's head: WARC 1.1 §6.7), and JSONL's ``etag`` / ``last_modified`` are the ones last received;
- ``recrawl --refresh`` asks gone pages again (a page the site restored comes back);
- ``status --json``'s ``last_extract.hosts[].bytes`` is the body bytes the extraction's answers carried;
- the run's ``text_changed`` counts pages whose text changed from a stored version, never a first fetch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daily_cli import FILLER, cli_on
from warcio.archiveiterator import ArchiveIterator

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

OLD_DATE = "Mon, 30 Nov 2026 10:00:00 GMT"
NEW_DATE = "Wed, 02 Dec 2026 12:00:00 GMT"


def page(title: str, version: int) -> bytes:
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><main><article>"
            f"<h1>{title}</h1><p>{title} version {version}. {FILLER}</p><p>{FILLER}</p></article></main></body>"
            "</html>").encode()


class Site:
    """Four articles over days: /a/2's text changes on day 1; /a/3 and /a/5 answer the same bytes on day 1 with a
    new Last-Modified (/a/3) or a new ETag (/a/5); /a/4 is deleted on day 1 (410, out of the sitemap) and restored
    on day 2 (200, still named by no source)."""

    def __init__(self) -> None:
        self.day = 0
        self.log: list[tuple[int, str, int, int, str | None]] = []
        """(day, path, status, body bytes sent, If-None-Match) of every request."""

    def pages(self) -> dict[str, tuple[bytes, dict[str, str]]]:
        d = self.day
        html = {"Content-Type": "text/html; charset=utf-8"}
        pages = {
            "/a/1": (page("One", 1), {**html, "ETag": '"a1"', "Last-Modified": OLD_DATE}),
            "/a/2": (page("Two", 1 if d == 0 else 2), {**html, "ETag": f'"a2-v{1 if d == 0 else 2}"'}),
            "/a/3": (page("Three", 1), {**html, "Last-Modified": OLD_DATE if d == 0 else NEW_DATE}),
            "/a/5": (page("Five", 1), {**html, "ETag": '"a5-old"' if d == 0 else '"a5-new"'}),
        }
        if d != 1:
            pages["/a/4"] = (page("Four", 1), {**html, "ETag": '"a4"'})
        return pages

    def respond(self, request: Asked) -> Answer:
        answer = self._answer(request)
        self.log.append((self.day, request.path, answer[0], len(answer[2]), request.headers.get("if-none-match")))
        return answer

    def _answer(self, request: Asked) -> Answer:
        pages = self.pages()
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            lastmod = "2026-11-30" if self.day == 0 else "2026-12-02"
            named = {path: lastmod if path in ("/a/2", "/a/3", "/a/5") and self.day else "2026-11-30"
                     for path in pages if self.day < 2 or path != "/a/4"}
            return sitemap(request.origin, named)
        if request.path == "/a/4" and self.day == 1:
            return 410, {"Content-Type": "text/plain"}, b"gone"
        if request.path not in pages:
            return 404, {"Content-Type": "text/plain"}, b"not found"
        body, headers = pages[request.path]
        inm, ims = request.headers.get("if-none-match"), request.headers.get("if-modified-since")
        if (inm is not None and inm == headers.get("ETag")) or (
                inm is None and ims is not None and ims == headers.get("Last-Modified")):
            return 304, {k: v for k, v in headers.items() if k != "Content-Type"}, b""
        return 200, headers, body

    def asked(self, day: int, path: str) -> list[tuple[int, str, int, int, str | None]]:
        return [entry for entry in self.log if entry[0] == day and entry[1] == path]


@pytest.fixture
def site() -> Iterator[tuple[str, Site]]:
    state = Site()
    with threaded_site(state.respond) as origin:
        yield origin, state


@pytest.fixture
def run(tmp_path: Path, clock: None) -> Callable[..., str]:
    return cli_on(f"sqlite:///{tmp_path / 'h.db'}")


def _day(run: Callable[..., str], state: Site, day: int, *args: str) -> str:
    state.day = day
    CLOCK.travel_to(run_at(day))  # 07:00 each day: 24 h after the previous run started
    return run(*args)


def _jsonl(run: Callable[..., str], out: Path, *flags: str) -> dict[str, dict[str, object]]:
    """url -> its last line of ``export FLAGS`` (JSONL)."""
    run("export", *flags, "-o", str(out))
    return {line["url"]: line for line in map(json.loads, out.read_text().splitlines())}


def _counter(output: str, name: str) -> int:
    found = re.search(rf"│\s*extract\s*│\s*{name}\s*│\s*(\d+)\s*│", output)
    return int(found.group(1)) if found else 0


def test_text_changed_counts_changes_from_a_stored_version_only(
        site: tuple[str, Site], run: Callable[..., str]) -> None:
    origin, state = site
    run("db", "upgrade")
    first = _day(run, state, 0, "harvest", f"{origin}/")
    assert _counter(first, "text_new") == 5, first  # control: the five pages were read
    assert _counter(first, "text_changed") == 0, first
    second = _day(run, state, 1, "recrawl")
    assert state.asked(1, "/a/2")[-1][2] == 200  # control: the changed page was read in full
    assert _counter(second, "text_changed") == 1, second


def test_status_bytes_are_the_bodies_the_extraction_received(
        site: tuple[str, Site], run: Callable[..., str]) -> None:
    origin, state = site
    run("db", "upgrade")
    _day(run, state, 0, "harvest", f"{origin}/")
    _day(run, state, 1, "recrawl")
    hosts = json.loads(run("status", "--json"))["last_extract"]["hosts"]
    pages = [entry for entry in state.log if entry[0] == 1 and entry[1].startswith("/a/")]
    assert hosts[origin]["fetched"] == len(pages), (hosts, pages)  # control: the page requests are the run's
    assert hosts[origin]["bytes"] == sum(sent for _, _, _, sent, _ in pages), (hosts, pages)
    assert any(sent for _, _, _, sent, _ in pages) and any(status == 304 for _, _, status, _, _ in pages)


def test_a_refresh_asks_gone_pages_again(
        site: tuple[str, Site], run: Callable[..., str], tmp_path: Path) -> None:
    origin, state = site
    run("db", "upgrade")
    _day(run, state, 0, "harvest", f"{origin}/")
    _day(run, state, 1, "recrawl")
    assert [status for _, _, status, _, _ in state.asked(1, "/a/4")] == [410]  # control: found gone
    _day(run, state, 2, "recrawl", "--refresh")
    assert [status for _, _, status, _, _ in state.asked(2, "/a/4")] in ([200], [304]), state.log
    assert f"{origin}/a/4" in _jsonl(run, tmp_path / "latest.jsonl", "--latest")


def test_the_same_bytes_again_are_archived_with_the_validators_received(
        site: tuple[str, Site], run: Callable[..., str], tmp_path: Path) -> None:
    origin, state = site
    run("db", "upgrade")
    _day(run, state, 0, "harvest", f"{origin}/")
    _day(run, state, 1, "recrawl")
    assert [status for _, _, status, _, _ in state.asked(1, "/a/3")] == [200]  # control: same bytes, new date
    assert [status for _, _, status, _, _ in state.asked(1, "/a/5")] == [200]  # control: same bytes, new ETag
    _day(run, state, 2, "recrawl", "--refresh")
    assert '"a5-new"' in [inm for _, _, _, _, inm in state.asked(2, "/a/5")]  # control: the store knew it
    warc = tmp_path / "all.warc.gz"
    run("export", "--format", "warc", "-o", str(warc))
    heads: dict[str, list[tuple[str, dict[str, str]]]] = {}
    with warc.open("rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type in ("response", "revisit") and record.http_headers is not None:
                uri = record.rec_headers.get_header("WARC-Target-URI")
                heads.setdefault(uri, []).append(
                    (record.rec_type, {k.lower(): v for k, v in record.http_headers.headers}))
                record.content_stream().read()
    three, five = heads[f"{origin}/a/3"], heads[f"{origin}/a/5"]
    # Day 0's response, then day 1's 200 of the same bytes (and day 2's, where the refresh read it in full).
    assert [kind for kind, _ in three][:2] == ["response", "revisit"], three
    assert [head["last-modified"] for _, head in three] == [OLD_DATE] + [NEW_DATE] * (len(three) - 1), three
    assert {kind for kind, _ in five[1:]} == {"revisit"} and five[0][0] == "response", five
    assert [head["etag"] for _, head in five] == ['"a5-old"'] + ['"a5-new"'] * (len(five) - 1), five
    for flags in ((), ("--latest",)):
        lines = _jsonl(run, tmp_path / "pages.jsonl", *flags)
        assert lines[f"{origin}/a/3"]["last_modified"] == NEW_DATE, flags
        assert lines[f"{origin}/a/5"]["etag"] == '"a5-new"', flags
        assert lines[f"{origin}/a/1"]["etag"] == '"a1"', flags  # control: an unchanged page keeps its own
