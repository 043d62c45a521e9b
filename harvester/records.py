"""The vocabulary passed between layers: frozen records and enums.

No I/O and no policy here: discovery yields ``DiscoveredUrl``, the fetcher returns ``FetchResult``, the store
hands out ``ClaimedUrl`` and takes ``Completion``. ORM rows never leave ``harvester/frontier/``; what the store
answers its readers (counts, stored pages, runs) is ``harvester.store_results``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple
from urllib.parse import urlsplit

ACCEPT = "*/*"
"""What every GET accepts (the media type is checked on the answer). Here, not in ``fetch``, because the WARC
export repeats these request headers and must not load the HTTP stack to do so."""
ACCEPT_ENCODING = "gzip, deflate"
"""Only encodings decoded with a bounded output; br/zstd are not advertised (no bounded decoder installed)."""


class UrlKind(StrEnum):
    """What a URL is for: detail pages are the harvest; the others are how we find them."""

    DETAIL = "detail"
    LISTING = "listing"
    FEED = "feed"
    SITEMAP = "sitemap"


OWN_REFUSAL = "disallowed by robots.txt"
"""The error of a URL robots.txt refused at its own address (``fetch.engine``, ``Refusals.rejudge_urls``); one refused
at its redirect's target says ``redirect to <target> refused (robots_disallowed)`` (``fetch.http``)."""


class UrlState(StrEnum):
    """Where a URL is in its crawl cycle. QUEUED and LEASED are live; the rest are outcomes."""

    QUEUED = "queued"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"
    GONE = "gone"
    DISALLOWED = "disallowed"
    SKIPPED = "skipped"
    DUPLICATE = "duplicate"


class Source(StrEnum):
    """The kind of place a URL was found; the full provenance label is ``"<kind>:<where>"``."""

    SEED = "seed"
    ROBOTS = "robots"
    SITEMAP = "sitemap"
    FEED = "feed"
    LISTING = "listing"
    PAGINATION = "pagination"  # a listing page's next page: the same list, one step older
    LINK = "link"
    REDIRECT = "redirect"


DEADLINE_PASSED = "total deadline"
"""How a fetch cut by its whole-fetch deadline (``fetch.http``) begins its error: told apart from a stall between two
reads, also a TIMEOUT, by ``rules.revisit_documents.cut_while_reading``."""


class ErrorClass(StrEnum):
    """The small taxonomy every failed fetch or refused input is counted under."""

    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    CONNECT = "connect"
    PROTOCOL = "protocol"  # the server broke HTTP: a body cut short or longer than declared, a garbled status line
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    HTTP_429 = "http_429"
    ROBOTS_DISALLOWED = "robots_disallowed"
    OUT_OF_SCOPE = "out_of_scope"
    BAD_CONTENT_TYPE = "bad_content_type"
    BAD_CONTENT = "bad_content"
    HOOK_FAILED = "hook_failed"
    STORAGE = "storage"
    TRAP = "trap"
    PARKED = "parked"  # the host is parked (failures, huge Crawl-delay or Retry-After): no request was sent
    ADDRESS_REFUSED = "address_refused"  # the address policy refused every address of the host: nothing was sent
    UNASKED_304 = "unasked_304"  # a 304 to a request that sent no validator: it names no copy, so nothing arrived
    INVALID_URL = "invalid_url"  # the HTTP client refuses the URL as written (an odd IPv4 spelling): nothing was sent


class ChangeKind(StrEnum):
    """What one answer meant for its URL's stored versions (``fetches.change``; ``pages.change`` for the first
    three). A new version is decided by the payload digest (sha256 of the body as served) and the encoding its text
    was decoded with (``PageRecord.encoding``): main text decides only between ``changed`` and ``restyled``."""

    NEW = "new"  # the URL's first stored version
    CHANGED = "changed"  # a new payload whose main text (content hash) differs from the version before
    RESTYLED = "restyled"  # a new payload, same main text: bytes changed outside it (layout, scripts, ads)
    SAME = "same"  # a 200 whose payload is the stored version's, byte for byte and read alike: nothing new stored
    GONE = "gone"  # 404/410 after a stored version
    MISSING = "missing"  # 404/410 of a URL never stored: a broken link, not a deletion


