"""Sitemaps (urlset, index, plain text, RSS/Atom) from bytes the harvester fetched: bounded records out.

Never fetches and never touches SQL. Hostile input is refused whole (DOCTYPE/ENTITY, gzip bombs) or kept in
part (malformed XML keeps what parsed); entries stream out of an iterator, never as a whole tree in memory.
Two XML paths: a streaming lxml ``iterparse`` (the default) and ultimate-sitemap-parser, kept identical on
well-formed input by a differential test (tests/discovery/test_sitemaps_differential.py).
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Iterator
from typing import Literal, TypeVar

from harvester.discovery._cut import entries_cut
from harvester.discovery.sitemap_model import (
    DEFAULT_PRIORITY,
    PreparedSitemap,
    SitemapDoc,
    SitemapEntry,
    mark_controls,
    validated_entries,
)
from harvester.discovery.sitemap_scan import scan_urlset
from harvester.discovery.sitemap_usp import parse_usp
from harvester.discovery.sitemap_xml import parse_lxml, unterminated_cut, wide_codec
from harvester.errors import ContentRejected, NotASitemap
from harvester.settings import SITEMAP_PROTOCOL_MAX_BYTES, DiscoverySettings

logger = logging.getLogger(__name__)

ParserChoice = Literal["auto", "lxml", "usp"]


GZIP_MAGIC = b"\x1f\x8b"
_BLANK_BYTES = (b" ", b"\t", b"\r", b"\n")

_PROLOG_SCAN = 65_536
_DTD = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_HTML_PAGE = re.compile(r"<(?:!doctype\s+html[\s>]|html[\s>])", re.IGNORECASE)
"""An HTML page's doctype or root in a document's head (behind a prolog or comments too): what many sites answer
for a path they do not have."""
# Only complete references ending in ";" are decoded: a URL's "&not=1" or "&copy=2" must stay as written
# (html.unescape, which usp applies, turns them into "¬=1" and "©=2").
# A "&" that does not start one of XML's five named references or a character reference: a bare ampersand,
# fatal to expat (usp stops there) and mangled by lxml's recovery ("?a=1&b=2" → "?a=1=2"). Escaped up front.
# A CDATA section is stepped over whole (an ``&`` there is text, well-formed), up to the end of the file when it
# is never closed: each attempt then succeeds, so a flood of unclosed sections is still one pass.
_BARE_AMP = re.compile(
    rb"(<!\[CDATA\[.*?(?:\]\]>|\Z))|&(?!(?:amp|lt|gt|quot|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});)", re.DOTALL
)
_BARE_AMP_TEXT = re.compile(_BARE_AMP.pattern.decode("ascii"), re.DOTALL)
"""``_BARE_AMP`` over decoded text (a UTF-16 or UTF-32 file)."""
_Text = TypeVar("_Text", str, bytes)


# --- gzip --------------------------------------------------------------------------------------------------


BOMB_RATIO = 250
"""Inflated bytes per compressed byte consumed above which a stream past the cap is a bomb. Deflate tops out near
1,000:1 on filler (what bombs are made of); sitemaps, even of near-identical URLs, stay far below 100:1."""


def inflate(body: bytes, *, max_bytes: int) -> bytes:
    """``body`` gunzipped when it starts with the gzip magic (never judged by file name), else unchanged.

    The decompressed size is capped with zlib's ``max_length``, so it costs at most ``max_bytes`` of memory. Past
    the cap, a stream inflating more than ``BOMB_RATIO`` times what it consumed is a bomb (ContentRejected); any
    other is a large file, returned one byte past the cap for the caller to cut there, as it cuts a plain file (a
    50 MB sitemap keeps its first part instead of losing all). Multi-member gzip is followed; a truncated stream
    keeps what inflated.
    """
    return inflate_checked(body, max_bytes=max_bytes)[0]


def inflate_checked(body: bytes, *, max_bytes: int) -> tuple[bytes, bool]:
    """``inflate``, and whether the gzip stream ended where a stream ends (False: cut short or corrupt, so the
    text may stop anywhere, inside a line or a ``<loc>``). A plain body and one cut at the cap count as ended."""
    if not body.startswith(GZIP_MAGIC):
        return body, True
    out = bytearray()
    data = body
    consumed = 0
    try:
        while data.startswith(GZIP_MAGIC):
            inflater = zlib.decompressobj(wbits=31)
            while data:
                out += inflater.decompress(data, max_bytes + 1 - len(out))
                rest = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                consumed += len(data) - len(rest)
                if len(out) > max_bytes:
                    if len(out) > BOMB_RATIO * max(consumed, 1):
                        raise ContentRejected(
                            f"gzip bomb: sitemap inflates past the {max_bytes}-byte cap at over {BOMB_RATIO}:1;"
                            f" refused after {max_bytes} bytes"
                        )
                    return bytes(out), True
                if inflater.eof:
                    break
                data = inflater.unconsumed_tail
                if not data:
                    break
            if not inflater.eof:
                return bytes(out), False  # the stream stops mid-member: a cut download
            data = inflater.unused_data
    except zlib.error as exc:
        if not out:
            raise ContentRejected(f"corrupt gzip: {exc}") from None
        logger.warning("corrupt gzip tail after %d bytes: %s", len(out), exc, extra={"error_class": "bad_content"})
        return bytes(out), False
    return bytes(out), True


# --- the entry point ---------------------------------------------------------------------------------------


def parse_sitemap(
    body: bytes, *, url: str, settings: DiscoverySettings, parser: ParserChoice = "auto", feeds: bool = True
) -> SitemapDoc:
    """Parse one sitemap file (gzipped or not) into a ``SitemapDoc``; ``url`` is where it was fetched from.

    Raises ContentRejected for DOCTYPE/ENTITY declarations and gzip bombs. Entries carry only absolute
    http(s) ``<loc>`` values (others are dropped and counted in ``problems``), deduplicated, at most
    ``settings.max_sitemap_urls`` (then ``over_limit``). ``parser="usp"`` uses ultimate-sitemap-parser
    (whole file in memory; stops at the first XML error); "auto"/"lxml" stream with lxml and recover, "auto"
    first trying the plain-urlset scanner (``scan_urlset``), which gives the same document for the files it takes.
    An RSS or Atom feed is read with feedparser; with ``feeds=False`` it is only recognized (``FEED_UNREAD``), so
    an event loop can hand the slow read to a thread.

    The two halves, ``prepare_sitemap`` and ``finish_sitemap``, are for a caller with an event loop: the first
    may run in a worker thread, the second (where lxml's parser objects are made) where the entries are read.
    """
    prepared = prepare_sitemap(body, url=url, settings=settings, parser=parser)
    if isinstance(prepared, SitemapDoc):
        return prepared
    return finish_sitemap(prepared, settings=settings, parser=parser, feeds=feeds)




def prepare_sitemap(
    body: bytes, *, url: str, settings: DiscoverySettings, parser: ParserChoice = "auto"
) -> SitemapDoc | PreparedSitemap:
    """Everything of ``parse_sitemap`` that makes no parser object: gzip, the byte cap, the DOCTYPE refusal, the
    bare-``&`` repair, the unterminated-tag cut, and the whole of a plain-text file or of a plain urlset the
    scanner takes (a finished ``SitemapDoc``). Safe in a worker thread: on a 7 MB file this is ~50 ms of CPU that
    would otherwise stall an event loop's other hosts (zlib even lets the loop run meanwhile)."""
    body, whole_stream = inflate_checked(body, max_bytes=settings.max_sitemap_bytes)
    truncated = len(body) > settings.max_sitemap_bytes
    if truncated:
        body = body[: settings.max_sitemap_bytes]
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]  # a UTF-8 byte-order mark: sniffed byte for byte, it hid the markup behind "ï»¿"
    if body[:1] in _BLANK_BYTES and body.lstrip(b" \t\r\n").startswith(b"<?xml"):
        # White space before the XML declaration (a generator's stray newline) is an error libxml2 recovers from
        # by dropping references: "?a=1&amp;b=2" came out as "?a=1b=2", another URL (crawler-commons' suite).
        body = body.lstrip(b" \t\r\n")
    head = _head_text(body)
    stripped = head.lstrip("\ufeff \t\r\n")
    ended_early = None if whole_stream else "the gzip stream ends early (a cut download)"
    if not stripped.startswith("<"):
        doc = SitemapDoc(url=url, kind="text", entries=iter(()), parser="text")
        if (truncated or not whole_stream) and not body.endswith((b"\n", b"\r")):
            # Cut inside a line: its URL is a prefix of another (/article-1081 read as /article-108).
            body = body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]
            ended_early = f"{ended_early or 'cut'} inside a line: the partial last line dropped"
        doc.entries = validated_entries(doc, _text_entries(body), settings.max_sitemap_urls)
        return _finished(doc, 0, truncated, settings, ended_early)
    if _HTML_PAGE.search(head):  # refused either way: never parsed, so a crafted one gains nothing
        raise NotASitemap(f"sitemap {url} is an HTML page, not a sitemap")
    if _DTD.search(head):
        raise ContentRejected(f"sitemap {url} has a DOCTYPE/ENTITY declaration (billion laughs / XXE): refused")
    wide = wide_codec(body) if b"\x00" in body[:512] else None  # UTF-16/32: repaired and pre-scanned as text
    if wide is None:
        body = mark_controls(body)
    entries_end = entries_cut(body, stripped, wide)
    if entries_end is not None:  # the root never closes: libxml2 would close a cut <loc> as if it were whole
        body = body[: entries_end.at]
        ended_early = entries_end.problem() if ended_early is None else f"{ended_early}; {entries_end.problem()}"
    body, repaired = _escape_bare_ampersands(body, wide) if b"&" in body else (body, 0)
    scanned = scan_urlset(body, url, settings) if parser == "auto" else None
    if scanned is not None:
        return _finished(scanned, repaired, truncated, settings, ended_early)
    cut = None if parser == "usp" else unterminated_cut(body, wide)
    return PreparedSitemap(url, body if cut is None else body[:cut], body, cut, repaired, truncated, ended_early)


