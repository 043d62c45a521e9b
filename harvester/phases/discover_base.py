"""One host's discovery in one run: the state its steps share (what was read, found and written) and the helpers
every step uses for discovery documents (due or not, revisit times, failures, problems)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter, deque
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from harvester.errors import DatabaseUnavailable, WriteConflict, WriterGone
from harvester.frontier import UrlInfo
from harvester.frontier.writer import UrlWriter, writer_possible
from harvester.records import (
    AddResult,
    DiscoveredUrl,
    DocumentState,
    ErrorClass,
    FetchResult,
    Source,
    UrlKind,
    UrlState,
    Vanished,
    origin_of,
    provenance,
)
from harvester.rules import revisit
from harvester.runtime import aware, db, make_owner, utcnow

if TYPE_CHECKING:
    from harvester.fetch.engine import PoliteClient
    from harvester.fetch.robots import RobotsRules
    from harvester.frontier import FrontierStore
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site
    from harvester.settings import Settings


logger = logging.getLogger(__name__)


ADMIT_CHUNK = 1_000
"""Sitemap entries admitted per ``Site.admit_published`` call: large enough to spread its per-call costs,
small enough that a 50,000-URL file is never held as records at once."""

LEARN_SAMPLE = 2_000
"""Detail URLs of one upsert batch the classifier learns shapes from (an even sample of a larger batch)."""

FOLLOW_NEW_SHARE = 0.5
"""A revisited listing page whose detail links are at least this share new to the frontier may continue on its
next page (a full page of news; sticky posts on top and widgets of known links keep the share below 1)."""


UNREADABLE_RETRY_S = 24 * 3600.0
"""A discovery document that answered and could not be used (a gzip bomb over the cap, billion laughs, an external
entity, a page where a sitemap was named) is asked again after this, then twice as long after each further such
answer, up to ``UNREADABLE_RETRY_MAX_S``. A transient failure (5xx, timeout) keeps ``robots.error_cache_s``: a
file that was whole and unusable will not heal by the next run, and asking it daily cost a full download a day."""

UNREADABLE_RETRY_MAX_S = 16 * 24 * 3600.0

UNREADABLE_CLASSES = frozenset({ErrorClass.TOO_LARGE, ErrorClass.BAD_CONTENT, ErrorClass.BAD_CONTENT_TYPE})
"""Fetch outcomes that are an unusable answer, not a failed exchange."""

_UNREADABLE = re.compile(r"unreadable \((\d+)\): ")
"""How many unusable answers in a row a document gave, kept in its ``error`` (no column of its own): the count
outlives ``mark_due`` and refreshes, which reset ``next_fetch_at``."""


def unreadable_count(error: str | None) -> int:
    """Unusable answers in a row behind a document's stored ``error`` (0: none, or its last failure was another)."""
    found = _UNREADABLE.match(error) if error else None
    return int(found.group(1)) if found else 0


def unreadable_wait_s(count: int) -> float:
    """How long a document that gave ``count`` unusable answers in a row waits before it is asked again."""
    return min(UNREADABLE_RETRY_MAX_S, UNREADABLE_RETRY_S * float(2 ** max(0, min(count, 32) - 1)))


MAX_FEED_ENTRIES_REMEMBERED = 200_000
"""Entry URLs of this run's feeds kept per host to recognise a feed that repeats another; beyond it, none is."""



def _seed_due(known: UrlInfo, now: datetime) -> bool:
    """Whether the listing crawl claims this stored seed in this run (``FrontierStore.claim``'s rule)."""
    due_at = known.next_fetch_at
    return known.state in (UrlState.QUEUED.value, UrlState.DONE.value) and (due_at is None or due_at <= now)


ANY_MEDIA_TYPE = None
"""Feeds and sitemaps are served under many media types (text/xml, application/rss+xml, text/plain, gzip ...):
accept any and let the parser decide."""