def origin_of(url: str) -> str:
    """``scheme://netloc`` of an already canonical URL: the key politeness is scoped to.

    Runs for every discovered URL, so the canonical shape (``scheme://netloc/...``) takes a string scan;
    anything else goes through ``urlsplit``.
    """
    start = url.find("://")
    if start > 0:
        end = url.find("/", start + 3)
        head = url if end < 0 else url[:end]
        if "?" not in head and "#" not in head and "@" not in head:
            return head
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def http_origin(url: str) -> str | None:
    """``scheme://netloc`` (scheme and netloc lower-cased) of an absolute http(s) URL in any spelling, or None for
    anything else; never raises. For URLs not yet canonical: a redirect's target, a page's base, a fetch."""
    url = url.strip()
    if not url[:8].lower().startswith(("http://", "https://")):
        return None
    start = url.index("//") + 2
    end = len(url)
    for mark in "/?#":
        found = url.find(mark, start)
        if 0 <= found < end:
            end = found
    netloc = url[start:end]
    if not netloc or ("[" in netloc) != ("]" in netloc):
        return None  # no host, or an IPv6 literal left open (urlsplit refuses it too)
    return url[:end].lower()


def provenance(kind: Source, where: str = "") -> str:
    """The provenance label stored with a URL, e.g. ``sitemap:https://h/sitemap.xml``."""
    return f"{kind.value}:{where}" if where else kind.value


class DiscoveredUrl(NamedTuple):
    """One canonical URL found by discovery or as an outlink, ready for the frontier.

    A NamedTuple rather than a frozen dataclass: sitemaps make millions of these, and a frozen dataclass's
    ``__init__`` costs one ``object.__setattr__`` per field (5 µs against under 1 µs here).
    """

    url: str
    kind: UrlKind
    source: str
    depth: int = 0
    score: float = 0.0
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float | None = None
    meta: dict[str, Any] | None = None
    fetch_url: str | None = None
    """The URL to request when it is not ``url`` (the site's own query order: ``Canonicalizer.fetch_form``)."""
    lastmod_until: datetime | None = None
    """The end of the period a reduced-precision ``lastmod`` names ("2026-12": 1 January), None for a moment: what
    "announces a change after our last fetch" is judged by (``frontier.discovered``, ``revisit.may_skip``); stored as
    ``urls.lastmod_until`` with the lastmod it belongs to."""

    @property
    def host(self) -> str:
        return origin_of(self.url)


@dataclass(frozen=True, slots=True)
class Validators:
    """What a conditional request needs; both None means an unconditional GET."""

    etag: str | None = None
    last_modified: str | None = None

    def __bool__(self) -> bool:
        return bool(self.etag or self.last_modified)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """The outcome of one bounded fetch, redirects included. Never raised: failures set ``error_class``."""

    url: str
    final_url: str
    status: int | None
    started_at: float
    elapsed_s: float
    error_class: ErrorClass | None = None
    error: str | None = None
    content_type: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    body: bytes | None = None
    bytes_read: int = 0
    redirects: tuple[str, ...] = ()
    retry_after_s: float | None = None
    headers: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    redirect_statuses: tuple[int, ...] = ()
    """The status of each hop in ``redirects`` (same order), so a permanent move (all 301/308) can be told
    from a temporary one; empty when the fetcher did not record them (then no move is assumed)."""
    sent_validators: Validators | None = None
    """The validators the request that got this answer carried (the last hop's: a redirect hop is asked without
    them, or with the ETag alone); empty ones for an unconditional GET, None when no request left. What the WARC
    export writes as that request's If-None-Match / If-Modified-Since."""
    unfollowed: bool = False
    """The fetch ended at a permanent redirect (every hop 301/308) it did not follow, the target being asked by a
    request of its own (``Fetcher.fetch``'s ``stop_at``): ``status`` is the redirect's, ``final_url`` its target (the
    last of ``redirects``), which was not requested; no body. The URL has moved there."""
    refused_target: str | None = None
    """The redirect target the fetch refused to follow (robots.txt, scope), never requested: where the answer led
    and what the refusal judged (``final_url`` stays the last URL requested). None when no hop was refused."""

    @property
    def ok(self) -> bool:
        return self.error_class is None and self.status is not None and 200 <= self.status < 300

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def gone(self) -> bool:
        return self.status in (404, 410)

    @property
    def validators(self) -> Validators:
        return Validators(self.etag, self.last_modified)


