"""RSS, Atom and JSON Feed: find feed links in HTML, and turn a feed body into entry links with dates.

Bytes in, records out: never fetches (feedparser is only ever handed bytes, never a URL), never touches SQL.
Bounded: at most ``max_entries`` entries per feed; entity declarations are refused before parsing.
"""

from __future__ import annotations

import calendar
import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from harvester.discovery._html import HTML_SPACE, absolute_http, document_base, parse_html
from harvester.discovery.sitemap_model import lastmod_until, mark_controls
from harvester.errors import ContentRejected
from harvester.rules.classify import FEEDISH_HREF, is_feed_url
from harvester.runtime import aware

logger = logging.getLogger(__name__)

MAX_FEED_ENTRIES = 10_000
"""Entries kept per feed; real feeds carry 10–100, anything near this is a sitemap in disguise or hostile."""

FEED_LINK_TYPES = frozenset(
    (
        "application/rss+xml",
        "application/atom+xml",
        "application/feed+json",
        "application/json",
        "application/rdf+xml",
        "application/x.atom+xml",
        "application/x-atom+xml",
        "text/xml",
        "application/xml",
    )
)
"""``<link rel="alternate" type=...>`` media types that name a feed (generic XML only with a feed-like href)."""

_GENERIC_TYPES = frozenset(("application/json", "text/xml", "application/xml"))
_ENTITY_DECL = re.compile(rb"<!ENTITY", re.IGNORECASE)
_JSONFEED_VERSION = "https://jsonfeed.org/version/1"

FeedKind = Literal["rss", "atom", "json", "unknown"]


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One feed item: its link, and the dates the feed gives (UTC, aware)."""

    link: str
    published: datetime | None = None
    updated: datetime | None = None
    title: str | None = None
    updated_until: datetime | None = None
    """The end of the period a reduced-precision ``updated`` names (W3C-DTF "2026-12" of Atom 0.3, RSS's dc:date):
    ``sitemap_model.lastmod_until``, as for a sitemap's lastmod; None for a moment."""

    @property
    def lastmod(self) -> datetime | None:
        """The newest date the feed states for this entry: what discovery stores as lastmod."""
        return self.updated or self.published


@dataclass(slots=True)
class FeedDoc:
    """A parsed feed. ``problems`` names what was dropped or wrong (bozo XML, invalid links, over the cap).

    ``next_page`` and ``prev_archive`` are the RFC 5005 links to older entries: a paged feed's next page
    (``rel="next"``, or JSON Feed's ``next_url``) and an archived feed's previous archive (``rel="prev-archive"``),
    absolute, or None.
    """

    url: str
    kind: FeedKind
    entries: list[FeedEntry] = field(default_factory=list)
    title: str | None = None
    problems: list[str] = field(default_factory=list)
    over_limit: bool = False
    next_page: str | None = None
    prev_archive: str | None = None


def find_feed_links(html: bytes, *, base_url: str, content_type: str | None = None) -> list[str]:
    """Absolute feed URLs named by ``<link rel="alternate" type=...>`` (and ``<a>`` to obvious feed URLs).

    Order of appearance, deduplicated; ``<base href>`` honoured. Broken HTML yields what parsed, never raises.
    """
    root = parse_html(html, content_type)
    if root is None:
        return []
    return feed_links_in(root, document_base(root, base_url))


def feed_links_in(root: Any, base: str) -> list[str]:
    """``find_feed_links`` over an already parsed document (listings.py parses once for everything)."""
    found: list[str] = []
    for el in root.iter("link", "a"):
        href = (el.get("href") or "").strip(HTML_SPACE)
        if not href or href.startswith("#") or not names_a_feed(el, href):
            continue
        url = absolute_http(href, base)
        if url is not None and url not in found:
            found.append(url)
    return found


def names_a_feed(el: Any, href: str) -> bool:
    """Whether a ``<link>`` or ``<a>`` with this (stripped, non-empty) href points at a feed (``feed_links_in``)."""
    if el.tag == "link":
        rels = (el.get("rel") or "").lower().split()
        media = (el.get("type") or "").split(";")[0].strip().lower()
        if "alternate" not in rels and "feed" not in rels:
            return False
        if media not in FEED_LINK_TYPES and "feed" not in rels:
            return False
        return not (media in _GENERIC_TYPES and not FEEDISH_HREF.search(href))
    return is_feed_url(href)




def parse_feed(body: bytes, *, url: str, max_entries: int = MAX_FEED_ENTRIES) -> FeedDoc:
    """Entries of an RSS/Atom (feedparser) or JSON Feed body; links resolved against ``url``.

    Raises ContentRejected for entity declarations (billion laughs, XXE). A body that is not a feed gives
    ``kind="unknown"`` with no entries and a problem saying so.
    """
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"{"):
        return _parse_json_feed(body, url=url, max_entries=max_entries)
    if _ENTITY_DECL.search(body[:65536]):
        raise ContentRejected(f"feed {url} declares XML entities (billion laughs / XXE): refused")
    # feedparser never fetches when handed bytes; resolve_relative_uris and sanitizing are for content we skip.
    if not head.startswith((b"\xff\xfe", b"\xfe\xff", b"<\x00", b"\x00<")):  # never in UTF-16/32: NUL bytes there
        body = mark_controls(body)  # a link holding a control character is refused, not stripped of it
    import feedparser  # here, not at the top: ~40 ms every command paid before its first request (issue 31)

    parsed = feedparser.parse(body, resolve_relative_uris=False, sanitize_html=False)
    version = str(parsed.get("version") or "")
    kind: FeedKind = "atom" if version.startswith("atom") else "rss" if version.startswith("rss") else "unknown"
    doc = FeedDoc(url=url, kind=kind, title=_text(parsed.feed.get("title")))
    doc.next_page, doc.prev_archive = _history_links(parsed.feed.get("links"), url)
    if parsed.get("bozo"):
        doc.problems.append(f"malformed feed XML: {parsed.get('bozo_exception')!s:.200}")
    if kind == "unknown" and not parsed.entries:
        doc.problems.append("not an RSS or Atom feed")
        return doc
    linked = ((absolute_http(link, url) if (link := _entry_link(item)) else None, item) for item in parsed.entries)
    _collect(doc, linked, _rss_entry, max_entries)
    return doc


