"""A day of changes on a little web of our own, re-crawled 24 h later: every count and record handed over is true.

The server (``http.server`` on 127.0.0.1, not the bundled test web) changes, restyles, adds and deletes pages
overnight and announces it in its sitemap's lastmod, as a careful site does. Through the CLI, with the harvester's
clock moved a day on (``CLOCK.travel_to``, what ``HARVESTER_NOW`` sets), the re-crawl's counts in ``status
--json``, the ``export --latest`` snapshot and the WARC of the day must each equal what the server did and sent.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

FILLER = ("This paragraph is long enough for a main-content extractor to take it for the article body, with several "
          "clauses and plain words that carry meaning. ")
DAY0, DAY1 = run_at(0), run_at(1)


def page(title: str, text: str, *, nav: str = "Home") -> bytes:
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><nav><a href='/'>{nav}</a>"
            f"</nav><main><article><h1>{title}</h1><p>{FILLER}</p><p>{text}</p></article></main>"
            "<footer>All rights reserved.</footer></body></html>").encode()


@dataclass
class Web:
    """What the server serves on ``day`` (0 or 1), and every answer it sent: (path, status, headers, body)."""

    day: int = 0
    liar: bool = False
    """Also serve ``/liar``: edited overnight (and announced), its ETag kept, so it answers 304 to the old one."""
    sent: list[tuple[str, int, dict[str, str], bytes]] = field(default_factory=list)

    def pages(self) -> dict[str, tuple[dict[str, str], bytes, str]]:
        """path -> (headers, body as meant, sitemap lastmod); a path missing on a day answers 404."""
        d = self.day
        stamp = (DAY1 if d else DAY0) - timedelta(hours=5)
        old, new = (DAY0 - timedelta(hours=5)).isoformat(), stamp.isoformat()
        html = {"Content-Type": "text/html; charset=utf-8"}
        out = {
            "/same": ({**html, "ETag": '"same"'}, page("Same", "Never changes."), old),
            "/edited": ({**html, "ETag": f'"edited-{d}"'}, page("Edited", f"Edition {d}."), new if d else old),
            "/edited-no-validator": (html, page("Plain", f"Plain edition {d}."), new if d else old),
            "/restyled": ({**html, "ETag": f'"restyled-{d}"'}, page("Restyled", "Same words.", nav=f"Home {d}"),
                          new if d else old),
            "/gzip": ({**html, "ETag": f'"gzip-{d}"', "Content-Encoding": "gzip"}, page("Gzip", f"Gzip {d}."),
                      new if d else old),
        }
        if self.liar:
            out["/liar"] = ({**html, "ETag": '"liar"'}, page("Liar", f"Liar edition {d}."), new if d else old)
        if d == 0:
            out["/deleted"] = ({**html, "ETag": '"deleted"'}, page("Deleted", "Gone tomorrow."), old)
        else:
            out["/added"] = ({**html, "ETag": '"added"'}, page("Added", "New today."), new)
        return out


@pytest.fixture
def web() -> Iterator[tuple[str, Web]]:
    state = Web()

    def respond(request: Asked) -> Answer:
        pages = state.pages()
        status, headers, body = 404, {"Content-Type": "text/plain"}, b""
        if request.path == "/robots.txt":
            status, headers, body = robots_txt(request.origin)
        elif request.path == "/sitemap.xml":
            status, headers, body = sitemap(request.origin, {path: lastmod for path, (_, _, lastmod) in pages.items()})
        elif request.path in pages:
            headers, meant, _ = pages[request.path]
            status, headers = 200, dict(headers)
            body = gzip.compress(meant, mtime=0) if headers.get("Content-Encoding") == "gzip" else meant
            if request.headers.get("if-none-match") and request.headers.get("if-none-match") == headers.get("ETag"):
                status, body = 304, b""
                headers = {"ETag": headers["ETag"]}
        state.sent.append((request.path, status, headers, body))
        return status, headers, body

    with threaded_site(respond) as origin:
        yield origin, state


def payload(headers: dict[str, str], body: bytes) -> bytes:
    return gzip.decompress(body) if headers.get("Content-Encoding") == "gzip" else body


def test_a_day_of_changes_is_counted_exported_and_archived_as_it_happened(
    web: tuple[str, Web], cli: Callable[..., str], tmp_path: Path
) -> None:
    from warcio.archiveiterator import ArchiveIterator

    origin, site = web
    CLOCK.travel_to(DAY0)
    cli("harvest", f"{origin}/")
    site.day, site.sent[:] = 1, []
    CLOCK.travel_to(DAY1)  # the daily run, 24 h after the harvest started
    cli("recrawl")

    cycle = json.loads(cli("status", "--json"))["last_cycle"]
    urls = {kind: sorted(u.removeprefix(origin) for u in cycle[f"{kind}_urls"])
            for kind in ("new", "changed", "restyled", "gone")}
    assert urls == {"new": ["/added"], "changed": ["/edited", "/edited-no-validator", "/gzip"],
                    "restyled": ["/restyled"], "gone": ["/deleted"]}
    assert (cycle["new"], cycle["changed"], cycle["restyled"], cycle["gone"], cycle["missing"]) == (1, 3, 1, 1, 0)
    asked = [(path, status) for path, status, _, _ in site.sent if path not in ("/robots.txt", "/sitemap.xml")]
    assert cycle["fetched"] == len(asked)
    assert cycle["not_modified"] == sum(status == 304 for _, status in asked)

    # The snapshot is the site now: every live page once, with the bytes it serves (decoded) and its validators.
    cli("export", "--latest", "-o", str(tmp_path / "latest.jsonl"))
    lines = [json.loads(line) for line in (tmp_path / "latest.jsonl").read_text().splitlines()]
    live = site.pages()
    assert sorted(line["url"].removeprefix(origin) for line in lines) == sorted(live)
    for line in lines:
        headers, meant, _ = live[line["url"].removeprefix(origin)]
        assert line["payload_digest"] == hashlib.sha256(meant).hexdigest(), line["url"]
        assert (line["etag"], line["content_type"]) == (headers.get("ETag"), headers["Content-Type"]), line["url"]

    # The WARC of the day: each response is an answer the server sent that day, byte for byte once decoded, and
    # says so consistently (no Content-Encoding for a decoded body, its own length and digests).
    cli("export", "--format", "warc", "--since", DAY1.isoformat(), "-o", str(tmp_path / "day.warc.gz"))
    sent = {(f"{origin}{path}", hashlib.sha256(payload(h, body)).hexdigest())
            for path, status, h, body in site.sent if status == 200}
    responses = 0
    with (tmp_path / "day.warc.gz").open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response":
                continue
            responses += 1
            uri, raw = record.rec_headers.get_header("WARC-Target-URI"), record.content_stream().read()
            assert (uri, hashlib.sha256(raw).hexdigest()) in sent, uri
            assert record.http_headers.get_header("Content-Encoding") is None, uri
            assert int(record.http_headers.get_header("Content-Length")) == len(raw), uri
            assert record.rec_headers.get_header("WARC-Payload-Digest") == "sha1:" + base64.b32encode(
                hashlib.sha1(raw).digest()).decode(), uri
    assert responses == 5  # the three changed, the restyled and the added page


def test_a_304_that_contradicts_a_newer_lastmod_does_not_keep_the_old_version(
    web: tuple[str, Web], cli: Callable[..., str], tmp_path: Path
) -> None:
    """``/liar`` was edited overnight and its sitemap lastmod says so, but its server kept the ETag (a template's,
    an inode's) and answers the conditional request 304. Believed, the 304 kept yesterday's text in ``export
    --latest``; the 304 contradicting a lastmod newer than our copy is asked again once without validators
    (``revisit.reask_304``), and the page is counted changed with today's text."""
    origin, site = web
    site.liar = True
    CLOCK.travel_to(DAY0)
    cli("harvest", f"{origin}/")
    site.day = 1
    CLOCK.travel_to(DAY1)
    cli("recrawl")
    cycle = json.loads(cli("status", "--json"))["last_cycle"]
    assert f"{origin}/liar" in cycle["changed_urls"]
    cli("export", "--latest", "-o", str(tmp_path / "latest.jsonl"))
    lines = {line["url"]: line for line in map(json.loads, (tmp_path / "latest.jsonl").read_text().splitlines())}
    assert lines[f"{origin}/liar"]["payload_digest"] == hashlib.sha256(site.pages()["/liar"][1]).hexdigest()
