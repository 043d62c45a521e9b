"""Each WARC request record says what the request carried, header for header, as a real server logged receiving it.

The store used to keep validators per stored version only, and the export rebuilt each request's If-None-Match /
If-Modified-Since from the version before: a redirect's target (asked without them), a page re-asked in full after
the extractor hook failed on it, and a page whose server gave the same bytes a new ETag (asked with the new one)
were recorded with the version's validators, not the request's. The fetch log now keeps what each request sent
(migration 0011). A threaded ``http.server`` on 127.0.0.1 logs every request; the harvest, the re-crawls and the
export run through the CLI, and the file is read back with warcio.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator

from harvester.cli import app
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

runner = CliRunner()

FILLER = ("This paragraph is long enough for a main-content extractor to take it for the article body, with several "
          "clauses and plain words that carry meaning. ")


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def article(title: str, text: str) -> bytes:
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><main><article>"
            f"<h1>{title}</h1><p>{FILLER}</p><p>{text}</p></article></main></body></html>").encode()


@dataclass
class Site:
    """What the server serves on ``day`` and every request it received: (path, headers as received, lowercased)."""

    origin: str = ""
    day: int = 1
    received: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def asked(self, path: str) -> list[dict[str, str]]:
        return [headers for got, headers in self.received if got == path]


PAGES = ("/changes", "/stays", "/retag", "/drops", "/moves", "/hooked", "/alias")
"""In the sitemap. ``/changes``: new bytes and ETag each day; ``/stays``: the same bytes and ETag every day;
``/retag``: the same bytes every day, a new ETag each day; ``/drops``: the same bytes every day, an ETag on
day 1 only; ``/moves``: a temporary redirect to ``/moved-here`` (same
bytes and ETag every day); ``/hooked``: the page the broken hook fails on; ``/alias``: a permanent redirect to
``/canonical``, which the harvest learns of from that redirect."""


def answer(site: Site, path: str) -> tuple[str | None, bytes] | str | None:
    """(ETag, body) of a page, a redirect's target path, or None (404)."""
    day = site.day
    if path == "/moves":
        return "/moved-here"
    if path == "/alias":
        return "/canonical"
    etags = {"/changes": f'"changes-{day}"', "/stays": '"stays-1"', "/retag": f'"retag-{day}"',
             "/canonical": '"canonical-1"', "/moved-here": '"here-1"', "/hooked": '"hooked-1"',
             "/drops": '"drops-1"' if day == 1 else None}
    if path not in etags:
        return None
    version = day if path == "/changes" else 1
    return etags[path], article(f"Page {path}", f"Version {version} of {path}.")


@pytest.fixture
def site() -> Iterator[Site]:
    """A real HTTP server on 127.0.0.1 that honours If-None-Match (304 on a match) and logs every request."""
    state = Site()

    def respond(request: Asked) -> Answer:
        state.received.append((request.path, request.headers))
        if request.path == "/robots.txt":
            return robots_txt(state.origin)
        if request.path == "/sitemap.xml":
            return sitemap(state.origin, dict.fromkeys(PAGES))
        found = answer(state, request.path)
        if found is None:
            return 404, {"Content-Type": "text/html; charset=utf-8"}, b""
        if isinstance(found, str):
            return (301 if request.path == "/alias" else 302), {"Location": found}, b""
        etag, body = found
        if etag is not None and request.headers.get("if-none-match") == etag:
            return 304, {"ETag": etag}, b""
        return 200, {"Content-Type": "text/html; charset=utf-8", **({"ETag": etag} if etag else {})}, body

    with threaded_site(respond) as origin:
        state.origin = origin
        yield state


HOOK = """
from pathlib import Path

BROKEN = Path(__file__).with_name("broken.txt")

def words(page):
    if page.url in BROKEN.read_text().split():
        raise KeyError("price")
    return {"words": len(page.main_text.split())}
"""


@pytest.fixture
def cli(db_url: str) -> Callable[..., str]:
    def invoke(*args: str) -> str:
        out = runner.invoke(app, [*args, "--db", db_url])
        assert out.exit_code == 0, out.output
        return out.output

    invoke("db", "upgrade")  # PostgreSQL is never migrated silently
    return invoke


def request_records(path: Path) -> dict[str, list[dict[str, str]]]:
    """WARC-Target-URI -> the headers of each of its request records, in file order (fetch order)."""
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type == "request":
                out[record.rec_headers.get_header("WARC-Target-URI")].append(
                    {name.lower(): value for name, value in record.http_headers.headers})
    return out


def assert_requests_as_received(site: Site, warc: Path, paths: tuple[str, ...]) -> None:
    records = request_records(warc)
    for path in paths:
        assert site.asked(path), f"control: {path} was asked"
        assert records[site.origin + path] == site.asked(path), path  # every request, every header, in order


