"""Sitemaps (urlset, index, plain text, RSS/Atom) from bytes the harvester fetched: bounded records out.

Never fetches and never touches SQL. Hostile input is refused whole (DOCTYPE/ENTITY, gzip bombs) or kept in
part (malformed XML keeps what parsed); entries stream out of an iterator, never as a whole tree in memory.
Two XML paths: a streaming lxml ``iterparse`` (the default) and ultimate-sitemap-parser, kept identical on
well-formed input by a differential test (tests/discovery/test_sitemaps_differential.py).
"""

from __future__ import annotations

import html
import logging
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from io import BytesIO
from typing import Any, Literal, NamedTuple, TypeVar

from lxml import etree

from harvester.discovery._cut import entries_cut
from harvester.discovery._html import has_utf8_form
from harvester.discovery.feeds import parse_feed
from harvester.errors import ContentRejected, NotASitemap
from harvester.runtime import aware
from harvester.settings import DiscoverySettings

logger = logging.getLogger(__name__)

SitemapKind = Literal["index", "urlset", "text", "rss", "atom", "unknown"]
ParserChoice = Literal["auto", "lxml", "usp"]

FEED_UNREAD = "feed-unread"
"""``SitemapDoc.parser`` of a feed named as a sitemap and parsed with ``feeds=False``: only its kind is known; the
caller parses it again with ``feeds=True`` where feedparser's half a second per megabyte harms nothing."""

GZIP_MAGIC = b"\x1f\x8b"

DEFAULT_PRIORITY = 0.5
"""sitemaps.org: "The default priority of a page is 0.5"; also what usp reports for a missing or bad value."""

CHANGEFREQS = frozenset(("always", "hourly", "daily", "weekly", "monthly", "yearly", "never"))

MAX_PROBLEMS = 50
"""Problem messages kept per sitemap file (counts stay exact; only the messages are capped)."""

MAX_LOC_LENGTH = 8192
"""A ``<loc>`` longer than this is dropped before canonicalization (the protocol says 2,048 characters)."""

_PROLOG_SCAN = 65_536
_DTD = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_HTML_PAGE = re.compile(r"<(?:!doctype\s+html[\s>]|html[\s>])", re.IGNORECASE)
"""An HTML page's doctype or root in a document's head (behind a prolog or comments too): what many sites answer
for a path they do not have."""
# Only complete references ending in ";" are decoded: a URL's "&not=1" or "&copy=2" must stay as written
# (html.unescape, which usp applies, turns them into "¬=1" and "©=2").
_ENTITY_REF = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_W3C_PARTIAL = re.compile(r"(\d{4})(?:-(\d{2}))?")
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
_XML_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


class SitemapEntry(NamedTuple):
    """One ``<url>`` (or text line / feed item): ``loc`` is absolute http(s) but not yet canonical.

    A NamedTuple: a sitemap makes 50,000 of these, and a frozen dataclass's ``__init__`` cost more than
    scanning the element."""

    loc: str
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float | None = None
    news: dict[str, Any] | None = None
    images: Sequence[str] = ()