def _escape_bare_ampersands(body: bytes, wide: tuple[str, int] | None) -> tuple[bytes, int]:
    """``body`` with every bare ``&`` outside CDATA sections escaped, and how many there were. A UTF-16/32 file
    (``wide``: its ``wide_codec``) is repaired as text: its bytes are code units, and a byte-wise ``&amp;`` would
    shift every one after it."""
    if wide is None:
        return _escape_in(body, _BARE_AMP, b"&amp;")
    name, bom = wide
    text, repaired = _escape_in(body[bom:].decode(name, errors="replace"), _BARE_AMP_TEXT, "&amp;")
    return (body[:bom] + text.encode(name) if repaired else body), repaired


def _escape_in(body: _Text, pattern: re.Pattern[_Text], escaped: _Text) -> tuple[_Text, int]:
    repaired = 0

    def escape(match: re.Match[_Text]) -> _Text:
        nonlocal repaired
        if match.group(1) is not None:
            return match.group(1)
        repaired += 1
        return escaped

    return pattern.sub(escape, body), repaired


def finish_sitemap(
    prepared: PreparedSitemap, *, settings: DiscoverySettings, parser: ParserChoice = "auto", feeds: bool = True
) -> SitemapDoc:
    """The XML parser's half of ``parse_sitemap``: run it on the thread that goes on to read the entries."""
    if parser == "usp":
        doc = parse_usp(prepared.body, prepared.url, settings)
    else:
        doc = parse_lxml(prepared, settings, feeds=feeds)
    return _finished(doc, prepared.repaired, prepared.truncated, settings, prepared.ended_early)