def test_a_refresh_recrawl_records_each_request_as_sent_the_redirect_target_unconditional(
    site: Site, cli: Callable[..., str], tmp_path: Path,
) -> None:
    """``recrawl --refresh`` asks every page again, conditionally on the URL's validators: ``/stays`` answers 304,
    ``/changes`` a new version. ``/moves`` redirects (302) to ``/moved-here``: the URL keeps the target's ETag and
    sends it to ``/moves``, and the target is asked without it (a redirect hop carries no validators), where the
    records rebuilt from the version before said ``If-None-Match: "here-1"``."""
    cli("harvest", f"{site.origin}/")
    site.day = 2
    cli("recrawl", "--refresh")
    moves = site.asked("/moves")
    assert moves[-1].get("if-none-match") == '"here-1"'  # control: the URL's request was conditional
    assert site.asked("/stays")[-1].get("if-none-match") == '"stays-1"'
    assert all("if-none-match" not in headers for headers in site.asked("/moved-here"))  # the hop never is
    cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    assert_requests_as_received(site, tmp_path / "all.warc.gz", ("/changes", "/stays", "/moved-here"))


def test_a_page_given_a_new_etag_on_the_same_bytes_is_recorded_asked_with_the_new_one(
    site: Site, cli: Callable[..., str], tmp_path: Path,
) -> None:
    """First re-crawl: ``/retag`` answers 200 with its first bytes and ETag ``"retag-2"`` (a repeated payload: no
    new version, the version keeps ``"retag-1"``). Second re-crawl: it is asked with ``"retag-2"`` and answers 304;
    the record rebuilt from the version said ``"retag-1"``. ``/drops`` answers its first bytes without an ETag in
    the first re-crawl, so the second asks it unconditionally; the rebuilt record said ``"drops-1"``. A ``--since``
    file of the second re-crawl alone says what was sent too."""
    from datetime import UTC, datetime

    cli("harvest", f"{site.origin}/")
    site.day = 2
    cli("recrawl", "--refresh")
    between = datetime.now(UTC).isoformat()
    cli("recrawl", "--refresh")
    retag = site.asked("/retag")
    assert [h.get("if-none-match") for h in retag] == [None, '"retag-1"', '"retag-2"']  # the truth on the wire
    assert [h.get("if-none-match") for h in site.asked("/drops")] == [None, '"drops-1"', None]
    cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    assert_requests_as_received(site, tmp_path / "all.warc.gz", ("/retag", "/drops", "/stays", "/changes"))
    cli("export", "--format", "warc", "--since", between, "-o", str(tmp_path / "since.warc.gz"))
    since = request_records(tmp_path / "since.warc.gz")
    assert since[site.origin + "/retag"] == retag[-1:]
    assert since[site.origin + "/drops"] == site.asked("/drops")[-1:]


def test_a_page_reasked_after_the_hook_failed_is_recorded_without_validators(
    site: Site, db_url: str, tmp_path: Path,
) -> None:
    """The hook fails on ``/hooked``: the page is stored (with its ETag) and the URL keeps no validators, so the
    next run asks it in full (200, the same bytes: an identical-payload revisit). Its record said
    ``If-None-Match: "hooked-1"``, the version's; the server received none. Control: ``/stays``, asked
    conditionally, is recorded so."""
    (tmp_path / "ext.py").write_text(HOOK, encoding="utf-8")
    (tmp_path / "broken.txt").write_text(f"{site.origin}/hooked", encoding="utf-8")
    hook = f"{tmp_path / 'ext.py'}:words"

    def cli(*args: str) -> str:
        out = runner.invoke(app, [*args, "--db", db_url])
        assert out.exit_code == 0, out.output
        return out.output

    cli("db", "upgrade")
    assert "hook failed: 1" in cli("harvest", f"{site.origin}/", "--extractor", hook)
    (tmp_path / "broken.txt").write_text("", encoding="utf-8")
    site.day = 2
    assert "hook failed: 0" in cli("recrawl")
    hooked = site.asked("/hooked")
    assert len(hooked) == 2 and "if-none-match" not in hooked[1]  # the truth: asked in full
    cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    assert_requests_as_received(site, tmp_path / "all.warc.gz", ("/hooked",))


def test_a_permanent_redirects_target_read_once_is_one_exchange_in_the_warc(
    site: Site, cli: Callable[..., str], tmp_path: Path,
) -> None:
    """``/alias`` answers 301 to ``/canonical``, which the harvest then queues as a URL of its own and records from
    the answer the redirect already got (``moved_target_read_once``): the old address's fetch row is the 301, the
    target's holds the page. The WARC holds what went over the wire: one request and one response for
    ``/canonical``, not a second exchange (a request and an identical-payload revisit) that no server saw."""
    cli("harvest", f"{site.origin}/")
    assert len(site.asked("/canonical")) == 1  # control: the target was asked once for both URLs
    cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    assert_requests_as_received(site, tmp_path / "all.warc.gz", ("/canonical",))
    with (tmp_path / "all.warc.gz").open("rb") as stream:
        kinds = [record.rec_type for record in ArchiveIterator(stream)
                 if record.rec_headers.get_header("WARC-Target-URI") == site.origin + "/canonical"]
    assert kinds == ["request", "response"] or kinds == ["response", "request"], kinds
