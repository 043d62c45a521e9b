"""The records every sitemap parser produces and the one normalization they all end in (which is what makes them
comparable): entries, documents, and the field parsers for loc, lastmod, priority and changefreq."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from email.utils import parsedate_to_datetime
from typing import Any, Literal, NamedTuple

from harvester.discovery._html import has_utf8_form
from harvester.runtime import aware

SitemapKind = Literal["index", "urlset", "text", "rss", "atom", "unknown"]
FEED_UNREAD = "feed-unread"
"""``SitemapDoc.parser`` of a feed named as a sitemap and parsed with ``feeds=False``: only its kind is known; the
caller parses it again with ``feeds=True`` where feedparser's half a second per megabyte harms nothing."""
ENTITY_REF = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
W3C_PARTIAL = re.compile(r"(\d{4})(?:-(\d{2}))?")
W3C_REDUCED = re.compile(r"\d{4}(-\d{2}(-\d{2}(T\d{2}:\d{2}(?:Z|[+-]\d{2}:\d{2}))?)?)?")
"""The W3C Datetime forms (NOTE-datetime) that name a period, not a moment: YYYY, YYYY-MM, YYYY-MM-DD, and
YYYY-MM-DDThh:mmTZD (no seconds)."""
BASIC_DATE = re.compile(r"\d{8}")
"""ISO 8601's basic date (20261207): a day, as 2026-12-07."""
ZONELESS_TIME = re.compile(r"\d{4}-?\d{2}-?\d{2}[T ]\d{2}(:?\d{2}(:?\d{2}(?:[.,]\d+)?)?)?")
"""An ISO 8601 date and time without a zone (2026-12-07T10:00:00, 2026-12-07T10:00): the site's local time, whose
instant is anywhere from its reading at UTC+14 to its reading at UTC-12."""
EARLIEST_OFFSET = timedelta(hours=14)
LATEST_OFFSET = timedelta(hours=12)
"""The zones farthest east (UTC+14) and west (UTC-12) of UTC: a zone-less time is at most this far from UTC."""
XML_ENCODING = re.compile(rb"""^<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")



CONTROL_MARK = b"\t&#xE000;"
"""What ``prepare_sitemap`` writes in place of a control character XML forbids (raw, or as a character reference):
libxml2's recovery deletes those, which turned "/a<NUL>b" into "/ab", a URL the site never named. A tab (no URL
holds one) then U+E000 (no strip removes it), so the ``<loc>`` holding it is refused, by class (issue 31)."""

_CONTROL_IN_LOC = re.compile("[\x00-\x1f\x7f-\x9f]")


_FORBIDDEN_CONTROL = re.compile(
    rb"[\x00-\x08\x0b\x0c\x0e-\x1f]|&#(?:[xX]0*(?:[0-8bBcCeEfF]|1[0-9a-fA-F])|0*(?:[0-8]|1[124-9]|2[0-9]|3[01]));"
)
"""A control character XML 1.0 forbids, raw or as a character reference: libxml2's recovery and expat delete it or
stop there. Any ASCII-compatible encoding writes these as these bytes."""


_FORBIDDEN_BYTES = bytes((*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)))
_NOT_FORBIDDEN = bytes(b for b in range(256) if b not in _FORBIDDEN_BYTES)
_FORBIDDEN_REF = re.compile(_FORBIDDEN_CONTROL.pattern.split(b"|", 1)[1])


def mark_controls(body: bytes) -> bytes:
    """``body`` with each forbidden control character replaced by ``CONTROL_MARK``, so the ``<loc>`` (or feed
    link) that held it is refused instead of read as the URL its deletion makes (issue 31: "/a<NUL>b" was fetched
    as "/ab"). For ASCII-compatible bodies (a UTF-16/32 one is full of NUL bytes)."""
    if not body.translate(None, _NOT_FORBIDDEN) and (b"&#" not in body or _FORBIDDEN_REF.search(body) is None):
        return body  # two C-speed scans: the pattern alone costs ~20 ms per MB (it tries every byte)
    return _FORBIDDEN_CONTROL.sub(CONTROL_MARK, body)


def has_control(loc: str) -> bool:
    """True when ``loc`` holds a control character (C0, DEL or C1) or the mark of one (``CONTROL_MARK``): such a
    ``<loc>`` is unusable, never repaired (deleting the character makes another URL)."""
    if loc.isprintable():  # the common case, in one C loop: no control character (nor U+E000) anywhere
        return loc[:1] == "&" and loc.startswith("&#xE000;")
    return _CONTROL_IN_LOC.search(loc) is not None or loc.startswith(("\ue000", "&#xE000;"))


MAX_LOC_LENGTH = 8192
"""A ``<loc>`` longer than this is dropped before canonicalization (the protocol says 2,048 characters)."""


MAX_PROBLEMS = 50
"""Problem messages kept per sitemap file (counts stay exact; only the messages are capped)."""


CHANGEFREQS = frozenset(("always", "hourly", "daily", "weekly", "monthly", "yearly", "never"))


DEFAULT_PRIORITY = 0.5
"""sitemaps.org: "The default priority of a page is 0.5"; also what usp reports for a missing or bad value."""


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
    lastmod_until: datetime | None = None
    """The end of the period a reduced-precision lastmod names (``lastmod_until``), None for a moment."""


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
    malformed: str | None = None
    """Where and why the XML parser's recovery passed over an error (what follows it may be lost), or None."""

    def problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)