class ClaimedUrl(NamedTuple):
    """A URL leased to one worker: everything the fetch and its conditional headers need.

    A NamedTuple, not a frozen dataclass: a claim builds a thousand of these, and a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field, ~2.5 µs) cost half of a 5 ms claim budget."""

    id: int
    url: str
    host: str
    kind: UrlKind
    depth: int
    score: float
    attempts: int
    lease_until: datetime
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    lastmod: datetime | None = None
    last_fetched_at: datetime | None = None
    changefreq: str | None = None
    revisit_s: float | None = None
    source: str | None = None
    """The kind of place it was first found (``Source``'s value: sitemap, feed, listing ...)."""
    fetch_url: str | None = None
    """The URL to request when it is not ``url``: the key sorts the query, the site may not (``target``)."""
    lastmod_until: datetime | None = None
    """The end of the period ``lastmod`` (its start) names when it is of reduced precision, None for a moment:
    whether the lastmod may announce a change after our last fetch is judged by it (``revisit.may_skip``)."""

    @property
    def target(self) -> str:
        """What to request and match robots.txt against: the site's spelling, normalized (RFC 3986 §6.2.2)."""
        return self.fetch_url or self.url

    @property
    def validators(self) -> Validators:
        return Validators(self.etag, self.last_modified)


@dataclass(frozen=True, slots=True)
class PageRecord:
    """What extraction keeps of one fetched page; the store compresses ``body``."""

    final_url: str
    status: int
    content_type: str | None
    content_hash: str
    body: bytes
    etag: str | None = None
    last_modified: str | None = None
    canonical_url: str | None = None
    title: str | None = None
    description: str | None = None
    language: str | None = None
    jsonld: list[Any] = field(default_factory=list, compare=False, hash=False)
    fields: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    robots: tuple[str, ...] = ()
    """The robots directives of ``<meta>`` tags and ``X-Robots-Tag`` that applied to us: ``noindex``, ``nofollow``."""
    hook_error: dict[str, str] | None = None
    """Why the extractor hook failed on this payload (``class``: the exception's class, ``message``); ``fields`` are
    then none. The page is stored all the same: what the site served is true whatever the hook made of it."""
    encoding: str | None = None
    """The codec its text was decoded with (``decode_html``: ``utf-8``, ``cp1252``); None when no text was read (not
    HTML, a listing page kept as bytes). With the payload digest, the identity of a version: the same bytes
    under another charset label are other text."""


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of one claimed URL, written with its outlinks in one transaction by ``complete()``."""

    url_id: int
    state: UrlState
    fetched_at: datetime
    status: int | None = None
    final_url: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    changed: bool = False
    next_fetch_at: datetime | None = None
    revisit_s: float | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    page: PageRecord | None = None
    duplicate_of: int | None = None
    bytes_read: int = 0
    sent_validators: Validators | None = None
    """As ``FetchResult.sent_validators``: what the request carried, kept in the fetch log (not the validators the
    URL keeps for its next request, ``etag`` / ``last_modified``); None when no request left or nobody said."""
    hooked: bool = False
    """The run had an extractor hook, which ran on ``page`` (or failed: ``page.hook_error``). Only then may the
    answer repair a stored version the hook failed on: a run without one leaves that version's ``hook_error``, and
    the URL's mark of it (``FrontierStore.due_hook_retries``), for a run with the hook to repair."""
    claimed: bool = False
    """Built from a claim (``ClaimedUrl``), whose lastmod is ``claimed_lastmod``: the lastmod the outcome was decided
    on. The store then keeps news that came while the URL was leased (``Outcomes``' ``_NEWS``): discovery makes only a
    DONE URL due on a newer lastmod, so a DONE completion whose URL's lastmod grew since its claim, past our copy (or,
    for a skip, was withdrawn), leaves the URL due at once instead of at ``next_fetch_at``."""
    claimed_lastmod: datetime | None = None
    forget_validators: bool = False
    """The URL keeps no validators, so its next request is unconditional: a 304 that contradicted a lastmod newer
    than our copy, asked again in full (``revisit.reask_304``)."""


@dataclass(frozen=True, slots=True)
class DocumentState:
    """A discovery document (robots.txt, sitemap, feed) as last fetched, for conditional re-fetches."""

    url: str
    kind: str
    status: int | None = None
    etag: str | None = None
    last_modified: str | None = None
    content_hash: str | None = None
    fetched_at: datetime | None = None
    next_fetch_at: datetime | None = None
    url_count: int = 0
    error: str | None = None
    children: tuple[str, ...] = ()
    """Child sitemaps of an index, so an index answering 304 still leads to its (conditional) children."""
    read_at: datetime | None = None
    """When it was last read in full (a 200 parsed), as opposed to ``fetched_at`` (last asked, a 304 too)."""
    refusals_read: bool = True
    """The robots.txt refusals of its last full read are recorded (``robots_refusals``); False for one read in full
    before they were (migration 0019): read once more in full where robots.txt refuses anything."""

    @property
    def validators(self) -> Validators:
        return Validators(self.etag, self.last_modified)