def _rss_entry(link: str, item: Any) -> FeedEntry:
    # dict.get: FeedParserDict.get("updated_parsed") falls back to the published date (with a DeprecationWarning,
    # feedparser issue 310); each date must mean what it says.
    updated = _struct_time(dict.get(item, "updated_parsed"))
    raw = dict.get(item, "updated")
    return FeedEntry(
        link=link, published=_struct_time(dict.get(item, "published_parsed")),
        updated=updated, title=_text(item.get("title")),
        updated_until=lastmod_until(raw, updated) if isinstance(raw, str) else None,
    )


def _parse_json_feed(body: bytes, *, url: str, max_entries: int) -> FeedDoc:
    doc = FeedDoc(url=url, kind="json")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        doc.kind = "unknown"
        doc.problems.append(f"invalid JSON: {exc!s:.200}")
        return doc
    if not isinstance(data, dict) or not str(data.get("version", "")).startswith(_JSONFEED_VERSION):
        doc.kind = "unknown"
        doc.problems.append("JSON without a https://jsonfeed.org/version/1.x version: not a JSON Feed")
        return doc
    doc.title = _text(data.get("title"))
    next_url = data.get("next_url")
    if isinstance(next_url, str) and (absolute := absolute_http(next_url, url)) not in (None, url):
        doc.next_page = absolute
    items = data.get("items")
    if not isinstance(items, list):
        doc.problems.append("JSON Feed without an items list")
        return doc
    _collect(doc, ((_json_link(item, url), item) for item in items), _json_entry, max_entries)
    return doc


def _json_link(item: Any, base: str) -> str | None:
    """JSON Feed 1.1: "url" is the permalink; "external_url" points elsewhere (a linked article)."""
    if not isinstance(item, dict):
        return None
    link = item.get("url") or item.get("external_url")
    return absolute_http(link, base) if isinstance(link, str) else None


def _json_entry(link: str, item: Any) -> FeedEntry:
    return FeedEntry(
        link=link, published=_rfc3339(item.get("date_published")), updated=_rfc3339(item.get("date_modified")),
        title=_text(item.get("title")),
    )


