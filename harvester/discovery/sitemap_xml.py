"""Sitemaps streamed through lxml (recover on): urlsets with extensions (images, news), indexes, any namespace, and
the cut that keeps libxml2's look-ahead from costing a minute on hostile markup."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import BytesIO
from typing import Any

from lxml import etree

from harvester.discovery.feeds import parse_feed
from harvester.discovery.sitemap_model import (
    DEFAULT_PRIORITY,
    FEED_UNREAD,
    PreparedSitemap,
    SitemapDoc,
    SitemapEntry,
    SitemapKind,
    clean_text,
    is_absolute_http,
    lastmod_period,
    parse_changefreq,
    parse_lastmod,
    parse_priority,
    utc,
    validated_entries,
)
from harvester.errors import ContentRejected
from harvester.settings import DiscoverySettings

logger = logging.getLogger(__name__)
_DAY = timedelta(days=1)


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


def unterminated_cut(body: bytes, wide: tuple[str, int] | None) -> int | None:
    """Where to cut ``body`` before its 17th unterminated start tag, or None. A UTF-16/32 file (``wide``: its
    ``wide_codec``) is read as text; any other (a stray NUL byte included) byte by byte."""
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
    """``unterminated_cut`` for a UTF-16 or UTF-32 file (NUL bytes up front), read as text: its code units can
    look like ``<`` and a name start (証 is 3C 8A), and libxml2's look-ahead is as slow on them. The cut is
    found in the decoded text and mapped back to a byte offset (an undecodable unit becomes one U+FFFD, which
    encodes to as many bytes, so the offset of what precedes it is exact)."""
    name, bom = codec
    text = body[bom:].decode(name, errors="replace")
    at = _start_past_limit(_UNTERMINATED_TAG_TEXT.finditer(text))
    return None if at is None else bom + len(text[:at].encode(name))


def wide_codec(body: bytes) -> tuple[str, int] | None:
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


def parse_lxml(prepared: PreparedSitemap, settings: DiscoverySettings, *, feeds: bool = True) -> SitemapDoc:
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
        doc.entries = validated_entries(doc, entries, settings.max_sitemap_urls)
    elif root_name == "sitemap:sitemapindex":
        doc.kind = "index"
        _index_children(doc, _events_from(doc, events, first), names, settings.max_sitemap_urls)
        note_recovered(doc, events)
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
    foreign_entries = several = stray = nested = 0
    root = None
    counts = doc.counts
    try:
        for _, elem in events:
            tag = elem.tag
            if (cache.get(tag) or names(tag)) != "sitemap:url":
                continue
            entries = _url_entries(elem, names)
            elem.clear()
            parent = elem.getparent()
            if parent is not None:
                if parent is not root and (cache.get(parent.tag) or names(parent.tag)) == "sitemap:url":
                    nested += 1  # inside an unclosed <url>: what precedes it there is that one's own <loc>
                else:
                    root = parent
                    # Bounded memory: drop the finished element and everything before it (stray <loc> counted).
                    while (previous := elem.getprevious()) is not None:
                        if previous.tag != tag:
                            stray += (cache.get(previous.tag) or names(previous.tag)) == "sitemap:loc"
                        del parent[0]
            if not entries:
                counts["without_loc"] = counts.get("without_loc", 0) + 1  # the problem is ``validated_entries``'s
                continue
            if foreign and tag in foreign:
                foreign_entries += 1
            if len(entries) == 1:
                yield entries[0]
            else:
                several += 1
                yield from entries
        stray += _stray_locs(root, names)
    except etree.XMLSyntaxError as exc:
        doc.problem(f"XML error (entries before it kept): {exc!s:.200}")
    finally:
        note_recovered(doc, events)
        _report_shape(doc, "url", several=several, nested=nested, stray=stray)
        if foreign_entries:
            counts["foreign_namespace"] = foreign_entries
            doc.problem(names.foreign_problem(foreign_entries, "url"))


def note_recovered(doc: SitemapDoc, events: Any) -> None:
    """The first error lxml's recovery passed over, as ``doc.malformed`` and a problem: recovery reads on without a
    word, and what it could not make sense of is dropped (``<<broken & </oops>`` after the 4th of 6 entries ended
    the file there: two URLs lost, the document shown as read whole). What follows the error may be lost, so the
    file is no whole list either (its missing URLs say nothing)."""
    # Invalid bytes for the declared encoding (a stray Latin-1 byte in a UTF-8 file, common) are replaced and the
    # reading goes on with every entry: no break, so the file stays a whole list (review: one such byte turned off
    # the detection of vanished URLs for good).
    errors = [e for e in events.error_log.filter_from_errors()
              if e.type_name != "ERR_INVALID_ENCODING" and e.domain_name != "ENCODING"]
    if not errors or doc.malformed is not None:
        return
    first = errors[0]
    doc.malformed = f"malformed XML at line {first.line}, column {first.column} ({str(first.message).strip():.120})"
    doc.problem(f"{doc.malformed}: the entries read up to it kept, any after it may be lost")


def _report_shape(doc: SitemapDoc, what: str, *, several: int, nested: int, stray: int) -> None:
    """Problems (and counts) for entries whose ``<loc>`` are not one per ``<url>`` / ``<sitemap>``: each one read
    is reported, so none is lost without a word (issue 31)."""
    if several:
        doc.counts["several_locs"] = several
        doc.problem(f"{several} <{what}> elements with several <loc> (an unclosed <{what}>, or a hand-made list): "
                    "each <loc> read as an entry of its own, without the element's <lastmod> (it dates none of them)")
    if nested:
        doc.counts["nested_entries"] = nested
        doc.problem(f"{nested} <{what}> elements inside another (the one before was not closed): read as entries "
                    "of their own")
    if stray:
        doc.counts["stray_locs"] = stray
        doc.problem(f"{stray} <loc> elements outside any <{what}> ignored (no entry holds them)")


def _release(elem: Any, names: _Names) -> int:
    """Bounded memory: drop a finished entry element and everything before it, unless it sits inside another
    entry (an unclosed ``<url>`` or ``<sitemap>`` that recovery nests the next one in): what precedes it there
    is the outer entry's own ``<loc>``, read when that one ends. Returns how many ``<loc>`` outside any entry
    were dropped with it (stray ones, between entries)."""
    elem.clear()
    parent = elem.getparent()
    if parent is None or names(parent.tag) in ("sitemap:url", "sitemap:sitemap"):
        return 0
    stray = 0
    while (previous := elem.getprevious()) is not None:
        stray += names(previous.tag) == "sitemap:loc"
        del parent[0]
    return stray


def _stray_locs(parent: Any, names: _Names) -> int:
    """``<loc>`` elements left directly under the root after its last entry."""
    return 0 if parent is None else sum(names(child.tag) == "sitemap:loc" for child in parent)


def _url_entries(elem: Any, names: _Names) -> list[SitemapEntry]:
    """The entries of one ``<url>``: one per sitemaps.org ``<loc>`` (a ``<loc>`` in another namespace only when it
    has none), usually one; with several, none carries the element's lastmod (it cannot say whose it is)."""
    first: str | None = None
    has_first = False
    more: list[str | None] | None = None  # the second and later sitemaps.org <loc>, rare
    foreign_locs: list[str | None] | None = None
    lastmod = changefreq = priority = None
    news: dict[str, str | None] = {}
    images: list[str] = []
    cache = names.cache
    foreign = names.foreign
    for child in elem.iterdescendants():
        tag = child.tag
        name = cache.get(tag) or names(tag)
        if name == "sitemap:loc":
            if foreign and tag in foreign:
                foreign_locs = [*(foreign_locs or ()), child.text]
            elif not has_first:
                first, has_first = child.text, True
            else:
                more = [*(more or ()), child.text]
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
    raw = ([first, *more] if more else [first]) if has_first else (foreign_locs or [])
    found = [loc for text in raw if (loc := clean_text(text)) is not None]
    if not found:
        return []
    text = clean_text(lastmod) if lastmod and len(found) == 1 else None
    when, until = lastmod_period(text)
    frequency = parse_changefreq(clean_text(changefreq)) if changefreq else None
    value = parse_priority(clean_text(priority)) if priority else DEFAULT_PRIORITY
    entry = SitemapEntry(loc=found[0], lastmod=when, changefreq=frequency, priority=value,
                         news=_news(news) if news else None, images=images or (),
                         lastmod_until=until)
    if len(found) == 1:
        return [entry]
    return [entry, *(SitemapEntry(loc, None, frequency, value) for loc in found[1:])]


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
    invalid = foreign = several = stray = nested = 0
    for elem in elements:
        if names(elem.tag) != "sitemap:sitemap":
            continue
        foreign += elem.tag in names.foreign
        locs: list[str | None] = []
        foreign_locs: list[str | None] = []
        lastmod = None
        for child in elem.iterdescendants():
            name = names(child.tag)
            if name == "sitemap:loc":
                (foreign_locs if child.tag in names.foreign else locs).append(child.text)
            elif name == "sitemap:lastmod":
                lastmod = child.text
        parent = elem.getparent()
        nested += parent is not None and names(parent.tag) == "sitemap:sitemap"
        stray += _release(elem, names)
        found = [clean_text(raw) for raw in (locs or foreign_locs) if raw is not None]
        several += len(found) > 1
        text = clean_text(lastmod) if len(found) == 1 else None  # several: whose date is it?
        # A child is skipped while its lastmod is not newer than our copy: a month's or a year's last moment is the
        # date it may mean ("2026-12": up to 31 December), as a date alone is read as the end of its day
        # (``newer_than_copy``, which this midnight start is left to), a minute as its last second and a time
        # without a zone as its latest reading (UTC-12).
        start, until = lastmod_period(text)
        dated = start if until is None or start is None or until - start == _DAY else until - timedelta(microseconds=1)
        for loc in found:
            add_child(doc, loc, dated, limit)
            if not is_absolute_http(loc or ""):
                invalid += 1
        if doc.over_limit:
            break
    if foreign:
        doc.counts["foreign_namespace"] = foreign
        doc.problem(names.foreign_problem(foreign, "sitemap"))
    _report_shape(doc, "sitemap", several=several, nested=nested, stray=stray)
    finish_index(doc, invalid)