# --- shared normalization (both parsers end here, which is what makes them comparable) --------------------


def clean_text(value: str | None) -> str | None:
    """Stripped text with complete entity references decoded (double-escaped ``&amp;amp;``); None if empty."""
    if not value:
        return None
    if "&" in value:
        value = ENTITY_REF.sub(_unescape, value)
    value = value.strip(" \t\r\n")
    if value and (value[0] > "~" or value[-1] > "~"):
        value = value.strip(_BLANKS)  # Unicode spaces (NBSP, U+2000…) too; rare, so only when an end is non-ASCII
    return value or None


_BLANKS = "".join(ch for ch in map(chr, range(0x3001)) if ch.isspace() and not _CONTROL_IN_LOC.match(ch)) + "\t\r\n"
"""What ``clean_text`` strips: white space, but never a control character (``str.strip`` also takes \\x1c-\\x1f
and \\x85, which made "https://h/a<US>" the URL "https://h/a")."""


def _unescape(match: re.Match[str]) -> str:
    """One complete reference decoded; one naming a control character becomes that character (html.unescape
    deletes most of them, or makes U+FFFD of ``&#0;``: a URL the site never named), for ``has_control``."""
    ref = match.group(0)
    if ref[1] == "#":
        number = int(ref[3:-1], 16) if ref[2] in "xX" else int(ref[2:-1])
        if number < 0x20 or 0x7F <= number <= 0x9F:
            return chr(number)
    return html.unescape(ref)


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
        bool(rest) and rest[0] not in "/?#:@" and not has_control(rest) and (rest.isascii() or has_utf8_form(rest))
    )


def utc(value: datetime | None) -> datetime | None:
    """Aware UTC; a naive value is taken as UTC (sitemaps.org recommends a zone, many omit it)."""
    try:
        return aware(value)
    except (OverflowError, ValueError):  # an offset that pushes year 1 or 9999 off the calendar
        return None


def lastmod_period(text: str | None) -> tuple[datetime | None, datetime | None]:
    """A lastmod as (start, end) of the period it may mean (``lastmod_until``; end None for a moment): what a
    sitemap entry keeps. A zone-less time starts at its earliest reading (at UTC+14), not at its reading as UTC, so
    that the start never comes after the instant the site meant: the rules asking whether a lastmod is *surely*
    newer (a 304 contradicted, a gone page dated back) read the start, those asking whether it *may* be (a URL made
    due, a truthful host's skip: ``revisit.lastmod_predicts_change``) the end, which covers every reading."""
    start = parse_lastmod(text)
    if start is not None and text and ZONELESS_TIME.fullmatch(text.strip()):
        start -= EARLIEST_OFFSET
    return start, lastmod_until(text, start)


def parse_lastmod(text: str | None) -> datetime | None:
    """W3C Datetime (any ISO 8601 form Python reads, plus YYYY and YYYY-MM), or RFC 2822; aware UTC or None. A
    zone-less time is read as UTC here (a news publication date); a lastmod's period is ``lastmod_period``'s."""
    if not text:
        return None
    try:
        return utc(datetime.fromisoformat(text))
    except ValueError:
        pass
    partial = W3C_PARTIAL.fullmatch(text)
    if partial is not None:
        month = int(partial.group(2) or 1)
        return datetime(int(partial.group(1)), month, 1, tzinfo=UTC) if 1 <= month <= 12 else None
    try:
        return utc(parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError):
        return None