@dataclass(slots=True)
class SitemapDoc:
    """A parsed sitemap file.

    ``entries`` is a one-shot iterator; ``problems``, ``over_limit`` and ``counts`` are final only once it is
    exhausted (or closed). ``children`` (index only) is deduplicated and may include the sitemap itself: the
    caller's loop detection drops that. ``truncated``: the file ends early (a cut download, a gzip stream cut
    short, the byte cap), so only its whole entries were read, and what it does not list says nothing.
    """

    url: str
    kind: SitemapKind
    entries: Iterator[SitemapEntry]
    children: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    over_limit: bool = False
    child_lastmod: dict[str, datetime | None] = field(default_factory=dict)
    parser: str = "lxml"
    counts: dict[str, int] = field(default_factory=dict)
    truncated: bool = False

    def problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)


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
    first trying the plain-urlset scanner (``_scan_urlset``), which gives the same document for the files it takes.
    An RSS or Atom feed is read with feedparser; with ``feeds=False`` it is only recognized (``FEED_UNREAD``), so
    an event loop can hand the slow read to a thread.

    The two halves, ``prepare_sitemap`` and ``finish_sitemap``, are for a caller with an event loop: the first
    may run in a worker thread, the second (where lxml's parser objects are made) where the entries are read.
    """
    prepared = prepare_sitemap(body, url=url, settings=settings, parser=parser)
    if isinstance(prepared, SitemapDoc):
        return prepared
    return finish_sitemap(prepared, settings=settings, parser=parser, feeds=feeds)


@dataclass(frozen=True, slots=True)
class PreparedSitemap:
    """An XML sitemap as ``prepare_sitemap`` leaves it for an XML parser: inflated, capped, repaired and cut."""

    url: str
    body: bytes
    """What the parser reads: ``whole`` cut before its first unterminated start tag past the limit (lxml only)."""
    whole: bytes
    """Before that cut: a feed is read whole (feedparser has no such slow path)."""
    cut: int | None
    repaired: int
    """Bare ``&`` escaped."""
    truncated: bool
    """Larger than ``max_sitemap_bytes`` and cut there."""
    ended_early: str | None = None
    """Why the file was cut after its last whole entry (it ends before its root's end tag), or None."""


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
    head = _head_text(body)
    stripped = head.lstrip("\ufeff \t\r\n")
    ended_early = None if whole_stream else "the gzip stream ends early (a cut download)"
    if not stripped.startswith("<"):
        doc = SitemapDoc(url=url, kind="text", entries=iter(()), parser="text")
        if (truncated or not whole_stream) and not body.endswith((b"\n", b"\r")):
            # Cut inside a line: its URL is a prefix of another (/article-1081 read as /article-108).
            body = body[: max(body.rfind(b"\n"), body.rfind(b"\r")) + 1]
            ended_early = f"{ended_early or 'cut'} inside a line: the partial last line dropped"
        doc.entries = _validated(doc, _text_entries(body), settings.max_sitemap_urls)
        return _finished(doc, 0, truncated, settings, ended_early)
    if _HTML_PAGE.search(head):  # refused either way: never parsed, so a crafted one gains nothing
        raise NotASitemap(f"sitemap {url} is an HTML page, not a sitemap")
    if _DTD.search(head):
        raise ContentRejected(f"sitemap {url} has a DOCTYPE/ENTITY declaration (billion laughs / XXE): refused")
    wide = _wide_codec(body) if b"\x00" in body[:512] else None  # UTF-16/32: repaired and pre-scanned as text
    entries_end = entries_cut(body, stripped, wide)
    if entries_end is not None:  # the root never closes: libxml2 would close a cut <loc> as if it were whole
        body = body[: entries_end.at]
        ended_early = entries_end.problem() if ended_early is None else f"{ended_early}; {entries_end.problem()}"
    body, repaired = _escape_bare_ampersands(body, wide) if b"&" in body else (body, 0)
    scanned = _scan_urlset(body, url, settings) if parser == "auto" else None
    if scanned is not None:
        return _finished(scanned, repaired, truncated, settings, ended_early)
    cut = None if parser == "usp" else _unterminated_cut(body, wide)
    return PreparedSitemap(url, body if cut is None else body[:cut], body, cut, repaired, truncated, ended_early)


def _escape_bare_ampersands(body: bytes, wide: tuple[str, int] | None) -> tuple[bytes, int]:
    """``body`` with every bare ``&`` outside CDATA sections escaped, and how many there were. A UTF-16/32 file
    (``wide``: its ``_wide_codec``) is repaired as text: its bytes are code units, and a byte-wise ``&amp;`` would
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
        doc = _parse_usp(prepared.body, prepared.url, settings)
    else:
        doc = _parse_lxml(prepared, settings, feeds=feeds)
    return _finished(doc, prepared.repaired, prepared.truncated, settings, prepared.ended_early)


def _finished(
    doc: SitemapDoc, repaired: int, truncated: bool, settings: DiscoverySettings, ended_early: str | None = None
) -> SitemapDoc:
    if repaired:
        doc.problem(f"{repaired} bare '&' escaped (not well-formed XML)")
    if truncated:
        doc.over_limit = doc.truncated = True
        doc.problem(f"larger than {settings.max_sitemap_bytes} bytes: cut at the cap")
    if ended_early is not None:
        doc.truncated = True
        doc.problem(ended_early)
    return doc


def _head_text(body: bytes) -> str:
    """The first bytes as text, for sniffing: UTF-16/32 decoded, anything else read byte for byte."""
    head = body[:_PROLOG_SCAN]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in head[:4]:
        wide = _wide_codec(head)
        if wide is not None:  # a byte-order mark, or the NUL bytes around the first "<", tell the codec
            return head[wide[1] :].decode(wide[0], errors="replace")
        for codec in ("utf-32", "utf-16", "utf-16-le", "utf-16-be"):
            try:
                return head.decode(codec)
            except UnicodeDecodeError:
                continue
        return head.decode("utf-16", errors="ignore")
    return head.decode("latin-1")


# --- shared normalization (both parsers end here, which is what makes them comparable) --------------------


def clean_text(value: str | None) -> str | None:
    """Stripped text with complete entity references decoded (double-escaped ``&amp;amp;``); None if empty."""
    if not value:
        return None
    if "&" in value:
        value = _ENTITY_REF.sub(lambda m: html.unescape(m.group(0)), value)
    value = value.strip()
    return value or None


def is_absolute_http(loc: str) -> bool:
    """True for an absolute http(s) URL with a host: what a ``<loc>`` must be (sitemaps.org)."""
    if len(loc) > MAX_LOC_LENGTH:
        return False
    lowered = loc[:8].lower()
    if lowered.startswith("http://"):
        rest = loc[7:]
    elif lowered.startswith("https://"):
        rest = loc[8:]
    else:
        return False
    return (
        bool(rest) and rest[0] not in "/?#:@" and "\n" not in rest and "\r" not in rest and "\t" not in rest
        and (rest.isascii() or has_utf8_form(rest))
    )


def utc(value: datetime | None) -> datetime | None:
    """Aware UTC; a naive value is taken as UTC (sitemaps.org recommends a zone, many omit it)."""
    try:
        return aware(value)
    except (OverflowError, ValueError):  # an offset that pushes year 1 or 9999 off the calendar
        return None


def parse_lastmod(text: str | None) -> datetime | None:
    """W3C Datetime (any ISO 8601 form Python reads, plus YYYY and YYYY-MM), or RFC 2822; aware UTC or None."""
    if not text:
        return None
    try:
        return utc(datetime.fromisoformat(text))
    except ValueError:
        pass
    partial = _W3C_PARTIAL.fullmatch(text)
    if partial is not None:
        month = int(partial.group(2) or 1)
        return datetime(int(partial.group(1)), month, 1, tzinfo=UTC) if 1 <= month <= 12 else None
    try:
        return utc(parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError):
        return None


def parse_priority(text: str | None) -> float:
    """sitemaps.org priority in [0, 1]; missing, invalid or out of range gives the default 0.5 (as usp)."""
    if not text:
        return DEFAULT_PRIORITY
    try:
        value = Decimal(text)
        if value < 0 or value > 1:
            return DEFAULT_PRIORITY
    except InvalidOperation:
        return DEFAULT_PRIORITY
    return float(value)


def parse_changefreq(text: str | None) -> str | None:
    """Lower-cased changefreq; an unknown word becomes "always" (usp's reading, kept so both paths agree)."""
    if not text:
        return None
    value = text.lower()
    return value if value in CHANGEFREQS else "always"


def _validated(doc: SitemapDoc, raw: Iterable[SitemapEntry], limit: int) -> Iterator[SitemapEntry]:
    """The entries every parser yields, after the checks every parser shares: valid loc, dedupe, limit."""
    seen: set[str] = set()
    invalid: list[str] = []
    counts = doc.counts
    counts.update(kept=0, invalid_loc=0, duplicates=0, over_limit=0)
    try:
        for entry in raw:
            loc = entry.loc
            if not is_absolute_http(loc):
                counts["invalid_loc"] += 1
                if len(invalid) < 3:
                    invalid.append(loc[:100])
                continue
            if loc in seen:
                counts["duplicates"] += 1
                continue
            if counts["kept"] >= limit:
                # sitemaps.org: at most 50,000 URLs per file. Stop here: the rest is not ours to parse.
                doc.over_limit = True
                counts["over_limit"] += 1
                doc.problem(f"more than {limit} URLs: the rest of the file dropped")
                break
            seen.add(loc)
            counts["kept"] += 1
            yield entry
    finally:
        if counts.get("without_loc"):
            doc.problem(f"{counts['without_loc']} <url> elements without a <loc> skipped")
        if counts["invalid_loc"]:
            doc.problem(f"{counts['invalid_loc']} <loc> values not absolute http(s) URLs dropped (e.g. {invalid!r})")


# --- plain urlsets, scanned -----------------------------------------------------------------------------------

SCAN_MAX_BYTES = 10_000_000
"""Larger files take the streaming lxml path: the scanner holds the decoded text and the matches of a file, and
no text node can reach libxml2's 10,000,000-byte limit (past which lxml silently stops reading)."""

# XML's white space is these four (``\s`` would also take Unicode spaces lxml treats as text); ``\r`` is gone by
# the time the patterns run.
_WS = "[ \t\n]"
_SCAN_PROLOG = re.compile(rf"(?:<\?xml({_WS}[^>]*?)\?>)?{_WS}*<urlset({_WS}[^>]*)?>")
# Attributes of the root (and pseudo-attributes of the declaration) as the scanner takes them: each after white
# space, an ASCII name, a quoted value without markup or references. Anything else (a missing space, an unclosed
# quote, an entity) goes to lxml, whose verdict on broken attributes differs from reading them leniently.
_SCAN_ATTR = re.compile(rf"""{_WS}++([A-Za-z_:][-A-Za-z0-9._:]*){_WS}*={_WS}*(?:"([^"<&]*)"|'([^'<&]*)')""")
_SCAN_UTF8 = frozenset(("utf-8", "utf8"))
_SCAN_ASCII = frozenset(("us-ascii", "ascii"))
_SCAN_FORBIDDEN = bytes((*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)))
_SCAN_ALLOWED = bytes(b for b in range(256) if b not in _SCAN_FORBIDDEN)
_SCAN_FIELD = "|".join(f"<{name}>([^<]*)</{name}>" for name in ("loc", "lastmod", "changefreq", "priority"))
# The four fields in any order; a repeated one keeps its last value, as ``_url_entry`` does.
_SCAN_URL = re.compile(rf"<url>{_WS}*(?:(?:{_SCAN_FIELD}){_WS}*)*</url>")
# The whole root's content: ``<url>`` elements, white space and stray fields between them (which lxml ignores too),
# and nothing else. Every repetition is possessive and every alternative starts differently, so a hostile file costs
# one linear pass, never a backtracking search.
_SCAN_FIELD_BARE = _SCAN_FIELD.replace("([^<]*)", "[^<]*+")
_SCAN_CONTENT = re.compile(rf"(?:{_WS}++|<url>(?:{_WS}++|{_SCAN_FIELD_BARE})*+</url>|{_SCAN_FIELD_BARE})*+")

SCAN_WINDOW = 262_144
"""Characters the scanner hands one regular-expression call. A call holds the GIL (so an event loop) for its
whole run: on a 7 MB file, ~15 ms to prove the content and ~45 ms to match it. In ranges of this size no call
takes more than a few milliseconds, and matching stops where ``max_sitemap_urls`` does."""
_XML_ESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))


