"""What the frontier store hands back to its readers: write counts (``AddResult``, ``CompleteResult``), the stored
pages and fetches export reads (``StoredPage``, ``StoredFetch``), a cycle's counts (``Changes``) and runs
(``RunRow``). Records only, no I/O; the vocabulary the layers pass each other is ``harvester.records``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict


@dataclass(frozen=True, slots=True)
class AddResult:
    """What one ``add_discovered`` batch did: new URLs, known URLs touched, finished URLs made due again."""

    inserted: int
    updated: int
    made_due: int

    def __add__(self, other: AddResult) -> AddResult:
        return AddResult(self.inserted + other.inserted, self.updated + other.updated, self.made_due + other.made_due)


@dataclass(frozen=True, slots=True)
class CompleteResult:
    """What one ``complete_many`` transaction wrote; ``lost`` completions (lease gone) wrote nothing."""

    completed: int
    lost: int
    pages: int
    outlinks: AddResult
    lost_ids: tuple[int, ...] = ()
    demoted: int = 0
    """URLs that held a content and became duplicates of a URL of this batch (``complete_many``'s ``demote``)."""


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counts by state, by kind and per host (with parked/blocked), for ``harvester status`` and artifacts."""

    total: int
    by_state: dict[str, int]
    by_kind: dict[str, int]
    hosts: dict[str, dict[str, Any]]
    pages: int = 0
    fetches: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_state": dict(self.by_state),
            "by_kind": dict(self.by_kind),
            "pages": self.pages,
            "fetches": self.fetches,
            "hosts": {origin: dict(info) for origin, info in self.hosts.items()},
        }


@dataclass(frozen=True, slots=True)
class StoredPage:
    """One stored page as read back for export: the URL, the fetch, the decompressed body, extracted fields."""

    page_id: int
    url_id: int
    url: str
    final_url: str
    fetched_at: datetime
    status: int
    content_type: str | None
    etag: str | None
    last_modified: str | None
    content_hash: str
    body: bytes
    canonical_url: str | None = None
    title: str | None = None
    description: str | None = None
    language: str | None = None
    jsonld: list[Any] = field(default_factory=list, compare=False, hash=False)
    fields: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    robots: tuple[str, ...] | None = None
    """As ``PageRecord.robots``; None for a page stored before they were recorded."""
    url_state: str | None = None
    """The URL's state now (``done``, ``gone``, ``duplicate`` ...): an older version of a page, or the page of a
    URL since found gone, says so here."""
    payload_digest: str | None = None
    """sha256 of ``body`` (hex): equal digests are equal payloads, stored once."""
    change: str | None = None
    """How this version differs from the one before (``ChangeKind``: new, changed, restyled); None before 0008."""
    kind: str | None = None
    """The URL's kind: ``detail`` or ``listing`` (listing pages' versions are kept too)."""
    hook_error: dict[str, str] | None = None
    """As ``PageRecord.hook_error``: the extractor hook failed on this version, ``fields`` hold nothing of it."""
    served: tuple[str | None, str | None] | None = None
    """(ETag, Last-Modified) of the latest answer that served this version's bytes: its first fetch's (``etag``,
    ``last_modified``), or a later 200's that repeated them byte for byte with new ones, or a later 304's that confirmed
    them (the validators it left the URL with: RFC 9111 §4.3.4); None when no logged
    fetch served it, or the latest was logged before migration 0023 (the version's own are taken). What the site
    last said of these bytes, which the export tells (``etag``, ``last_modified``
    keep the version's own, for its WARC response record)."""


@dataclass(frozen=True, slots=True)
class Departure:
    """A stored page that left the site: its URL went ``gone`` (404/410) or ``moved`` (a permanent redirect) at
    ``at``, the first answer saying so (``status``); ``final_url`` is where a moved page lives now."""

    url: str
    kind: str | None
    state: str
    status: int | None
    at: datetime
    final_url: str


@dataclass(frozen=True, slots=True)
class StoredFetch:
    """One completed fetch joined with its URL and, when it stored a body, its page (for WARC records); for a 304,
    the version it confirmed (the URL's newest page stored at or before it)."""

    fetch_id: int
    url_id: int
    url: str
    fetched_at: datetime
    status: int | None
    outcome: str
    bytes: int
    error_class: str | None
    run_id: int | None
    page: StoredPage | None = None
    change: str | None = None
    """``ChangeKind`` of this answer: ``same`` is a 200 whose payload repeats ``page`` (stored once, earlier)."""
    prior: tuple[str | None, str | None] | None = None
    """(ETag, Last-Modified) of the URL's version before ``page``, for a fetch that stored a new one: the
    validators its request was conditional on. Read for a ``since`` window only, where the WARC export cannot take
    them from the responses it wrote before (None otherwise, and for a URL's first version)."""
    sent: tuple[str | None, str | None] | None = None
    """(If-None-Match, If-Modified-Since) the request carried, as logged when it was sent ((None, None): an
    unconditional GET). None for a fetch logged before migration 0011: the WARC export then rebuilds them from the
    version before (``prior``, or the responses it wrote), which is wrong where a request's differed from it."""
    served: tuple[str | None, str | None] | None = None
    """(ETag, Last-Modified) the answer carried, for one that served ``page`` (a new version, or the same bytes
    again, maybe with new validators); None otherwise, and for a fetch logged before migration 0023
    (``fetches.validators_logged``), whose answer is taken to have carried its version's."""
    user_agent: str | None = None
    """The User-Agent the request carried: its run's (``runs.user_agent``). None when not known: a fetch of a run
    started before migration 0013, or logged outside any run."""


class Changes(TypedDict):
    """The counts of one crawl cycle, read from the frontier by ``FrontierStore.cycle_counts`` over the whole
    cycle (first attempt's start to last attempt's end): the one source of the CLI summary, ``harvester status``,
    the artifacts and the event payload. A dict, so it travels as a flow result, an artifact and an event payload
    unchanged. docs/operations.md ("What the counts mean") defines each; in short, over detail pages:

    ``new``: first stored version in this cycle; ``changed``: a new payload whose main text differs from the
    version before; ``restyled``: a new payload, same main text; ``gone``: 404/410 after a stored version (never
    also changed); ``missing``: 404/410 never stored (a broken link); ``moved``: a permanent redirect after an
    answer that was not one; ``restored``: a 2xx/304 after a 404/410 (a gone page back).
    Over requests (every kind of page):
    ``fetched``: requests sent; ``not_modified``: 304s to conditional requests; ``failed``: failed requests,
    ``failures`` by class. ``hook_failed``: URLs whose page was fetched and stored but the extractor hook failed on
    it (not a failed request: counted in ``fetched``, never in ``failed``). ``deferred``: detail URLs due in the
    cycle and left queued for the next run when it closed (the page budget's, a parked host's, retries backed off
    past its end); 0 while it runs."""

    cycle: int | None
    new: int
    changed: int
    restyled: int
    gone: int
    missing: int
    moved: int
    restored: int
    deferred: int
    fetched: int
    not_modified: int
    failed: int
    failures: dict[str, int]
    hook_failed: int
    new_urls: list[str]
    changed_urls: list[str]
    restyled_urls: list[str]
    gone_urls: list[str]
    moved_urls: list[str]
    restored_urls: list[str]
    failed_url_count: int
    """URLs whose last request of the cycle failed (``failed`` counts requests: a URL retried counts each time)."""
    failed_urls: list[dict[str, str]]
    """Examples of those (``EXAMPLES``), each ``{"url", "reason"}``: the error class, and the HTTP status when an
    answer came back (``http_5xx 503``, ``timeout``)."""
    hosts: dict[str, dict[str, int]]
    """Per host: fetched, not_modified, gone, failed (requests), failures as ``error:<class>``, hook_failed (URLs)."""


CYCLE_COUNTS = ("new", "changed", "restyled", "gone", "missing", "moved", "restored", "deferred", "fetched",
                "not_modified", "failed", "hook_failed")
"""The counts of ``Changes`` in the order every summary shows them (CLI, status, artifacts, event payload)."""


class RunRow(TypedDict):
    """One phase run as stored (``FrontierStore.last_run`` / ``get_run``): its counters feed ``harvester status``."""

    id: int
    phase: str
    started_at: datetime
    finished_at: datetime | None
    status: str
    profile: dict[str, Any] | None
    counters: dict[str, Any] | None
    owner: str | None
    cycle_id: int | None