@dataclass(frozen=True, slots=True)
class Vanished:
    """What a document or listing page just read in full (``labels``: its provenance labels) may have stopped
    naming: URLs of ``origins`` last named in ``[named_since, seen_before)``, i.e. by its previous full read and
    not since. ``now``: when they become due again."""

    labels: tuple[str, ...]
    origins: tuple[str, ...]
    named_since: datetime | None
    seen_before: datetime
    now: datetime


@dataclass(frozen=True, slots=True)
class RobotsState:
    """robots.txt of one host as persisted in ``hosts``: enough to rebuild the rules without a fetch."""

    origin: str
    status: int | None
    fetched_at: datetime | None
    expires_at: datetime | None
    body: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    error_class: ErrorClass | None = None
    refused: str | None = None
    """The URL the fetch was refused at (a redirect's target, when robots.txt redirected there); not persisted."""
    url: str | None = None
    """The URL whose answer ``body`` and the validators are (robots.txt's redirect target); None: ``/robots.txt``
    (a state built without a fetch)."""

    @property
    def answered_by(self) -> str:
        """The URL that issued the validators: the only one they may be sent to (RFC 9110 §13.1.2)."""
        return self.url or self.origin + "/robots.txt"


@dataclass(slots=True)
class HostDiagnostics:
    """Live per-host counters the engine keeps and ``harvester status`` / the flows show (mutable)."""

    host: str
    limit: int = 1
    in_flight: int = 0
    peak_in_flight: int = 0
    queue_depth: int = 0
    fetched: int = 0
    not_modified: int = 0
    gone: int = 0
    """Answers 404 or 410: the page is gone, an outcome the site meant, not an error of the fetch."""
    bytes: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    first_fetch_at: float | None = None
    """When the host's first answer came (monotonic)."""
    last_fetch_at: float | None = None
    """When its last answer came (monotonic)."""
    first_sent_at: float | None = None
    """When its first request was let go (monotonic): where its serving time starts."""
    parked_reason: str | None = None

    @property
    def rate_per_s(self) -> float:
        """Requests answered per second of the host's serving time, from its first request sent to its last answer.
        From first answer to last, two requests sent together and answered 0.4 s later were 10166 req/s (a span of
        microseconds); no span here is shorter than the first request took. None sent yet: 0."""
        start = self.first_sent_at if self.first_sent_at is not None else self.first_fetch_at
        if start is None or self.last_fetch_at is None or self.last_fetch_at <= start:
            return 0.0
        return self.fetched / (self.last_fetch_at - start)

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "limit": self.limit,
            "in_flight": self.in_flight,
            "peak_in_flight": self.peak_in_flight,
            "queue_depth": self.queue_depth,
            "fetched": self.fetched,
            "not_modified": self.not_modified,
            "gone": self.gone,
            "bytes": self.bytes,
            "errors": dict(self.errors),
            "rate_per_s": round(self.rate_per_s, 2),
            "parked_reason": self.parked_reason,
        }


def merge_host(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Two tables of one host (``HostDiagnostics.as_dict``: two workers of a run, two runs of a cycle) as one:
    counts add up, errors by class too; the peak in flight, the limit and the rate are the largest seen."""
    if old is None:
        return dict(new)
    out = dict(old)
    for key, value in new.items():
        if key == "errors":
            errors = Counter(out.get("errors") or {})
            errors.update(value or {})
            out["errors"] = dict(errors)
        elif key in ("peak_in_flight", "limit", "rate_per_s", "deferred_by_budget"):
            out[key] = max(out.get(key) or 0, value or 0)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = (out.get(key) or 0) + value
        else:
            out[key] = value
    return out


# --- kept by the frontier store across runs (what it hands back alone: ``harvester.store_results``) -----------


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Per-host politeness state persisted in ``hosts``: what the scheduler must honour across runs."""

    origin: str
    crawl_delay_s: float | None = None
    request_rate_s: float | None = None
    concurrency_limit: int | None = None
    blocked_until: datetime | None = None
    parked_reason: str | None = None
    failures: int = 0
    next_allowed_at: datetime | None = None