def _scan_urlset(body: bytes, url: str, settings: DiscoverySettings) -> SitemapDoc | None:
    """A plain urlset read with one regular expression instead of an XML parser, or None for lxml to read.

    Most sitemaps are generated: a sitemaps.org ``<urlset>`` of ``<url>`` elements holding ``<loc>``,
    ``<lastmod>``, ``<changefreq>`` and ``<priority>``, and nothing else. For those, lxml's
    per-element events and element objects cost several times what admitting the URL does. The shape is proven
    before the first entry is produced, so the choice never changes half-way: the root's whole content must be
    ``<url>`` elements of those fields, white space, and stray fields between them (which lxml ignores too).
    Anything else (namespaced extensions, comments, CDATA, attributes, stray or unclosed tags, a truncated
    file, another encoding) goes to lxml; tests/discovery/test_sitemaps.py proves both paths give the
    same document for every file the scanner takes.
    """
    if len(body) > SCAN_MAX_BYTES or body.translate(None, _SCAN_ALLOWED):
        return None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # XML 1.0 §2.11, as lxml reads it
    prolog = _SCAN_PROLOG.match(text, len(text) - len(text.lstrip("\ufeff \t\n")))
    if prolog is None:
        return None
    declaration = _scan_attributes(prolog.group(1))
    if declaration is None or (prolog.group(1) is not None and next(iter(declaration), None) != "version"):
        return None
    declared = declaration.get("encoding", "utf-8").lower()
    if declared not in _SCAN_UTF8 and not (declared in _SCAN_ASCII and text.isascii()):
        return None  # lxml reads (or refuses) other encodings, and ASCII declared over other bytes
    root = _scan_attributes(prolog.group(2))
    if root is None or "/sitemap/" not in root.get("xmlns", ""):
        return None  # no sitemaps.org namespace, or an empty ``<urlset .../>`` (its "/" is no attribute)
    start = prolog.end()
    # Character references are the one markup the content pattern lets through (in text); lxml decodes them.
    if text.find("&#", start) >= 0:
        return None
    if not text.isascii() and ("\ufffe" in text or "\uffff" in text):
        return None
    if "]]>" in text:
        return None  # not allowed in text: lxml's recovery ends the text there
    end = text.rfind("</urlset>")
    if end < start or text[end + 9 :].strip(" \t\n"):
        return None  # truncated, or more after the root: lxml's recovery decides
    windows = _scan_windows(text, start, end, SCAN_WINDOW)
    if any(_SCAN_CONTENT.fullmatch(text, a, b) is None for a, b in windows):
        return None  # comments, CDATA, extensions, attributes, stray or unclosed tags: lxml decides
    doc = SitemapDoc(url=url, kind="urlset", entries=iter(()), parser="scan")
    doc.entries = _scanned_entries(doc, _scanned_matches(text, windows), settings.max_sitemap_urls)
    return doc


