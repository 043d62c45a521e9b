"""What the export hands over is what a little web of our own served: checked from the outside, as a user would.

A threaded ``http.server`` on 127.0.0.1 (not the bundled test web) serves pages in the charsets and encodings real
sites use: windows-1252 named by the header, windows-1252 and Shift_JIS named only by ``<meta>``, a gzip-encoded
body. The harvest and the exports run through the CLI, and each exported text is compared with the text the server
meant, character for character (an ``ï`` read as ``ď`` is a wrong export, however plausible it looks).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

FILLER = ("This paragraph is long enough for a main-content extractor to take it for the article body, with several "
          "clauses and plain words that carry meaning. ")
LATIN = "Caf\u00e9 \u201cquoted\u201d \u2013 na\u00efve r\u00e9sum\u00e9 co\u00f6perate \u20ac5"
"""Characters whose windows-1252 bytes mean other letters in windows-1250 (ï is ď there): a guess shows."""
JAPANESE = "日本語の文章です。東京は大きい都市です。"


def article(title: str, text: str, *, meta: str = "", lang: str = "en") -> str:
    return (f"<!doctype html><html lang='{lang}'><head>{meta}<title>{title}</title></head><body>"
            "<nav><a href='/a'>Home</a> | <a href='/b'>About</a></nav>"
            f"<main><article><h1>{title}</h1><p>{FILLER}</p><p>{text}</p></article></main>"
            "<footer>Copyright 2026 Example. All rights reserved.</footer></body></html>")


Page = tuple[dict[str, str], bytes]
"""Headers and body bytes as sent."""


def little_web() -> dict[str, Page]:
    """path -> what the server sends; the text each page means is ``MEANT[path]``."""
    return {
        "/header-1252": ({"Content-Type": "text/html; charset=windows-1252"},
                         article("Header 1252", LATIN).encode("cp1252")),
        "/meta-1252": ({"Content-Type": "text/html"},
                       article("Meta 1252", LATIN, meta="<meta charset='windows-1252'>").encode("cp1252")),
        "/meta-sjis": ({"Content-Type": "text/html"},
                       article("Meta SJIS", JAPANESE * 3, meta="<meta charset='Shift_JIS'>", lang="ja")
                       .encode("shift_jis")),
        "/late-meta-sjis": ({"Content-Type": "text/html"},
                            article("遅いメタ", JAPANESE * 3, lang="ja",
                                    meta=f"<script>var x = '{'-' * 6000}';</script><meta charset='Shift_JIS'>")
                            .encode("shift_jis")),
        "/gzip-1252": ({"Content-Type": "text/html; charset=windows-1252", "Content-Encoding": "gzip"},
                       gzip.compress(article("Gzip 1252", LATIN).encode("cp1252"), mtime=0)),
    }


MEANT = {"/header-1252": LATIN, "/meta-1252": LATIN, "/meta-sjis": JAPANESE * 3, "/late-meta-sjis": JAPANESE * 3,
         "/gzip-1252": LATIN}


@pytest.fixture
def origin() -> Iterator[str]:
    """A real HTTP server on 127.0.0.1 with a robots.txt and a sitemap naming every page of ``little_web``."""
    pages = little_web()

    def respond(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, dict.fromkeys(pages))
        if request.path not in pages:
            return 404, {}, b""
        headers, body = pages[request.path]
        return 200, headers, body

    with threaded_site(respond) as origin:
        yield origin


def exported(cli: Callable[..., str], path: Path, *flags: str) -> dict[str, dict]:
    cli("export", "-o", str(path), *flags)
    return {line["url"]: line for line in map(json.loads, path.read_text(encoding="utf-8").splitlines())}


def test_text_export_reads_each_page_in_the_charset_it_declares(origin: str, cli: Callable[..., str],
                                                              tmp_path: Path) -> None:
    """``--text`` once let trafilatura guess the charset of the stored bytes: a windows-1252 page (declared in its
    Content-Type) came out as windows-1250, ``naïve`` as ``naďve``. The text must be the page's own, decoded by the
    header, else the ``<meta>``, as the harvester itself reads the page (its title here is right). A ``<meta>``
    behind 6 KB of inline script (past the 4 KiB prescan) was not seen: the Shift_JIS page was read as
    windows-1252, title and text (browsers re-decode when the parser meets it; so does the harvester now)."""
    cli("harvest", f"{origin}/")
    lines = exported(cli, tmp_path / "text.jsonl", "--latest", "--text")
    for path, meant in MEANT.items():
        line = lines[f"{origin}{path}"]
        assert meant in (line["main"]["text"] or ""), (path, line["main"]["text"])
        assert line["title"] == line["main"]["headline"], path  # the two readers of one page agree
    assert lines[f"{origin}/late-meta-sjis"]["title"] == "遅いメタ"


@pytest.fixture
def changing_origin() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]], list[int]]]:
    """A server whose pages carry ETags and honour If-None-Match (``/ignores`` answers 200 all the same, with the
    same bytes); ``version[0]`` moves its day on. Every request it
    receives is logged (path, headers as received), the truth a WARC request record is checked against."""
    version = [1]
    received: list[tuple[str, dict[str, str]]] = []

    def page(path: str) -> tuple[str, bytes] | None:
        changes = path == "/changes"
        if path not in ("/changes", "/stays", "/ignores"):
            return None
        day = version[0] if changes else 1
        return f'"{path[1:]}-{day}"', article(f"Page {path}", f"Version {day} of {path}.").encode()

    def respond(request: Asked) -> Answer:
        received.append((request.path, request.headers))
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, dict.fromkeys(("/changes", "/stays", "/ignores")))
        found = page(request.path)
        if found is None:
            return 404, {"Content-Type": "text/html; charset=utf-8"}, b""
        if request.headers.get("if-none-match") == found[0] and request.path != "/ignores":
            return 304, {"ETag": found[0]}, b""
        return 200, {"Content-Type": "text/html; charset=utf-8", "ETag": found[0]}, found[1]

    with threaded_site(respond) as origin:
        yield origin, received, version


def request_records(path: Path) -> dict[str, dict[str, str]]:
    """WARC-Target-URI -> the headers of its last request record."""
    from warcio.archiveiterator import ArchiveIterator

    out: dict[str, dict[str, str]] = {}
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type == "request":
                out[record.rec_headers.get_header("WARC-Target-URI")] = {
                    name.lower(): value for name, value in record.http_headers.headers}
    return out


def test_a_since_warc_records_the_validators_a_changed_page_was_asked_with(
    changing_origin: tuple[str, list[tuple[str, dict[str, str]]], list[int]], cli: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The re-crawl asks ``/changes`` with ``If-None-Match`` and gets a new version (200), and ``/ignores`` gets a
    200 repeating its stored bytes. A full WARC's request records said so; a ``--since`` WARC of the re-crawl alone
    wrote unconditional GETs, because it rebuilt the validators from the responses earlier in the file, and the
    window has none. Both must say what was sent (``/stays``, a 304, was right in both), every header of it: the
    records also left out the ``Accept: */*`` every request carries."""
    from datetime import UTC, datetime

    origin, received, version = changing_origin
    cli("harvest", f"{origin}/")
    between = datetime.now(UTC).isoformat()
    version[0] = 2
    received.clear()
    cli("recrawl", "--refresh")
    sent = {f"{origin}{path}": headers for path, headers in received if path in ("/changes", "/stays", "/ignores")}
    assert sent[f"{origin}/changes"]["if-none-match"] == '"changes-1"'  # the truth: conditional requests
    assert sent[f"{origin}/ignores"]["if-none-match"] == '"ignores-1"'
    assert len(sent) == 3
    cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    cli("export", "--format", "warc", "--since", between, "-o", str(tmp_path / "since.warc.gz"))
    for name in ("all.warc.gz", "since.warc.gz"):
        records = request_records(tmp_path / name)
        for url, headers in sent.items():
            assert records[url] == headers, (name, url)  # every header, as the server received it
