"""Plain urlsets read by one regex after the whole file is proven to be one: the fast path of sitemap ingestion
(a property test holds it equal to the lxml path on every generated urlset)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime

from harvester.discovery.sitemap_model import (
    DEFAULT_PRIORITY,
    LocCheck,
    SitemapDoc,
    SitemapEntry,
    clean_text,
    lastmod_period,
    parse_changefreq,
    parse_priority,
)
from harvester.settings import DiscoverySettings

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
# The four fields in any order; a repeated lastmod, changefreq or priority keeps its last value, as
# ``_url_entries`` does (a repeated ``<loc>`` never gets here: the content pattern sends it to lxml).
_SCAN_URL = re.compile(rf"<url>{_WS}*(?:(?:{_SCAN_FIELD}){_WS}*)*</url>")
# The whole root's content: ``<url>`` elements of at most one ``<loc>`` each, white space, and stray lastmod,
# changefreq or priority elements between them (which lxml ignores too), and nothing else: several ``<loc>`` in one
# ``<url>``, or a ``<loc>`` outside any, are lxml's to read and report. Every repetition is possessive and every
# alternative starts differently, so a hostile file costs one linear pass, never a backtracking search.
_SCAN_OTHER_BARE = "|".join(f"<{name}>[^<]*+</{name}>" for name in ("lastmod", "changefreq", "priority"))
_SCAN_CONTENT = re.compile(
    rf"(?:{_WS}++|<url>(?:{_WS}++|{_SCAN_OTHER_BARE})*+(?:<loc>[^<]*+</loc>(?:{_WS}++|{_SCAN_OTHER_BARE})*+)?</url>"
    rf"|{_SCAN_OTHER_BARE})*+"
)

SCAN_WINDOW = 262_144
"""Characters the scanner hands one regular-expression call. A call holds the GIL (so an event loop) for its
whole run: on a 7 MB file, ~15 ms to prove the content and ~45 ms to match it. In ranges of this size no call
takes more than a few milliseconds, and matching stops where ``max_sitemap_urls`` does."""
_XML_ESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&apos;", "'"), ("&amp;", "&"))


def scan_urlset(body: bytes, url: str, settings: DiscoverySettings) -> SitemapDoc | None:
    """A plain urlset read with one regular expression instead of an XML parser, or None for lxml to read.

    Most sitemaps are generated: a sitemaps.org ``<urlset>`` of ``<url>`` elements holding ``<loc>``,
    ``<lastmod>``, ``<changefreq>`` and ``<priority>`` (one ``<loc>`` each), and nothing else. For those, lxml's
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
    """``_url_entries`` and ``validated_entries`` in one loop for scanned ``<url>`` elements (the same entries, counts
    and problems); dates and priorities repeat, so each distinct text is parsed once per file."""
    check = LocCheck(doc)
    counts = doc.counts
    lastmods: dict[str, tuple[datetime | None, datetime | None]] = {}
    priorities: dict[str, float] = {}
    kept = without_loc = 0
    try:
        for raw_loc, lastmod, changefreq, priority in matches:
            loc = clean_text(_xml_text(raw_loc)) if raw_loc else None
            if loc is None:
                without_loc += 1
                continue
            if check.refuses(loc):
                continue
            if kept >= limit:
                doc.over_limit = True
                counts["over_limit"] += 1
                doc.problem(f"more than {limit} URLs: the rest of the file dropped")
                break
            kept += 1
            counts["kept"] = kept
            if lastmod:
                if lastmod in lastmods:
                    when, until = lastmods[lastmod]
                else:
                    text = clean_text(_xml_text(lastmod))
                    when, until = lastmod_period(text)
                    lastmods[lastmod] = when, until
            else:
                when = until = None
            if priority:
                value = priorities.get(priority)
                if value is None:
                    value = priorities[priority] = parse_priority(clean_text(_xml_text(priority)))
            else:
                value = DEFAULT_PRIORITY
            frequency = parse_changefreq(clean_text(_xml_text(changefreq))) if changefreq else None
            yield SitemapEntry(loc, when, frequency, value, lastmod_until=until)
    finally:
        if without_loc:  # as ``_urlset_entries`` counts them, so both paths give one document
            counts["without_loc"] = without_loc
            doc.problem(f"{without_loc} <url> elements without a <loc> skipped")
        check.report(doc)