def _scan_windows(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    """``text[start:end]`` as ranges cut right after a ``</url>`` about every ``size`` characters.

    Field text holds no ``<``, so every ``</url>`` ends a ``<url>`` element: the cuts fall between the items of
    the content pattern, which then matches every range exactly when it matches the whole, with the same
    ``<url>`` matches (a stray ``</url>`` starts a range the pattern refuses, as it refuses the whole)."""
    windows = []
    while end - start > size:
        close = text.find("</url>", start + size, end)
        if close < 0:
            break
        windows.append((start, close + 6))
        start = close + 6
    windows.append((start, end))
    return windows


def _scanned_matches(text: str, windows: list[tuple[int, int]]) -> Iterator[tuple[str, ...]]:
    """The ``<url>`` fields of each range in turn, matched only when the entries get that far."""
    for a, b in windows:
        yield from _SCAN_URL.findall(text, a, b)


def _scan_attributes(text: str | None) -> dict[str, str] | None:
    """The attributes of a tag as name → value, or None when they are not all plainly well-formed (or repeat)."""
    if not text:
        return {}
    # Walked from one attribute's end to the next (a search restarting at every blank was quadratic on a flood);
    # only white space may follow the last.
    items = []
    position = 0
    while (m := _SCAN_ATTR.match(text, position)) is not None:
        items.append((m.group(1), m.group(2) if m.group(2) is not None else m.group(3)))
        position = m.end()
    found = dict(items)
    return found if len(found) == len(items) and not text[position:].strip(" \t\n") else None


def _xml_text(value: str) -> str:
    if "&" in value:
        for escaped, char in _XML_ESCAPES:
            value = value.replace(escaped, char)
    return value


def _scanned_entries(doc: SitemapDoc, matches: Iterable[tuple[str, ...]], limit: int) -> Iterator[SitemapEntry]:
    """``_url_entry`` and ``_validated`` in one loop for scanned ``<url>`` elements (the same entries, counts and
    problems); dates and priorities repeat, so each distinct text is parsed once per file."""
    seen: set[str] = set()
    invalid: list[str] = []
    counts = doc.counts
    counts.update(kept=0, invalid_loc=0, duplicates=0, over_limit=0)
    lastmods: dict[str, datetime | None] = {}
    priorities: dict[str, float] = {}
    kept = without_loc = 0
    try:
        for raw_loc, lastmod, changefreq, priority in matches:
            loc = clean_text(_xml_text(raw_loc)) if raw_loc else None
            if loc is None:
                without_loc += 1
                continue
            if not is_absolute_http(loc):
                counts["invalid_loc"] += 1
                if len(invalid) < 3:
                    invalid.append(loc[:100])
                continue
            if loc in seen:
                counts["duplicates"] += 1
                continue
            if kept >= limit:
                doc.over_limit = True
                counts["over_limit"] += 1
                doc.problem(f"more than {limit} URLs: the rest of the file dropped")
                break
            seen.add(loc)
            kept += 1
            counts["kept"] = kept
            if lastmod:
                if lastmod in lastmods:
                    when = lastmods[lastmod]
                else:
                    when = lastmods[lastmod] = parse_lastmod(clean_text(_xml_text(lastmod)))
            else:
                when = None
            if priority:
                value = priorities.get(priority)
                if value is None:
                    value = priorities[priority] = parse_priority(clean_text(_xml_text(priority)))
            else:
                value = DEFAULT_PRIORITY
            frequency = parse_changefreq(clean_text(_xml_text(changefreq))) if changefreq else None
            yield SitemapEntry(loc, when, frequency, value)
    finally:
        if without_loc:  # as ``_urlset_entries`` counts them, so both paths give one document
            counts["without_loc"] = without_loc
            doc.problem(f"{without_loc} <url> elements without a <loc> skipped")
        if counts["invalid_loc"]:
            doc.problem(f"{counts['invalid_loc']} <loc> values not absolute http(s) URLs dropped (e.g. {invalid!r})")


# --- plain text --------------------------------------------------------------------------------------------


def _text_entries(body: bytes) -> Iterator[SitemapEntry]:
    """sitemaps.org text format: one URL per line, UTF-8."""
    text = body.decode("utf-8", errors="replace").lstrip("\ufeff")
    for line in text.splitlines():
        loc = line.strip()
        if loc:
            yield SitemapEntry(loc=loc, priority=DEFAULT_PRIORITY)


# --- lxml streaming ----------------------------------------------------------------------------------------


_SITEMAP_WORDS = frozenset(("url", "loc", "lastmod", "changefreq", "priority", "sitemap"))
"""The protocol's own element names: read as sitemap elements in whatever namespace they stand (below)."""


def _local(tag: str, non_ns: bool) -> str:
    """usp's element naming: sitemap:/news:/image:/video: by namespace, non-namespaced sitemaps tolerated.

    Beyond usp: a protocol element name outside the sitemaps.org namespace (``<url xmlns="">`` under a namespaced
    root, or another namespace) is a sitemap element too, as Scrapy's parser (which strips every namespace) reads
    it; usp skipped those entries without a word. Extension namespaces keep their own (``image:loc``)."""
    if tag.startswith("{"):
        namespace, _, name = tag[1:].partition("}")
    else:
        namespace, name = "", tag
    if "/sitemap/" in namespace:
        return "sitemap:" + name
    if "/sitemap-news/" in namespace:
        return "news:" + name
    if "/sitemap-image/" in namespace:
        return "image:" + name
    if "/sitemap-video/" in namespace:
        return "video:" + name
    if name in ("urlset", "sitemapindex") or non_ns or name in _SITEMAP_WORDS:
        return "sitemap:" + name
    return name


class _Names:
    """Tag → usp-style name, memoized per document (a sitemap uses a handful of tags millions of times).

    ``foreign``: the tags read as sitemap elements though outside the sitemaps.org namespace of a namespaced root
    (Google Search Console calls that an "incorrect namespace"): their entries are kept, and counted."""

    __slots__ = ("cache", "foreign", "non_ns")

    def __init__(self, non_ns: bool) -> None:
        self.non_ns = non_ns
        self.cache: dict[Any, str] = {}
        self.foreign: set[str] = set()

    def __call__(self, tag: Any) -> str:
        name = self.cache.get(tag)
        if name is None:
            name = _local(tag, self.non_ns) if isinstance(tag, str) else ""
            if name.startswith("sitemap:") and not self.non_ns and "/sitemap/" not in tag:
                self.foreign.add(tag)
            self.cache[tag] = name
        return name

    def foreign_problem(self, count: int, what: str) -> str:
        tags = sorted(tag for tag in self.foreign if tag.rpartition("}")[2] == what)[:3]
        return (f"{count} <{what}> elements outside the sitemaps.org namespace read as sitemap entries "
                f"(incorrect namespace: {tags!r})")


def _iterparse(body: bytes, tag: str | None = None) -> Any:
    # No DTD, no entities, no network, no huge text nodes: the hardening usp gets from refusing DOCTYPE,
    # kept here as a second line behind the prolog check. recover=True keeps entries around broken markup.
    return etree.iterparse(
        BytesIO(body),
        events=("end",),
        tag=tag,
        recover=True,
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        load_dtd=False,
        remove_comments=True,
        remove_pis=True,
    )


# A start tag that another ``<`` interrupts before its ``>``. libxml2's incremental parser (iterparse) looks ahead
# to the next ``>`` for each one before it gives up on it, so n of them before a far ``>`` cost n times that
# distance: a megabyte of ``<a <a <a`` took a minute of CPU on the event loop. Well-formed XML has none outside
# comments and CDATA sections, which the pattern steps over (an unclosed one runs to the end, so a flood of them
# is still one pass); broken files have a few. Name starts as libxml2 takes them: ASCII letters, ``_``, ``:``
# and any non-ASCII byte.
_UNTERMINATED_TAG = re.compile(  # one leading "<", so the engine skips to each "<" instead of trying every byte
    rb"<(?:!\[CDATA\[(?:[^\]]++|\](?!\]>))*+(?:\]\]>|\Z)"
    rb"|!--(?:[^-]++|-(?!->))*+(?:-->|\Z)"
    rb"|([A-Za-z_:\x80-\xff])[^<>]*+(?=<))"
)
MAX_UNTERMINATED_TAGS = 16
"""Past this many, the file is cut before the next one: the look-aheads then cost at most 16 scans of the file."""


_UNTERMINATED_TAG_TEXT = re.compile(_UNTERMINATED_TAG.pattern.decode("ascii").replace(r"\x80-\xff", r"\x80-\U0010ffff"))
"""The same pattern over decoded text (a UTF-16 or UTF-32 file): any non-ASCII character starts a name."""


def _unterminated_cut(body: bytes, wide: tuple[str, int] | None) -> int | None:
    """Where to cut ``body`` before its 17th unterminated start tag, or None. A UTF-16/32 file (``wide``: its
    ``_wide_codec``) is read as text; any other (a stray NUL byte included) byte by byte."""
    if wide is not None:
        return _wide_unterminated_cut(body, wide)
    return _start_past_limit(_UNTERMINATED_TAG.finditer(body))


def _start_past_limit(matches: Iterator[re.Match[Any]]) -> int | None:
    """Where the first unterminated start tag past ``MAX_UNTERMINATED_TAGS`` begins (CDATA and comments, the
    pattern's other matches, not counted), or None."""
    count = 0
    for match in matches:
        if match.group(1) is not None:
            count += 1
            if count > MAX_UNTERMINATED_TAGS:
                return int(match.start())
    return None


def _wide_unterminated_cut(body: bytes, codec: tuple[str, int]) -> int | None:
    """``_unterminated_cut`` for a UTF-16 or UTF-32 file (NUL bytes up front), read as text: its code units can
    look like ``<`` and a name start (証 is 3C 8A), and libxml2's look-ahead is as slow on them. The cut is
    found in the decoded text and mapped back to a byte offset (an undecodable unit becomes one U+FFFD, which
    encodes to as many bytes, so the offset of what precedes it is exact)."""
    name, bom = codec
    text = body[bom:].decode(name, errors="replace")
    at = _start_past_limit(_UNTERMINATED_TAG_TEXT.finditer(text))
    return None if at is None else bom + len(text[:at].encode(name))


def _wide_codec(body: bytes) -> tuple[str, int] | None:
    """The fixed-endian codec of a UTF-16/32 file and the length of its byte-order mark, from the mark or (as
    XML 1.0 appendix F guesses it) from where the NUL bytes of the first ``<`` fall; None when neither tells."""
    for mark, name in ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"),
                       (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if body.startswith(mark):
            return name, len(mark)
    for first, name in ((b"<\x00\x00\x00", "utf-32-le"), (b"\x00\x00\x00<", "utf-32-be"),
                        (b"<\x00", "utf-16-le"), (b"\x00<", "utf-16-be")):
        if body.startswith(first):
            return name, 0
    # No mark and something before the "<" (white space): ASCII-range UTF-16 has a NUL in every other byte.
    head = body[:64]
    half = len(head) // 2
    if half >= 2 and head[1::2].count(0) == half and head[0::2].count(0) == 0:
        return "utf-16-le", 0
    if half >= 2 and head[0::2].count(0) == half and head[1::2].count(0) == 0:
        return "utf-16-be", 0
    return None


def _parse_lxml(prepared: PreparedSitemap, settings: DiscoverySettings, *, feeds: bool = True) -> SitemapDoc:
    url, body, cut = prepared.url, prepared.body, prepared.cut
    doc = SitemapDoc(url=url, kind="unknown", entries=iter(()), parser="lxml")
    if cut is not None:
        doc.problem(
            f"more than {MAX_UNTERMINATED_TAGS} unterminated start tags (slow for the XML parser to recover "
            f"from): the file is cut at byte {cut}"
        )
    events = _iterparse(body)
    try:
        first = next(events)[1]
    except StopIteration:
        doc.problem("no XML elements")
        return doc
    except etree.XMLSyntaxError as exc:
        doc.problem(f"XML error before any element: {exc!s:.200}")
        return doc
    tree = first.getroottree()
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise ContentRejected(f"sitemap {url} has a DOCTYPE declaration: refused")
    root = tree.getroot()
    root_tag = root.tag if isinstance(root.tag, str) else ""
    root_name = _local(root_tag, non_ns=False)
    # usp: a urlset/sitemapindex root without the sitemaps.org namespace puts every plain element in it.
    names = _Names(non_ns=root_name.startswith("sitemap:") and "/sitemap/" not in root_tag)
    if root_name == "sitemap:urlset":
        doc.kind = "urlset"
        # Parse again from the start with a tag filter: the kind is known, and lxml then reports only the
        # <url> ends (the first pass read one buffer; the tree of the rest is never built twice).
        del events, first, tree, root
        entries = _urlset_entries(doc, _iterparse(body, tag="{*}url"), names)
        doc.entries = _validated(doc, entries, settings.max_sitemap_urls)
    elif root_name == "sitemap:sitemapindex":
        doc.kind = "index"
        _index_children(doc, _events_from(doc, events, first), names, settings.max_sitemap_urls)
    elif root_name in ("rss", "feed", "rdf:RDF", "RDF"):
        kind: SitemapKind = "atom" if root_name == "feed" else "rss"
        if not feeds:
            return SitemapDoc(url=url, kind=kind, entries=iter(()), parser=FEED_UNREAD)
        # The whole file: feedparser has no such slow path, and a feed's HTML descriptions may hold many ``<``.
        return _parse_as_feed(prepared.whole, url, settings, kind=kind)
    else:
        doc.problem(f"unsupported root element {root_tag!r}")
    if cut is not None:  # logged here: a feed returned above is read whole, never cut
        logger.warning("sitemap %s: more than %d unterminated start tags; cut at byte %d", url,
                       MAX_UNTERMINATED_TAGS, cut, extra={"error_class": "bad_content"})
    return doc


def _events_from(doc: SitemapDoc, events: Any, first: Any) -> Iterator[Any]:
    yield first
    try:
        for _, elem in events:
            yield elem
    except etree.XMLSyntaxError as exc:
        doc.problem(f"XML error (entries before it kept): {exc!s:.200}")


def _urlset_entries(doc: SitemapDoc, events: Any, names: _Names) -> Iterator[SitemapEntry]:
    cache = names.cache
    foreign = names.foreign
    foreign_entries = 0
    counts = doc.counts
    try:
        for _, elem in events:
            tag = elem.tag
            if (cache.get(tag) or names(tag)) != "sitemap:url":
                continue
            entry = _url_entry(elem, names)
            # Bounded memory: drop the finished element and everything before it.
            elem.clear()
            parent = elem.getparent()
            if parent is not None:
                while elem.getprevious() is not None:
                    del parent[0]
            if entry is None:
                counts["without_loc"] = counts.get("without_loc", 0) + 1  # the problem is ``_validated``'s
                continue
            if foreign and tag in foreign:
                foreign_entries += 1
            yield entry
    except etree.XMLSyntaxError as exc:
        doc.problem(f"XML error (entries before it kept): {exc!s:.200}")
    finally:
        if foreign_entries:
            counts["foreign_namespace"] = foreign_entries
            doc.problem(names.foreign_problem(foreign_entries, "url"))


def _url_entry(elem: Any, names: _Names) -> SitemapEntry | None:
    loc = lastmod = changefreq = priority = None
    news: dict[str, str | None] = {}
    images: list[str] = []
    cache = names.cache
    for child in elem.iterdescendants():
        tag = child.tag
        name = cache.get(tag) or names(tag)
        if name == "sitemap:loc":
            if loc is None or tag not in names.foreign:  # a sitemaps.org <loc> beats another namespace's
                loc = child.text
        elif name == "sitemap:lastmod":
            lastmod = child.text
        elif name == "sitemap:changefreq":
            changefreq = child.text
        elif name == "sitemap:priority":
            priority = child.text
        elif name == "image:loc":
            image = clean_text(child.text)
            if image:
                images.append(image)
        elif name.startswith("news:"):
            news[name[5:]] = child.text
    loc = clean_text(loc)
    if loc is None:
        return None
    return SitemapEntry(
        loc=loc,
        lastmod=parse_lastmod(clean_text(lastmod)) if lastmod else None,
        changefreq=parse_changefreq(clean_text(changefreq)) if changefreq else None,
        priority=parse_priority(clean_text(priority)) if priority else DEFAULT_PRIORITY,
        news=_news(news) if news else None,
        images=images or (),
    )


def _news(fields: dict[str, str | None]) -> dict[str, Any] | None:
    """Google News fields, kept only with a title and a readable publication date (as usp does)."""
    title = clean_text(fields.get("title"))
    published = parse_lastmod(clean_text(fields.get("publication_date")))
    if not title or published is None:
        return None
    return news_dict(
        title=title,
        publish_date=published,
        publication_name=clean_text(fields.get("name")),
        publication_language=clean_text(fields.get("language")),
        access=clean_text(fields.get("access")),
        genres=_split_list(clean_text(fields.get("genres"))),
        keywords=_split_list(clean_text(fields.get("keywords"))),
        stock_tickers=_split_list(clean_text(fields.get("stock_tickers"))),
    )


def news_dict(
    *,
    title: str,
    publish_date: datetime | None,
    publication_name: str | None,
    publication_language: str | None,
    access: str | None,
    genres: list[str],
    keywords: list[str],
    stock_tickers: list[str],
) -> dict[str, Any]:
    """The JSON-able ``news`` field of an entry (dates as ISO 8601 UTC strings)."""
    published = utc(publish_date) if isinstance(publish_date, datetime) else None
    return {
        "title": title,
        "publish_date": published.isoformat() if published else None,
        "publication_name": publication_name,
        "publication_language": publication_language,
        "access": access,
        "genres": genres,
        "keywords": keywords,
        "stock_tickers": stock_tickers,
    }


def _split_list(value: str | None) -> list[str]:
    return [part.strip() for part in value.split(",")] if value else []


def _index_children(doc: SitemapDoc, elements: Iterator[Any], names: _Names, limit: int) -> None:
    """Index children, read eagerly (an index is at most 50,000 short entries), validated and deduplicated."""
    invalid = foreign = 0
    for elem in elements:
        if names(elem.tag) != "sitemap:sitemap":
            continue
        foreign += elem.tag in names.foreign
        loc = lastmod = None
        for child in elem.iterdescendants():
            name = names(child.tag)
            if name == "sitemap:loc":
                if loc is None or child.tag not in names.foreign:
                    loc = child.text
            elif name == "sitemap:lastmod":
                lastmod = child.text
        elem.clear()
        parent = elem.getparent()
        if parent is not None:
            while elem.getprevious() is not None:
                del parent[0]
        _add_child(doc, clean_text(loc), parse_lastmod(clean_text(lastmod)), limit)
        if loc is not None and not is_absolute_http(clean_text(loc) or ""):
            invalid += 1
        if doc.over_limit:
            break
    if foreign:
        doc.counts["foreign_namespace"] = foreign
        doc.problem(names.foreign_problem(foreign, "sitemap"))
    _finish_index(doc, invalid)


def _add_child(doc: SitemapDoc, loc: str | None, lastmod: datetime | None, limit: int) -> None:
    if loc is None or not is_absolute_http(loc) or loc in doc.child_lastmod:
        return
    if len(doc.children) >= limit:
        doc.over_limit = True
        doc.problem(f"index lists more than {limit} sitemaps: the rest dropped")
        return
    doc.children.append(loc)
    doc.child_lastmod[loc] = lastmod


def _finish_index(doc: SitemapDoc, invalid: int) -> None:
    doc.counts["children"] = len(doc.children)
    if invalid:
        doc.counts["invalid_loc"] = invalid
        doc.problem(f"{invalid} child <loc> values not absolute http(s) URLs dropped")
    if doc.url in doc.child_lastmod:
        doc.problem("index lists itself")


def _parse_as_feed(body: bytes, url: str, settings: DiscoverySettings, *, kind: SitemapKind) -> SitemapDoc:
    """sitemaps.org accepts RSS 2.0 and Atom 1.0 feeds as sitemaps: read them with the feed parser."""
    feed = parse_feed(body, url=url, max_entries=settings.max_sitemap_urls + 1)
    doc = SitemapDoc(url=url, kind=kind, entries=iter(()), parser="feed")
    for message in feed.problems:
        doc.problem(message)
    raw = (SitemapEntry(loc=item.link, lastmod=item.lastmod) for item in feed.entries)
    doc.entries = _validated(doc, raw, settings.max_sitemap_urls)
    return doc


# --- ultimate-sitemap-parser -------------------------------------------------------------------------------


def decode_xml(body: bytes) -> str:
    """``body`` as text for usp (which takes ``str``): BOM, then the XML declaration, then UTF-8."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if body.startswith(bom):
            return body.decode(codec, errors="replace").lstrip("\ufeff")
    declared = _XML_ENCODING.match(body[:200])
    codec = declared.group(1).decode("ascii") if declared else "utf-8"
    try:
        return body.decode(codec, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def _parse_usp(body: bytes, url: str, settings: DiscoverySettings) -> SitemapDoc:
    from usp.objects.sitemap import (
        AbstractIndexSitemap,
        InvalidSitemap,
        PagesAtomSitemap,
        PagesRSSSitemap,
        PagesXMLSitemap,
    )
    from usp.tree import sitemap_from_str

    parsed = sitemap_from_str(decode_xml(body))
    doc = SitemapDoc(url=url, kind="unknown", entries=iter(()), parser="usp")
    if isinstance(parsed, AbstractIndexSitemap):
        doc.kind = "index"
        for child in parsed.sub_sitemaps:
            _add_child(doc, clean_text(child.url), None, settings.max_sitemap_urls)
            if doc.over_limit:
                break
        _finish_index(doc, 0)
        return doc
    if isinstance(parsed, InvalidSitemap):
        doc.problem(f"usp: {parsed.reason}")
        return doc
    doc.kind = (
        "urlset"
        if isinstance(parsed, PagesXMLSitemap)
        else "rss"
        if isinstance(parsed, PagesRSSSitemap)
        else "atom"
        if isinstance(parsed, PagesAtomSitemap)
        else "unknown"
    )
    doc.entries = _validated(doc, (_from_usp(page) for page in parsed.pages), settings.max_sitemap_urls)
    return doc


def _from_usp(page: Any) -> SitemapEntry:
    story = page.news_story
    news = None
    if story is not None:
        news = news_dict(
            title=story.title,
            publish_date=story.publish_date,
            publication_name=story.publication_name,
            publication_language=story.publication_language,
            access=story.access,
            genres=list(story.genres),
            keywords=list(story.keywords),
            stock_tickers=list(story.stock_tickers),
        )
    images = [loc for image in page.images or () if (loc := clean_text(image.loc))]
    return SitemapEntry(
        loc=page.url,
        # usp hands back "" (not None) for an empty <lastmod></lastmod>.
        lastmod=utc(page.last_modified) if isinstance(page.last_modified, datetime) else None,
        changefreq=getattr(page.change_frequency, "value", None),  # "" for an empty element, as lastmod
        priority=float(page.priority) if page.priority is not None else None,
        news=news,
        images=images or (),
    )
