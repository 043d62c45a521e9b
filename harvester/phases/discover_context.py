"""One host's discovery in one run: what its steps (the sitemap walk, the listing crawl, the feed reader) share,
passed to each explicitly: where it runs (store, settings, site, client, origin, run), what it learned of the host
(robots.txt's rules, where the site moved), what it reports (counters, problems, the site's report) and where
admitted URLs are written (``UrlBatches``). A step's own state stays in the step.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from harvester.errors import DatabaseUnavailable, WriteConflict, WriterGone
from harvester.frontier.writer import UrlWriter, writer_possible
from harvester.owners import make_owner
from harvester.records import (
    DiscoveredUrl,
    DocumentState,
    FetchResult,
    Source,
    UrlKind,
    Validators,
    Vanished,
    origin_of,
    provenance,
)
from harvester.rules import revisit_documents
from harvester.rules.feed_pages import SitemapDates
from harvester.rules.report import DiscoveryReport
from harvester.runtime import db, utcnow
from harvester.store_results import AddResult

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from harvester.fetch.engine import PoliteClient
    from harvester.fetch.robots import RobotsRules
    from harvester.frontier import FrontierStore
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site
    from harvester.settings import Settings

logger = logging.getLogger(__name__)

ANY_MEDIA_TYPE = None
"""Feeds and sitemaps are served under many media types (text/xml, application/rss+xml, text/plain, gzip ...):
accept any and let the parser decide."""

LEARN_SAMPLE = 2_000
"""Detail URLs of one upsert batch the classifier learns shapes from (an even sample of a larger batch)."""

MAX_PROBLEMS = 100
"""Problems a host's discovery returns to its task (all of them go to the site's report)."""


@dataclass(eq=False)
class HostContext:
    """The state one host's discovery steps share in one run, made by the phase and handed to each step.

    ``robots`` is what robots.txt said in this run (``read_robots``; a test may give it), ``moved`` where the
    seed's site moved (``move_to``): both are learned by the host's discovery before the steps that need them run,
    and only here are they written. ``counters`` and ``problems`` are what the task reports."""

    store: FrontierStore
    settings: Settings
    site: Site
    client: PoliteClient
    origin: str
    run_id: int | None
    run_started: datetime
    refresh: bool
    policies: PolicyKeeper | None = None
    robots: RobotsRules | None = None
    beside: AbstractSet[str] = frozenset()
    """Extraction owners fetching through this host's client (``handover.Shared.owners``): the listing crawl's claims
    pass their host leases, since one gate keeps the host's limit over both phases."""
    owner: str = field(init=False)
    counters: Counter[str] = field(init=False, default_factory=Counter)
    problems: list[str] = field(init=False, default_factory=list)
    report: DiscoveryReport = field(init=False)
    urls: UrlBatches = field(init=False)
    sitemap_dates: SitemapDates = field(init=False, default_factory=SitemapDates)
    """The lastmods of the detail pages this run's sitemaps listed: how far ahead a paged feed is worth asking."""
    read_in_full: set[str] = field(init=False, default_factory=set)
    """Documents asked without validators this run: they named URLs robots.txt refused, which it allows now
    (``rejudge``); a 304 would leave those URLs unread."""
    _moved: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.owner = make_owner(f"discover:{self.origin}")
        self.report = self.site.report(self.origin)
        self.urls = UrlBatches(self)

    # -- what was learned of the host ---------------------------------------------------------------------------

    @property
    def rules(self) -> RobotsRules:
        """robots.txt's rules for this host in this run; asked before any step reads a document."""
        if self.robots is None:
            raise RuntimeError(f"{self.origin}: robots.txt is read before discovery's steps (HostContext.read_robots)")
        return self.robots

    async def read_robots(self) -> RobotsRules:
        """robots.txt names the sitemaps and may have changed the rules: asked (conditionally) once a run."""
        self.robots = await self.client.robots(self.origin, fresh_since=self.run_started)
        return self.robots

    async def rejudge(self) -> None:
        """Where robots.txt's rules changed since the host's URLs were last judged, judge them again
        (``FrontierStore.rejudge_urls``): refused ones now allowed are due in this run, done ones now refused leave
        the snapshot, their duplicates due in this run (in full: one holds the content in their place). Before any
        document is read, so the URLs made due go to this run's extraction."""
        rules = self.rules
        judged = await db(self.store.rejudge_urls, self.origin, rules.allowed, rules.fingerprint,
                          refuse=rules.mode != "disallow")
        if judged is not None:
            due, refused, reread, released = judged
            self.read_in_full.update(reread)
            self.counters["robots_changed"] += 1
            self.counters["urls_allowed_again"] += due
            self.counters["urls_refused_now"] += refused
            self.counters["duplicates_of_refused_due"] += released
            if due or refused:
                logger.info("%s: robots.txt changed: %d refused URLs due again, %d harvested URLs refused now"
                            " (%d of their duplicates due)", self.origin, due, refused, released,
                            extra={"host": self.origin})

    @property
    def moved(self) -> str | None:
        """Where this seed host's homepage redirects to, outside the scope it had: read with this host."""
        return self._moved

    def move_to(self, origin: str) -> None:
        self._moved = origin

    def homes(self) -> list[str]:
        """This host, and where its seed moved to (read as part of it: no discovery of its own runs for it)."""
        return [self.origin] if self._moved is None else [self.origin, self._moved]

    # -- what is reported ---------------------------------------------------------------------------------------

    def problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)
        self.report.add_problem(message)

    def failed_document(self, url: str, kind: str, result: FetchResult) -> None:
        """Count and report a document whose fetch failed."""
        error_class = result.error_class.value if result.error_class else f"status_{result.status}"
        self.counters[f"{kind}_errors:{error_class}"] += 1
        self.problem(f"{kind} {url}: {error_class} {result.error or ''}".strip())
        logger.info(
            "%s %s failed: %s", kind, url, error_class, extra={"host": origin_of(url), "error_class": error_class}
        )

    # -- robots.txt refusals: written with the document naming them ---------------------------------------------

    async def record_refused(self, *labels: str, replace: bool) -> None:
        """Write the URLs robots.txt refuses that the document of provenance ``labels`` named since the last call
        (``FrontierStore.name_refused``), before that document's own record: a kill repeats both. ``replace``: the
        first part of a new full read of a document read before, whose rows from that read go."""
        found = {label: self.report.take_refused(label) for label in labels}
        if replace or any(found.values()):
            await db(self.store.name_refused, self.origin, found, replace=replace)

    async def record_all_refused(self) -> None:
        """Write what no step took (a seed robots.txt refuses): the host's discovery is ending."""
        if self.report.refused:
            await self.record_refused(*self.report.refused, replace=False)

    def validators_for(self, known: DocumentState | None) -> Validators:
        """The validators to ask ``known`` with: none for one read in full before its robots.txt refusals were
        recorded (0019) where robots.txt refuses anything, so they are recorded once (a 304 would name none)."""
        if known is None:
            return Validators()
        if known.url in self.read_in_full:
            self.counters["documents_read_for_allowed_refusals"] += 1
            return Validators()
        if not known.refusals_read and self.rules.refuses_any:
            self.counters["documents_read_for_refusals"] += 1
            return Validators()
        return known.validators

    # -- documents: the revisit rule with this run's clock and settings -----------------------------------------

    def due(self, doc: DocumentState) -> bool:
        """Whether ``doc`` is asked in this run (``revisit_documents.is_due``)."""
        return revisit_documents.is_due(doc, self.settings, run_started=self.run_started, refresh=self.refresh,
                                        now=utcnow())

    def not_modified(self, doc: DocumentState, now: datetime) -> DocumentState:
        return revisit_documents.not_modified(doc, now, self.settings)

    def failed(
        self, url: str, kind: str, result: FetchResult, now: datetime, known: DocumentState | None,
        *, error: str | None = None, unusable: bool = False, absent: bool = False,
    ) -> DocumentState:
        """The state of a document whose answer could not be used (``revisit_documents.failed``; ``absent``: a
        probed known path that answered 404/410); an unusable one is counted."""
        if revisit_documents.is_unusable(result, refused=unusable):
            self.counters["documents_unreadable"] += 1
        return revisit_documents.failed(url, kind, result, now, known, self.settings, error=error, refused=unusable,
                                        absent=absent)

    def vanished(self, source: Source, url: str, known: DocumentState | None, now: datetime) -> Vanished | None:
        """What the full read of ``url`` may have stopped naming (see ``Vanished``): nothing on a first read."""
        if known is None or known.content_hash is None:
            return None
        return Vanished(labels=(provenance(source, url),), origins=tuple(self.homes()), named_since=known.read_at,
                        seen_before=self.run_started, now=now)