def _finished(
    doc: SitemapDoc, repaired: int, truncated: bool, settings: DiscoverySettings, ended_early: str | None = None
) -> SitemapDoc:
    if repaired:
        doc.problem(f"{repaired} bare '&' escaped (not well-formed XML)")
    if truncated:
        doc.over_limit = doc.truncated = True
        below = settings.max_sitemap_bytes < SITEMAP_PROTOCOL_MAX_BYTES
        within = f" (a cap below the protocol's {SITEMAP_PROTOCOL_MAX_BYTES:,})" if below else ""
        doc.problem(f"larger than {settings.max_sitemap_bytes} bytes{within}: cut at the cap")
    if ended_early is not None:
        doc.truncated = True
        doc.problem(ended_early)
    return doc


def _head_text(body: bytes) -> str:
    """The first bytes as text, for sniffing: UTF-16/32 decoded, anything else read byte for byte."""
    head = body[:_PROLOG_SCAN]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head[:4]:
        wide = wide_codec(head)
        if wide is not None:  # a byte-order mark, or the NUL bytes around the first "<", tell the codec
            return head[wide[1] :].decode(wide[0], errors="replace")
        for codec in ("utf-32", "utf-16", "utf-16-le", "utf-16-be"):
            try:
                return head.decode(codec)
            except UnicodeDecodeError:
                continue
        return head.decode("utf-16", errors="ignore")
    return head.decode("latin-1")


# --- plain text --------------------------------------------------------------------------------------------


_LINE_END = re.compile(r"\r\n|\r|\n")


def _text_entries(body: bytes) -> Iterator[SitemapEntry]:
    """sitemaps.org text format: one URL per line, UTF-8. Lines end at CR, LF or CRLF only, and only blanks and tabs
    are stripped: ``str.splitlines`` and ``str.strip`` also take control characters (\\x1c-\\x1f, \\x0b, \\x0c,
    \\x85) as line ends or white space, which cut or trimmed a URL into another; a line holding one is refused."""
    text = body.decode("utf-8", errors="replace").lstrip("\ufeff")
    for line in _LINE_END.split(text):
        loc = line.strip(" \t")
        if loc:
            yield SitemapEntry(loc=loc, priority=DEFAULT_PRIORITY)