def _collect(
    doc: FeedDoc, linked: Iterable[tuple[str | None, Any]], entry: Callable[[str, Any], FeedEntry], max_entries: int
) -> None:
    """``doc.entries`` from (absolute link or None, item) pairs, in order: each link once, at most ``max_entries``
    (then ``over_limit``, and the rest is not read); an item without a usable link is counted as invalid."""
    invalid = 0
    seen: set[str] = set()
    for absolute, item in linked:
        if absolute is None:
            invalid += 1
            continue
        if absolute in seen:
            continue
        if len(doc.entries) >= max_entries:
            doc.over_limit = True
            break
        seen.add(absolute)
        doc.entries.append(entry(absolute, item))
    _finish(doc, invalid, max_entries)


def _history_links(links: Any, url: str) -> tuple[str | None, str | None]:
    """(next page, previous archive) among a feed's links (RFC 5005 §3 and §4), absolute; a link back to the
    document itself is dropped (a loop in one step)."""
    found: dict[str, str] = {}
    for link in links or ():
        rel = str(link.get("rel") or "").strip().lower()
        href = link.get("href")
        if rel in ("next", "prev-archive") and rel not in found and isinstance(href, str) and href.strip():
            absolute = absolute_http(href, url)
            if absolute is not None and absolute != url:
                found[rel] = absolute
    return found.get("next"), found.get("prev-archive")


def _finish(doc: FeedDoc, invalid: int, max_entries: int) -> None:
    if invalid:
        doc.problems.append(f"{invalid} entries without an absolute http(s) link (or with a control character in it)"
                            " dropped")
    if doc.over_limit:
        doc.problems.append(f"more than {max_entries} entries: the rest dropped")


def _entry_link(item: Any) -> str | None:
    link = item.get("link")
    if isinstance(link, str) and link.strip(HTML_SPACE):
        return link.strip(HTML_SPACE)  # never a control character: ``absolute_http`` refuses one
    for candidate in item.get("links") or ():
        href = candidate.get("href")
        if href and candidate.get("rel", "alternate") == "alternate":
            return str(href).strip(HTML_SPACE)
    guid = item.get("id")
    if isinstance(guid, str) and guid.startswith(("http://", "https://")) and item.get("guidislink", True):
        return guid
    return None


def _struct_time(value: Any) -> datetime | None:
    if not isinstance(value, time.struct_time):
        return None
    try:
        return datetime.fromtimestamp(calendar.timegm(value), tz=UTC)
    except (OverflowError, ValueError, OSError):
        return None


def _rfc3339(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return aware(parsed)


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


_NUMBER = re.compile(r"\d+")


def numbered_successors(previous: str, current: str, count: int) -> list[str]:
    """The ``count`` pages after ``current`` when ``previous`` → ``current`` stepped exactly one number in the
    URL (``?page=2`` → ``?page=3``, ``/page/20/`` → ``/page/40/``, ``?offset=20`` → ``?offset=40``); else none.

    A paged feed names only its next page, so its pages are read one after another, each a round trip while the
    host's other slots idle; a feed numbered this regularly can have its next pages asked beside the current one.
    These are guesses, asked only to be used when a page read names them: one whose URL differs in anything but
    that one number (a timestamp, a cursor, a zero padding that changes) gives none."""
    before, after = _NUMBER.split(previous), _NUMBER.split(current)
    old, new = _NUMBER.findall(previous), _NUMBER.findall(current)
    if count <= 0 or before != after or len(old) != len(new):
        return []
    changed = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
    if len(changed) != 1:
        return []
    at = changed[0]
    if len(new[at]) > 18 or len(old[at]) > 18:  # no page number; and int() refuses 4,300 digits and more
        return []
    step = int(new[at]) - int(old[at])
    width = len(new[at]) if new[at].startswith("0") and len(new[at]) > 1 else 0
    if step <= 0 or (width and len(old[at]) != width):
        return []
    guesses = []
    for k in range(1, count + 1):
        numbers = [*new]
        numbers[at] = str(int(new[at]) + k * step).zfill(width)
        guesses.append("".join(part + (numbers[i] if i < len(numbers) else "") for i, part in enumerate(after)))
    return guesses