class DiscoveryBase:
    """State of one host's discovery in one run. ``counters`` and ``problems`` are what the task reports."""

    def __init__(
        self,
        store: FrontierStore,
        settings: Settings,
        site: Site,
        client: PoliteClient,
        origin: str,
        *,
        run_id: int | None,
        run_started: datetime,
        refresh: bool,
        policies: PolicyKeeper | None = None,
    ) -> None:
        self.store = store
        self.policies = policies
        self.settings = settings
        self.site = site
        self.client = client
        self.origin = origin
        self.run_id = run_id
        self.run_started = run_started
        self.refresh = refresh
        self.owner = make_owner(f"discover:{origin}")
        self.counters: Counter[str] = Counter()
        self.problems: list[str] = []
        self.report = site.report(origin)
        self.rules: RobotsRules | None = None
        self._feeds: deque[str] = deque()
        self._feed_task: asyncio.Task[None] | None = None
        """The reader of queued feeds while the listing crawl runs (``ListingCrawl._read_feeds``)."""
        self._feeds_seen: set[str] = set()
        self._feed_docs_seen: set[str] = set()
        self._feed_entries: set[str] = set()
        self._follows: dict[str, bool] = {}
        """Listing pages read (or passed over) in this run → whether their next pages may hold news."""
        self._listed_details: set[str] = set()
        """Detail URLs the listing pages read in this run listed: what a facet variant must add to be useful."""
        self._listings_started = run_started
        """When this host's listing crawl began: items the frontier held before it were found by other pages."""
        self._writer: UrlWriter | None = None
        self._admitted = 0
        self._moved: str | None = None
        """Where this seed host's homepage redirects to, outside the scope it had: read with this host."""
        self._seed_sitemaps: list[str] = []
        """Seeds that name a sitemap: read as sitemaps robots.txt names are."""
        self._vanished_from: dict[int, Vanished] = {}
        """Listing pages read in this batch → what they may have stopped naming (written with their completion)."""
        self._feeds_found: list[str] = []
        """Feeds found on listing pages of this batch, written with their completion so a kill cannot lose them."""
        self._sitemaps_asked: dict[str, asyncio.Task[tuple[DocumentState | None, FetchResult | None]]] = {}
        """Sitemaps asked ahead of the walk (``SitemapWalk._ask_sitemap``): taken when it reaches them."""
        self._sitemaps_reached: set[str] = set()
        """Sitemaps read in this run at the end of another URL's redirect: not asked again directly."""
        self._prefetched: dict[str, FetchResult] = {}
        """The seed page as ``_seed_moved`` fetched it: the listing crawl reads it from here, not again."""

    def homes(self) -> list[str]:
        """This host, and where its seed moved to (read as part of it: no discovery of its own runs for it)."""
        return [self.origin] if self._moved is None else [self.origin, self._moved]

    def _due(self, doc: DocumentState) -> bool:
        """Asked in every run that has not asked it yet, whatever minute the run starts: a document that can be
        asked conditionally (it was read, and the server gave a validator) costs the site a 304 when unchanged,
        and it is what announces changes, new pages and deletions. One without validators would be downloaded
        whole each time: it waits for its revisit time (``revisit.due_at``: a little ahead of the interval, so a
        run on the same schedule as the last one finds it due). A failed one waits for its retry time."""
        if doc.fetched_at is not None and doc.fetched_at >= self.run_started:
            return False
        unreadable = unreadable_count(doc.error)
        if unreadable and doc.fetched_at is not None:
            # Its last answer was unusable: asked on its own growing interval, a refresh included (a server that
            # ignores the validators would answer the same bad file in full again).
            due = revisit.due_at(aware(doc.fetched_at), unreadable_wait_s(unreadable), self.settings.revisit)
            return due <= utcnow()
        if self.refresh or doc.next_fetch_at is None:
            return True
        if doc.error is None and doc.content_hash is not None and (doc.etag or doc.last_modified):
            return True
        return doc.next_fetch_at <= utcnow()

    def _refetched(self, doc: DocumentState, now: datetime) -> DocumentState:
        """``doc`` answered 304: asked now, read as before (``read_at`` stays: what it names has not changed)."""
        return replace(doc, fetched_at=now, next_fetch_at=revisit.due_at(now, self._revisit_s(doc.kind),
                                                                      self.settings.revisit))

    def _revisit_s(self, kind: str) -> float:
        discovery = self.settings.discovery
        return {"sitemap_index": discovery.sitemap_index_revisit_s, "sitemap": discovery.sitemap_revisit_s}.get(
            kind, discovery.feed_revisit_s)

    def _vanished(self, source: Source, url: str, known: DocumentState | None, now: datetime) -> Vanished | None:
        """What the full read of ``url`` may have stopped naming (see ``Vanished``): nothing on a first read."""
        if known is None or known.content_hash is None:
            return None
        return Vanished(labels=(provenance(source, url),), origins=tuple(self.homes()), named_since=known.read_at,
                        seen_before=self.run_started, now=now)

    def _failure(
        self, url: str, kind: str, result: FetchResult, now: datetime, known: DocumentState | None,
        *, error: str | None = None,
    ) -> DocumentState:
        retry = timedelta(seconds=self.settings.robots.error_cache_s)
        base = known or DocumentState(url=url, kind=kind)
        return replace(
            base, status=result.status, fetched_at=now, next_fetch_at=now + retry,
            error=error or result.error or (result.error_class.value if result.error_class else None),
        )

    def _failed(
        self, url: str, kind: str, result: FetchResult, now: datetime, known: DocumentState | None,
        *, error: str | None = None, unusable: bool = False,
    ) -> DocumentState:
        """The state of a document whose answer could not be used: ``unusable`` (a whole answer its parser
        refused, or a 304 to one) or an unusable fetch outcome (``UNREADABLE_CLASSES``) waits a growing interval
        and keeps that answer's validators, so its next ask is conditional; any other failure is transient."""
        if not (unusable or result.error_class in UNREADABLE_CLASSES):
            return self._failure(url, kind, result, now, known, error=error)
        count = unreadable_count(known.error if known is not None else None) + 1
        message = error or result.error or (result.error_class.value if result.error_class else "unusable")
        due = revisit.due_at(now, unreadable_wait_s(count), self.settings.revisit)
        base = known or DocumentState(url=url, kind=kind)
        if not result.not_modified:  # the validators of the answer refused (a 304 keeps those it answered)
            base = replace(base, etag=result.etag, last_modified=result.last_modified)
        self.counters["documents_unreadable"] += 1
        return replace(base, status=result.status, fetched_at=now, next_fetch_at=due,
                       error=f"unreadable ({count}): {_UNREADABLE.sub('', message, count=1)}")

    def _failed_document(self, url: str, kind: str, result: FetchResult) -> None:
        error_class = result.error_class.value if result.error_class else f"status_{result.status}"
        self.counters[f"{kind}_errors:{error_class}"] += 1
        self._problem(f"{kind} {url}: {error_class} {result.error or ''}".strip())
        logger.info(
            "%s %s failed: %s", kind, url, error_class, extra={"host": origin_of(url), "error_class": error_class}
        )

    def _problem(self, message: str) -> None:
        if len(self.problems) < 100:
            self.problems.append(message)
        self.report.add_problem(message)

    async def _flush(self, batch: list[DiscoveredUrl]) -> AddResult:
        details = [item.url for item in batch if item.kind is UrlKind.DETAIL]
        if details:
            # Shapes are learned from an even sample: each shape keeps 5,000 examples at most, and learning
            # every URL of a 50,000-URL sitemap cost a sixth of its ingestion.
            self.site.classifier.learn_details(details[:: -(-len(details) // LEARN_SAMPLE)])
        if not batch:
            return AddResult(0, 0, 0)
        self._admitted += len(batch)
        writer = self._writer
        if writer is None and self._admitted > self.settings.discovery.writer_process_after and writer_possible(
            self.settings
        ):
            # Held before the start: a host cancelled mid-start closes it on the way out (``run``).
            writer = self._writer = UrlWriter(self.settings, label=self.origin)
            if not await writer.start() and writer.failed is None:
                writer = self._writer = None  # another host holds the writer slot: asked again next batch
        added = None
        if writer is not None and writer.ready:
            try:
                added = AddResult(*await writer.add(batch))
            except WriterGone as exc:
                self.counters["writer_process_lost"] += 1
                logger.warning("%s: %s; this batch and the rest are written in-process", self.origin, exc,
                               extra={"error_class": "storage"})
                await writer.aclose()  # reaped now, and the writer slot free for another host
            except (WriteConflict, DatabaseUnavailable) as exc:
                # The child's unit of work was rolled back whole: this batch is written here, where ``db`` asks
                # again and waits out the server; the child stays for the next batch.
                self.counters["writer_process_passed_back"] += 1
                logger.info("%s: the writer process could not write a batch (%s); written in-process",
                            self.origin, exc, extra={"error_class": "storage"})
        if added is None:
            added = await db(self.store.add_discovered, batch)
        self.counters["urls_new"] += added.inserted
        self.counters["urls_seen_again"] += added.updated
        self.counters["urls_made_due"] += added.made_due
        return added

    # -- listing pages ----------------------------------------------------------------------------------------

    def _queue_feed(self, url: str) -> None:
        canonical = self.site.canonicalize(url)
        if canonical is None or canonical in self._feeds_seen or not self.site.in_scope(canonical):
            return
        if self.site.profile.use_feeds:
            self._feeds_found.append(canonical)  # written with the listing page that named it (``_listings``)
        self._feeds_seen.add(canonical)
        self._feeds.append(canonical)