def lastmod_until(text: str | None, start: datetime | None) -> datetime | None:
    """The end of the period a reduced-precision W3C datetime names, ``start`` being its start (``parse_lastmod``):
    2026-12 is all of December, 2026-12-09 (or 20261209) all of that day, 2026-12-09T02:40Z that minute. A time
    without a zone (2026-12-09T02:40:00, 2026-12-09T02:40) ends at its latest reading, at UTC-12 (plus its last
    unit: the minute of 02:40). None for a moment (a time with seconds and a zone, or any other form).

    The start alone is the period's earliest moment: a page edited on 9 December that the sitemap dated "2026-12"
    read as 1 December 00:00, older than our fetch of the 8th, and the daily re-crawl never asked it. Whether a
    lastmod may announce a change after our last fetch is judged by this end (``frontier.discovered``)."""
    if start is None or not text:
        return None
    text = text.strip()
    zoneless = ZONELESS_TIME.fullmatch(text)
    if zoneless is not None:
        try:
            latest = datetime.fromisoformat(text).replace(tzinfo=UTC) + LATEST_OFFSET
        except (OverflowError, ValueError):
            return None
        unit = timedelta(hours=1) if zoneless.group(1) is None else timedelta(
            minutes=1) if zoneless.group(2) is None else timedelta(0)
        return latest + unit
    if BASIC_DATE.fullmatch(text):
        return start + timedelta(days=1)
    match = W3C_REDUCED.fullmatch(text)
    if match is None:
        return None
    month, day, minute = match.group(1), match.group(2), match.group(3)
    try:
        if minute:
            return start + timedelta(minutes=1)
        if day:
            return start + timedelta(days=1)
        if month:
            return start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(
                month=start.month + 1)
        return start.replace(year=start.year + 1)
    except (OverflowError, ValueError):  # past year 9999
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


class LocCheck:
    """What every parser checks of an entry's ``<loc>`` before it keeps it, and counts in ``doc.counts`` when it
    refuses one: an absolute http(s) URL (a control character counted apart, never repaired), not seen before in
    the file. One object per file; ``report`` names what was refused, after the file is read."""

    __slots__ = ("_controls", "_counts", "_invalid", "_seen")

    def __init__(self, doc: SitemapDoc) -> None:
        self._seen: set[str] = set()
        self._invalid: list[str] = []
        self._controls: list[str] = []
        self._counts = doc.counts
        self._counts.update(kept=0, invalid_loc=0, duplicates=0, over_limit=0)

    def refuses(self, loc: str) -> bool:
        """True, counted, for a ``loc`` the entry is dropped for; False for one not seen yet (now seen: keep it)."""
        if not is_absolute_http(loc):
            if has_control(loc):
                count_control(self._counts, self._controls, loc)
                return True
            self._counts["invalid_loc"] += 1
            if len(self._invalid) < 3:
                self._invalid.append(loc[:100])
            return True
        if loc in self._seen:
            self._counts["duplicates"] += 1
            return True
        self._seen.add(loc)
        return False

    def report(self, doc: SitemapDoc) -> None:
        report_controls(doc, self._controls)
        if invalid := self._counts["invalid_loc"]:
            doc.problem(f"{invalid} <loc> values not absolute http(s) URLs dropped (e.g. {self._invalid!r})")


def validated_entries(doc: SitemapDoc, raw: Iterable[SitemapEntry], limit: int) -> Iterator[SitemapEntry]:
    """The entries every parser yields, after the checks every parser shares: valid loc, dedupe, limit."""
    check = LocCheck(doc)
    counts = doc.counts
    try:
        for entry in raw:
            if check.refuses(entry.loc):
                continue
            if counts["kept"] >= limit:
                # sitemaps.org: at most 50,000 URLs per file. Stop here: the rest is not ours to parse.
                doc.over_limit = True
                counts["over_limit"] += 1
                doc.problem(f"more than {limit} URLs: the rest of the file dropped")
                break
            counts["kept"] += 1
            yield entry
    finally:
        if counts.get("without_loc"):
            doc.problem(f"{counts['without_loc']} <url> elements without a <loc> skipped")
        check.report(doc)


def count_control(counts: dict[str, int], examples: list[str], loc: str) -> None:
    counts["control_loc"] = counts.get("control_loc", 0) + 1
    if len(examples) < 3:
        examples.append(_CONTROL_IN_LOC.sub("\N{REPLACEMENT CHARACTER}", loc.replace("\t\ue000", "\t"))[:100])


def report_controls(doc: SitemapDoc, examples: list[str]) -> None:
    if doc.counts.get("control_loc"):
        doc.problem(f"{doc.counts['control_loc']} <loc> values holding a control character refused, never repaired "
                    f"into another URL (e.g. {examples!r}, the character shown as U+FFFD)")


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