def add_child(doc: SitemapDoc, loc: str | None, lastmod: datetime | None, limit: int) -> None:
    if loc is None or not is_absolute_http(loc) or loc in doc.child_lastmod:
        return
    if len(doc.children) >= limit:
        doc.over_limit = True
        doc.problem(f"index lists more than {limit} sitemaps: the rest dropped")
        return
    doc.children.append(loc)
    doc.child_lastmod[loc] = lastmod


def finish_index(doc: SitemapDoc, invalid: int) -> None:
    doc.counts["children"] = len(doc.children)
    if invalid:
        doc.counts["invalid_loc"] = invalid
        doc.problem(f"{invalid} child <loc> values not absolute http(s) URLs (or holding a control character) dropped")
    if doc.url in doc.child_lastmod:
        doc.problem("index lists itself")


def _parse_as_feed(body: bytes, url: str, settings: DiscoverySettings, *, kind: SitemapKind) -> SitemapDoc:
    """sitemaps.org accepts RSS 2.0 and Atom 1.0 feeds as sitemaps: read them with the feed parser."""
    feed = parse_feed(body, url=url, max_entries=settings.max_sitemap_urls + 1)
    doc = SitemapDoc(url=url, kind=kind, entries=iter(()), parser="feed")
    for message in feed.problems:
        doc.problem(message)
    raw = (SitemapEntry(loc=item.link, lastmod=item.lastmod, lastmod_until=item.updated_until if item.updated else None)
           for item in feed.entries)
    doc.entries = validated_entries(doc, raw, settings.max_sitemap_urls)
    return doc