class UrlBatches:
    """Where a host's admitted URLs are written, a batch at a time: in process, or through the writer child
    process once the host has admitted more than ``discovery.writer_process_after`` (sitemaps of millions).
    The classifier learns detail shapes from each batch on the way."""

    def __init__(self, host: HostContext) -> None:
        self._host = host
        self._writer: UrlWriter | None = None
        self._admitted = 0
        self._one_at_a_time = asyncio.Lock()
        """The writer process takes one batch at a time: a sitemap read ahead, or a feed page guessed, may write
        beside the walk's."""

    async def add(self, batch: list[DiscoveredUrl]) -> AddResult:
        host = self._host
        details = [item.url for item in batch if item.kind is UrlKind.DETAIL]
        if details:
            # Shapes are learned from an even sample: each shape keeps 5,000 examples at most, and learning
            # every URL of a 50,000-URL sitemap cost a sixth of its ingestion.
            host.site.classifier.learn_details(details[:: -(-len(details) // LEARN_SAMPLE)])
        if not batch:
            return AddResult(0, 0, 0)
        async with self._one_at_a_time:
            return await self._add(batch)

    async def _add(self, batch: list[DiscoveredUrl]) -> AddResult:
        host = self._host
        self._admitted += len(batch)
        writer = self._writer
        if writer is None and self._admitted > host.settings.discovery.writer_process_after and writer_possible(
            host.settings
        ):
            # Held before the start: a host cancelled mid-start closes it on the way out (``aclose``).
            writer = self._writer = UrlWriter(host.settings, label=host.origin)
            if not await writer.start() and writer.failed is None:
                writer = self._writer = None  # another host holds the writer slot: asked again next batch
        added = None
        if writer is not None and writer.ready:
            try:
                added = AddResult(*await writer.add(batch))
            except WriterGone as exc:
                host.counters["writer_process_lost"] += 1
                logger.warning("%s: %s; this batch and the rest are written in-process", host.origin, exc,
                               extra={"error_class": "storage"})
                await writer.aclose()  # reaped now, and the writer slot free for another host
            except (WriteConflict, DatabaseUnavailable) as exc:
                # The child's unit of work was rolled back whole: this batch is written here, where ``db`` asks
                # again and waits out the server; the child stays for the next batch.
                host.counters["writer_process_passed_back"] += 1
                logger.info("%s: the writer process could not write a batch (%s); written in-process",
                            host.origin, exc, extra={"error_class": "storage"})
        if added is None:
            added = await db(host.store.add_discovered, batch)
        host.counters["urls_new"] += added.inserted
        host.counters["urls_seen_again"] += added.updated
        host.counters["urls_made_due"] += added.made_due
        return added

    async def aclose(self) -> None:
        """Close the writer process, if one was started, and count the batches it wrote."""
        if self._writer is not None:
            await self._writer.aclose()
            if self._writer.batches:
                self._host.counters["writer_process_batches"] += self._writer.batches
