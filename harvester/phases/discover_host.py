"""Discovery of one host through the polite client: robots.txt, sitemaps, listing pages, then feeds.

Composes the pure parsers of ``harvester.discovery`` with the fetch engine and the frontier. Resumable: a
document already processed in this run is not fetched again, and the listing crawl lives in the frontier
(listing URLs are leased and completed with their outlinks in one transaction), so a killed discovery
picks up where it stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import islice
from typing import TYPE_CHECKING, Any

from harvester.discovery.feeds import FeedDoc, parse_feed
from harvester.discovery.listings import PageLinks, apply_robots_header, extract_links
from harvester.discovery.sitemaps import FEED_UNREAD, SitemapDoc, finish_sitemap, prepare_sitemap
from harvester.errors import ContentRejected, NotASitemap, WriterGone
from harvester.fetch.robots import robots_token
from harvester.frontier.writer import UrlWriter, writer_possible
from harvester.records import (
    AddResult,
    ClaimedUrl,
    Completion,
    DiscoveredUrl,
    DocumentState,
    ErrorClass,
    FetchResult,
    Source,
    UrlKind,
    UrlState,
    Validators,
    Vanished,
    origin_of,
    provenance,
)
from harvester.rules import revisit
from harvester.rules.classify import is_pagination
from harvester.runtime import aware, db, make_owner, utcnow

if TYPE_CHECKING:
    from harvester.fetch.engine import PoliteClient
    from harvester.fetch.robots import RobotsRules
    from harvester.frontier import FrontierStore
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site
    from harvester.settings import Settings

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _FeedRead:
    """One feed document read and ingested: its parse and what its entries were to the frontier."""

    doc: FeedDoc
    admitted: int
    fresh: int
    """Admitted entries first found after our previous read of the feed (all of them on a first read)."""
    dates: tuple[datetime | None, ...]
    state: DocumentState
    repeats: bool
    """Every admitted entry had already come from another feed document of this host in this run."""

    def only_news(self, reference: datetime | None) -> bool:
        """Whether every admitted entry is news: dated after ``reference`` (our last read of the feed, on the
        server's clock) when it and every date are known, else first found after our last read. Then older
        entries may follow on the next page; otherwise a newest-first feed has nothing new beyond this one."""
        if self.admitted == 0:
            return False
        if reference is not None and all(d is not None for d in self.dates):
            return all(d is not None and d > reference for d in self.dates)
        return self.fresh >= self.admitted


ADMIT_CHUNK = 1_000
"""Sitemap entries admitted per ``Site.admit_published`` call: large enough to spread its per-call costs,
small enough that a 50,000-URL file is never held as records at once."""

LEARN_SAMPLE = 2_000
"""Detail URLs of one upsert batch the classifier learns shapes from (an even sample of a larger batch)."""

FOLLOW_NEW_SHARE = 0.5
"""A revisited listing page whose detail links are at least this share new to the frontier may continue on its
next page (a full page of news; sticky posts on top and widgets of known links keep the share below 1)."""


MAX_FEED_ENTRIES_REMEMBERED = 200_000
"""Entry URLs of this run's feeds kept per host to recognise a feed that repeats another; beyond it, none is."""



def _seed_due(known: dict[str, Any], now: datetime) -> bool:
    """Whether the listing crawl claims this stored seed in this run (``FrontierStore.claim``'s rule)."""
    due_at = known["next_fetch_at"]
    return known["state"] in (UrlState.QUEUED.value, UrlState.DONE.value) and (due_at is None or due_at <= now)


FEED_TYPES = None
"""Feeds and sitemaps are served under many media types (text/xml, application/rss+xml, text/plain, gzip ...):
accept any and let the parser decide."""


class HostDiscovery:
    """One host's discovery in one run. ``counters`` and ``problems`` are what the task reports."""

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
        self._feeds_seen: set[str] = set()
        self._feed_docs_seen: set[str] = set()
        self._feed_entries: set[str] = set()
        self._follows: dict[str, bool] = {}
        """Listing pages read (or passed over) in this run → whether their next pages may hold news."""
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
        self._prefetched: dict[str, FetchResult] = {}
        """The seed page as ``_seed_moved`` fetched it: the listing crawl reads it from here, not again."""

    async def run(self) -> None:
        """Discover the host. Its persisted politeness state applies first: a host still parked from an earlier
        run gets no request at all, and a back-off still running delays the first one (robots.txt included)."""
        try:
            await self._run()
        finally:
            if self._writer is not None:
                await self._writer.aclose()
                if self._writer.batches:
                    self.counters["writer_process_batches"] += self._writer.batches
            if self.policies is not None:
                for home in self._homes():
                    await self.policies.save(home)

    async def _run(self) -> None:
        if self.policies is not None:
            parked = await self.policies.load(self.origin)
            if parked:
                self.counters["hosts_parked"] += 1
                self._problem(f"{self.origin}: parked ({parked}); nothing discovered")
                return
        # robots.txt names the sitemaps and may have changed the rules: asked (conditionally) once a run.
        self.rules = await self.client.robots(self.origin, fresh_since=self.run_started)
        if self.rules.mode == "disallow":  # RFC 9309 §2.3.1.4: 5xx or unreachable means disallow all
            state = self.rules.state
            why = state.error_class.value if state.error_class is not None else f"http_{state.status}"
            self.counters[f"robots_unavailable:{why}"] += 1
            self._problem(f"{self.origin}: robots.txt unavailable ({why}): everything is disallowed until it answers")
        parked = self.client.parked(self.origin)
        if parked:
            self._problem(f"{self.origin}: parked ({parked}); nothing discovered")
            return
        profile = self.site.profile
        seed_urls = self.site.seeds_of(self.origin) or [self.origin + "/"]
        # A seed that names a sitemap or a feed (https://example.org/sitemap_index.xml) is read as one: it is the
        # operator's pointer to what the site publishes, not a page whose links to follow.
        published = {url: kind for url in seed_urls
                     if (kind := self.site.classifier.classify(url)) in (UrlKind.SITEMAP, UrlKind.FEED)}
        self._seed_sitemaps = [url for url, kind in published.items() if kind is UrlKind.SITEMAP]
        for url, kind in published.items():
            if kind is UrlKind.FEED:
                self._queue_feed(url)
            if not (profile.use_sitemaps if kind is UrlKind.SITEMAP else profile.use_feeds):
                self._problem(f"{self.origin}: the seed {url} is a {kind.value}, which this profile does not read")
        seed_urls = [url for url in seed_urls if url not in published]
        if self.site.moved.get(self.origin):
            self._moved = self.site.moved[self.origin]
        elif seed_urls:
            self._moved = await self._seed_moved(seed_urls[0])
        if self._moved is not None and self.policies is not None:
            # Read as part of this host from here on: its persisted back-off or park holds for our requests.
            await self.policies.load(self._moved)
        now = utcnow()
        seeds = [
            item for url in seed_urls
            if (item := self.site.admit(url, base=None, source=Source.SEED, where="", depth=0, now=now,
                                        allowed=self.rules.allowed, kind=UrlKind.LISTING, trusted=True))
        ]
        if seeds:
            await db(self.store.add_discovered, seeds)
        if profile.use_sitemaps:
            await self._sitemaps()
        await self._listings()
        if profile.use_feeds:
            # Feeds read before are polled on their own schedule, whether or not a page advertising them changed.
            for known in await db(self.store.host_documents, self.origin, kinds=("feed", "feed_mirror")):
                self._queue_feed(known.url)
            await self._drain_feeds()
        self.report.add_rejections({}, source="link")

    def _homes(self) -> list[str]:
        """This host, and where its seed moved to (read as part of it: no discovery of its own runs for it)."""
        return [self.origin] if self._moved is None else [self.origin, self._moved]

    async def _seed_moved(self, seed: str) -> str | None:
        """The origin the seed permanently redirects to (301/308 only), when that is outside the crawl's scope (a
        site that moved: another domain, a subdomain); None otherwise. A temporary redirect (a consent wall, a
        login, a geo check) moves nothing, and the operator's deny patterns hold for every hop. What is found is
        kept in ``hosts.moved_to``; the new origin joins the scope, here and in every later phase, and its
        robots.txt, sitemaps and listing pages are read with this host's.

        On its first run the seed is asked following any redirect, and the answer is kept for the listing crawl.
        On a later run it is asked only where the listing crawl would ask it anyway (due), as that crawl would
        (conditionally, within the scope), the answer kept for it; only a permanent redirect out of the scope is
        then followed, with a second request. A seed whose last answer was a permanent redirect (which the listing
        crawl recorded as out of scope and does not ask again) is asked once a run. So a site that moves after its
        first harvest is followed, and a seed that redirects for now costs nothing more than it did."""
        known = await db(self.store.url_info, seed)
        if known is None:
            result = await self._fetch_seed(seed, Validators())
            self._prefetched[seed] = result
            return await self._moved_to(seed, result, due=True)
        validators = Validators(known["etag"], known["last_modified"])
        if _seed_due(known, utcnow()):
            result = await self.client.fetch(seed, validators=validators,
                                             accept=self.settings.http.allowed_content_types)
            self._prefetched[seed] = result
            if result.error_class is not ErrorClass.OUT_OF_SCOPE or result.status not in revisit.PERMANENT_REDIRECTS:
                return None
            return await self._moved_to(seed, await self._fetch_seed(seed, validators), due=True)
        if known["last_status"] not in revisit.PERMANENT_REDIRECTS:
            return None
        return await self._moved_to(seed, await self._fetch_seed(seed, validators), due=False)

    async def _fetch_seed(self, seed: str, validators: Validators) -> FetchResult:
        """The seed asked following any redirect (off the scope too, the deny patterns holding on every hop)."""
        denied = self.site.filter.denied
        return await self.client.fetch(
            seed, accept=self.settings.http.allowed_content_types, validators=validators,
            in_scope=lambda hop: hop.startswith(("http://", "https://")) and not denied(hop),
        )

    async def _moved_to(self, seed: str, result: FetchResult, *, due: bool) -> str | None:
        """Record the move ``result`` shows, if it is one (see ``_seed_moved``); ``due``: the listing crawl reads
        the seed itself in this run, else the page it leads to is admitted to be read in its place."""
        final = result.final_url or result.url
        target = origin_of(final)
        if (not result.ok or not revisit.is_permanent_move(result) or target == self.origin
                or self.site.in_scope(final)):
            return None
        if due:
            self._prefetched[seed] = result
        await db(self.store.set_moved_to, self.origin, target)
        self.site.add_moved({self.origin: target})
        self.counters["seeds_moved"] += 1
        self._problem(f"{self.origin}: the seed {seed} redirects to {final}; {target} is crawled as this site")
        if not due:
            # The seed stays as its redirect left it: the page it leads to is read in its place, with this answer.
            home = self.site.admit(final, base=None, source=Source.SEED, where="", depth=0, now=utcnow(),
                                   kind=UrlKind.LISTING, trusted=True)
            if home is not None:
                await db(self.store.add_discovered, [home])
                self._prefetched[home.url] = result
        return target

    # -- sitemaps -------------------------------------------------------------------------------------------

    async def _sitemaps(self) -> None:
        assert self.rules is not None
        discovery = self.settings.discovery
        # A Sitemap line may be relative ("Sitemap: /sitemap.xml"): resolved against robots.txt's own URL. It may
        # name another host (sitemaps.org cross-submission: a CDN, the bare domain of a www site): robots.txt
        # speaks for the site, so the file is read, through that host's own gate and robots.txt, and its entries
        # are admitted by this crawl's scope as any sitemap's are.
        homes = [(self.origin, self.rules)]
        if self._moved is not None:
            homes.append((self._moved, await self.client.robots(self._moved)))
        named = list(dict.fromkeys([
            *self._seed_sitemaps,
            *(url for home, rules in homes for line in rules.sitemaps
              if (url := self.site.canonicalize(line, home + "/robots.txt"))),
        ]))
        seen: set[str] = set()
        read = await self._walk_sitemaps(named, probing=False, seen=seen) if named else 0
        if not read:
            # Known paths are probed only where robots.txt names no sitemap that could be read (usp probes 14 paths
            # regardless).
            if named:
                self._problem(f"{self.origin}: none of the {len(named)} sitemaps robots.txt names could be read; "
                              "the known paths are probed instead")
            probes = [home + path for home, _ in homes for path in discovery.known_sitemap_paths]
            await self._walk_sitemaps([url for url in probes if url not in seen], probing=True, seen=seen)

    async def _walk_sitemaps(self, start: list[str], *, probing: bool, seen: set[str]) -> int:
        """Read ``start`` and the indexes' children breadth-first, at most ``max_sitemaps_per_host`` files and
        ``max_sitemap_depth`` levels; returns how many could be read (fetched and parsed, or known unchanged).

        A child is followed when it is in the crawl's scope or on its index's own origin (an index on a CDN lists
        its siblings there); an index cannot send the crawl to a third host."""
        discovery = self.settings.discovery
        # (url, depth, lastmod in its index, probed): only the start can be a guess; an index's children are named.
        queue: deque[tuple[str, int, datetime | None, bool]] = deque((url, 1, None, probing) for url in start)
        read = 0
        while queue:
            url, depth, dated, probed = queue.popleft()
            canonical = self.site.canonicalize(url)
            if canonical is None or canonical in seen:
                if canonical is not None:
                    self.counters["sitemap_loops"] += 1
                continue
            if len(seen) >= discovery.max_sitemaps_per_host:
                self._problem(f"{self.origin}: more than {discovery.max_sitemaps_per_host} sitemaps; rest skipped")
                break
            seen.add(canonical)
            children = await self._sitemap(canonical, probed, dated)
            if children is None:
                continue
            read += 1
            home = origin_of(canonical)
            for child, child_lastmod in children:
                if depth >= discovery.max_sitemap_depth:
                    self._problem(f"sitemap index {canonical} nests deeper than {discovery.max_sitemap_depth}")
                    break
                if self.site.in_scope(child) or origin_of(child) == home:
                    queue.append((child, depth + 1, child_lastmod, False))
                else:
                    self.report.add_entry(provenance(Source.SITEMAP, canonical), child, "out_of_scope")
        return read

    async def _sitemap(
        self, url: str, probing: bool, dated: datetime | None
    ) -> list[tuple[str, datetime | None]] | None:
        """Process one sitemap file; returns the children of an index with the lastmod the index gives each
        (known children, undated, when it is unchanged), or None when it could not be read. ``dated``: this
        file's lastmod in its parent index."""
        known = await db(self.store.get_document, url)
        if known is not None and not self._due(known):
            self.counters["documents_skipped"] += 1
            # Never read (only failures so far): still unreadable until it is due again, so the probes go on.
            return None if known.content_hash is None else [(child, None) for child in known.children]
        if known is not None and self._unchanged_per_index(known, dated):
            self.counters["sitemaps_unchanged_per_index"] += 1
            return [(child, None) for child in known.children]
        result = await self._fetch_sitemap(url, known, retry=not probing)
        now = utcnow()
        if result.not_modified and known is not None:
            self.counters["sitemaps_not_modified"] += 1
            self.report.add_sitemap(url, known.kind, not_modified=True)
            await db(self.store.save_document, self._refetched(known, now))
            return [(child, None) for child in known.children]
        if not result.ok or result.body is None:
            if not (probing and result.status == 404):
                self._failed_document(url, "sitemap", result)
            await db(self.store.save_document, self._failure(url, "sitemap", result, now, known))
            return None
        try:
            # Inflating, proving and (for a plain urlset) scanning a large file is tens of milliseconds of CPU:
            # in a worker thread, so the other hosts' requests go on meanwhile. lxml's parser, if needed, is made
            # here, on the loop thread that reads its entries.
            settings = self.settings.discovery
            prepared = await asyncio.to_thread(prepare_sitemap, result.body, url=url, settings=settings)
            if isinstance(prepared, SitemapDoc):
                doc = prepared
            else:
                doc = finish_sitemap(prepared, settings=settings, feeds=False)
                if doc.parser == FEED_UNREAD:  # a feed named as a sitemap: feedparser in a thread, as for feeds
                    doc = await asyncio.to_thread(finish_sitemap, prepared, settings=settings)
            if doc.kind in ("rss", "atom"):
                self._queue_feed(url)
            count = await self._ingest_entries(doc.entries, source=url, fetched_at=now)
        except NotASitemap as exc:
            # A guessed path answered with a page (a soft 404): as good as a 404. A named one is the site's mistake.
            if not probing:
                self._problem(str(exc))
            await db(self.store.save_document, self._failure(url, "sitemap", result, now, known, error=str(exc)))
            return None
        except ContentRejected as exc:
            self.counters[f"rejected:{ErrorClass.BAD_CONTENT.value}"] += 1
            self._problem(f"sitemap {url} refused: {exc}")
            logger.warning(
                "sitemap %s refused: %s", url, exc, extra={"host": self.origin, "error_class": "bad_content"}
            )
            await db(self.store.save_document, self._failure(url, "sitemap", result, now, known, error=str(exc)))
            return None
        kind = "sitemap_index" if doc.kind == "index" else "sitemap"
        # Only a sitemap read in full before can have stopped listing a URL (on a first read the check would scan
        # the host's every URL for nothing), and only a whole one says what it no longer lists.
        vanished = self._vanished(Source.SITEMAP, url, known, now) if doc.kind in ("urlset", "text") and not (
            doc.over_limit or doc.truncated) else None
        children = [child for child in doc.children if self.site.canonicalize(child) != url]
        if len(children) != len(doc.children):
            self.counters["sitemap_loops"] += 1
            doc.problem("the index lists itself")
        self.counters["sitemaps_parsed"] += 1
        self.report.add_sitemap(url, kind, entries=count, over_limit=doc.over_limit, problems=doc.problems)
        if doc.over_limit:  # data left unread: the operator hears of it, not only the report
            self._problem(f"{kind.replace('_', ' ')} {url} is over the protocol's limits, only its first part was "
                          f"read: {'; '.join(doc.problems)}")
        elif doc.truncated:  # so is a file that ends early: what it lost is unknown
            self._problem(f"{kind.replace('_', ' ')} {url} ends early, only its whole entries were read: "
                          f"{'; '.join(doc.problems)}")
        revisit_s = self._revisit_s(kind)
        dated_children = [
            (c, doc.child_lastmod.get(child)) for child in children if (c := self.site.canonicalize(child))
        ]
        canonical_children = [c for c, _ in dated_children]
        rechecked = await db(
            self.store.save_document,
            DocumentState(
                url=url, kind=kind, status=result.status, etag=result.etag, last_modified=result.last_modified,
                content_hash=hashlib.sha256(result.body).hexdigest(), fetched_at=now, read_at=now,
                next_fetch_at=revisit.due_at(now, revisit_s, self.settings.revisit), url_count=count,
                children=tuple(canonical_children),
            ),
            vanished=vanished,
        )
        self.counters["urls_vanished_rechecked"] += rechecked
        return dated_children

    async def _fetch_sitemap(self, url: str, known: DocumentState | None, *, retry: bool) -> FetchResult:
        """One sitemap, asked again (``retry``: one a site names, not a probed path) after a transient failure (429,
        5xx, timeout, connection) up to ``politeness.max_attempts`` times: a single 503 must not leave the host
        without its sitemap until the next revisit. The client keeps Retry-After and its back-off between attempts
        (a parked host is refused at once, so no wait outlasts the park); on top of that each retry waits as a
        retried page would (``revisit.retry_delay_s``: doubling, capped by ``backoff_max_s``)."""
        politeness = self.settings.politeness
        home = origin_of(url)

        def in_scope(hop: str) -> bool:  # a sitemap outside the crawl's scope may redirect on its own host
            return origin_of(hop) == home or self.site.in_scope(hop)

        for attempt in range(politeness.max_attempts if retry else 1):
            if attempt:
                self.counters["sitemap_retries"] += 1
                await asyncio.sleep(revisit.retry_delay_s(attempt - 1, None, politeness))
            result = await self.client.fetch(
                url, validators=known.validators if known else Validators(), accept=FEED_TYPES,
                max_bytes=self.settings.discovery.max_sitemap_bytes, in_scope=in_scope,
            )
            if result.error_class not in revisit.RETRYABLE:
                break
        return result

    def _unchanged_per_index(self, known: DocumentState, dated: datetime | None) -> bool:
        """The parent index dates this child sitemap no later than our copy (the Last-Modified it was served
        with: both on the server's clock), and our copy is younger than ``sitemap_index_trust_s``: then it needs
        no request at all, even in a refresh. The age bound re-asks it now and then, so an index whose lastmod
        lags behind its children costs at most that much staleness."""
        if dated is None or known.content_hash is None or known.error is not None or known.fetched_at is None:
            return False
        age_s = (utcnow() - aware(known.fetched_at)).total_seconds()
        if age_s >= self.settings.discovery.sitemap_index_trust_s:
            return False
        return revisit.newer_than_copy(dated, known.last_modified) is False

    async def _ingest_entries(self, entries: Iterable[Any], *, source: str, fetched_at: datetime) -> int:
        """Stream a sitemap's entries into the frontier in batches; never the whole file's records at once.

        Entries are admitted a chunk at a time (``Site.admit_published``): per-URL call layers, not SQL, are
        what sitemap ingestion spends its time on. One batch is written (in the store's thread, where SQLite
        runs without the GIL) while the next is parsed; every write has landed before this returns, so the
        sitemap's document state is never saved ahead of its URLs. The loop yields to the event loop after
        each chunk, so one large sitemap never stalls the other hosts' timers.
        """
        assert self.rules is not None
        batch: list[DiscoveredUrl] = []
        count = 0
        size = self.settings.discovery.batch_size
        chunk_size = min(size, ADMIT_CHUNK)
        iterator = iter(entries)
        writing: asyncio.Future[AddResult] | None = None
        try:
            while chunk := list(islice(iterator, chunk_size)):
                count += len(chunk)
                batch += self.site.admit_published(
                    chunk, where=source, origin=self.origin, now=fetched_at, fetched_at=fetched_at,
                    allowed=self.rules.allowed,
                )
                if len(batch) >= size:
                    if writing is not None:
                        pending, writing = writing, None  # its error, if any, is raised here and only here
                        await pending
                    writing = asyncio.ensure_future(self._flush(batch))
                    batch = []
                await asyncio.sleep(0)
        except BaseException:
            # The write in flight finishes (no task outlives the host), but the error that stopped the parse,
            # a cancellation included, is the one raised.
            if writing is not None:
                try:
                    await writing
                except Exception as exc:  # logged: the error raised is the one that stopped the parse
                    logger.warning("%s: a write in flight failed too: %s", self.origin, exc,
                                   extra={"error_class": "storage"})
            raise
        if writing is not None:
            await writing
        await self._flush(batch)
        return count

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
        if added is None:
            added = await db(self.store.add_discovered, batch)
        self.counters["urls_new"] += added.inserted
        self.counters["urls_seen_again"] += added.updated
        self.counters["urls_made_due"] += added.made_due
        return added

    # -- listing pages ----------------------------------------------------------------------------------------

    async def _listings(self) -> None:
        """Breadth-first over listing pages held in the frontier, within the depth and page budget.

        A listing page known only as the next page of others (a pure continuation) is, on a revisit, read
        only when a page before it in this run was mostly news (``_follows``): a list shows its newest items
        first, so once a page holds known items the pages after it hold older, known ones (see
        ``_continuation``). Continuations are handled after the rest of their batch, in claim order.
        """
        discovery = self.settings.discovery
        budget = discovery.listing_page_budget
        fetched = 0
        limit = max(1, self.site.profile.per_host_limit or self.settings.politeness.per_host_limit)
        while fetched < budget:
            claimed = await db(
                self.store.claim, self.owner, hosts=self._homes(), per_host=min(2 * limit, budget - fetched),
                lease_s=self.settings.store.lease_s, kinds=(UrlKind.LISTING,),
            )
            if not claimed:
                break
            firsts: list[ClaimedUrl] = []
            continuations: list[tuple[ClaimedUrl, list[str]]] = []
            for item in claimed:
                before = await self._predecessors(item)
                if before:
                    continuations.append((item, before))
                else:
                    firsts.append(item)
            items = list(await asyncio.gather(*(self._listing(item) for item in firsts)))
            for item, before in continuations:
                items.append(await self._continuation(item, before))
            vanished, self._vanished_from = self._vanished_from, {}
            feeds, self._feeds_found = self._feeds_found, []
            done = await db(self.store.complete_many, self.owner, items, run_id=self.run_id, vanished=vanished,
                            feeds=feeds)
            self.counters["listing_pages"] += len(claimed) - done.lost
            fetched += len(claimed)
            if self._feeds and self.site.profile.use_feeds:
                await self._drain_feeds()
        if fetched >= budget:
            self._problem(f"{self.origin}: listing page budget of {budget} reached")

    async def _predecessors(self, claimed: ClaimedUrl) -> list[str]:
        """The pages whose next page ``claimed`` is, when it was read before and is reached in no other way."""
        if claimed.last_fetched_at is None or claimed.content_hash is None:
            return []
        labels = await db(self.store.sources_of, claimed.url)
        prefix = f"{Source.PAGINATION.value}:"
        if not labels or not all(label.startswith(prefix) for label in labels):
            return []
        return [label[len(prefix):] for label in labels]

    async def _continuation(
        self, claimed: ClaimedUrl, before: list[str]
    ) -> tuple[Completion, list[DiscoveredUrl]]:
        """Read a revisited continuation page only when a page before it in this run was mostly news, when none
        of them was read in this run, or when our copy is older than ``pagination_recheck_s`` (lists not ordered
        newest first get their new items found that late at worst); else it stays as it was, without a request."""
        verdicts = [self._follows[url] for url in before if url in self._follows]
        now = utcnow()
        assert claimed.last_fetched_at is not None
        age = (now - aware(claimed.last_fetched_at)).total_seconds()
        if any(verdicts) or not verdicts or age >= self.settings.discovery.pagination_recheck_s:
            return await self._listing(claimed)
        self._follows[claimed.url] = False
        self.counters["listing_pages_not_needed"] += 1
        revisit_s = self.settings.discovery.listing_revisit_s
        return Completion(
            url_id=claimed.id, state=UrlState.DONE, fetched_at=claimed.last_fetched_at,
            content_hash=claimed.content_hash, etag=claimed.etag, last_modified=claimed.last_modified,
            next_fetch_at=revisit.due_at(now, revisit_s, self.settings.revisit), revisit_s=revisit_s,
        ), []

    async def _listing(self, claimed: ClaimedUrl) -> tuple[Completion, list[DiscoveredUrl]]:
        completion, outlinks, follows = await self._read_listing(claimed)
        if follows is not None:
            self._follows[claimed.url] = follows
        return completion, outlinks

    async def _read_listing(self, claimed: ClaimedUrl) -> tuple[Completion, list[DiscoveredUrl], bool | None]:
        """One listing page; the flag says whether its next pages may hold news (it was mostly news itself),
        None when the fetch failed and says nothing about them."""
        assert self.rules is not None
        result = self._prefetched.pop(claimed.url, None) or await self.client.fetch(
            claimed.target, validators=claimed.validators, accept=self.settings.http.allowed_content_types
        )
        now = utcnow()
        revisit_s = self.settings.discovery.listing_revisit_s
        base = Completion(
            url_id=claimed.id, state=UrlState.DONE, fetched_at=now, status=result.status, final_url=result.final_url,
            etag=result.etag or claimed.etag, last_modified=result.last_modified or claimed.last_modified,
            next_fetch_at=revisit.due_at(now, revisit_s, self.settings.revisit), revisit_s=revisit_s,
            bytes_read=result.bytes_read,
        )
        if result.not_modified:
            return base, [], False
        if not result.ok or result.body is None:
            return self._listing_failure(claimed, result, base), [], None
        page = apply_robots_header(
            extract_links(result.body, base_url=result.final_url, content_type=result.content_type),
            result.headers.get("x-robots-tag"), robots_token(self.client.user_agent, self.settings.robots),
        )
        for feed in page.feeds:
            self._queue_feed(feed)
        completion = replace(base, content_hash=hashlib.sha256(result.body).hexdigest(), changed=True)
        if page.robots_nofollow:
            return completion, [], False
        outlinks = self._listing_outlinks(claimed, page, now)
        if claimed.content_hash is not None:
            # Read before: what it named then and does not name now is asked again in this run (moved down the
            # list, a conditional request says so; deleted, a 404/410 marks it gone).
            self._vanished_from[claimed.id] = Vanished(
                labels=(provenance(Source.LISTING, claimed.url), provenance(Source.PAGINATION, claimed.url)),
                origins=tuple(self._homes()), named_since=await db(self.store.last_read_at, claimed.id),
                seen_before=self.run_started, now=now,
            )
        next_pages = set(page.next_pages)
        details = [item.url for item in outlinks.values() if item.kind is UrlKind.DETAIL]
        follows = False
        if details and next_pages:
            # News: details first found after our last read of this page (today's sitemap may know them already).
            known = await db(self.store.known_urls, details, before=claimed.last_fetched_at or now)
            follows = len(details) - len(known) >= FOLLOW_NEW_SHARE * len(details)
        return completion, list(outlinks.values()), follows

    def _listing_outlinks(self, claimed: ClaimedUrl, page: PageLinks, now: datetime) -> dict[str, DiscoveredUrl]:
        """The details and listing pages a listing page links to, admitted (feeds found are queued)."""
        assert self.rules is not None
        # Shapes are learned and judged on canonical forms: "/p/./250" and "/p/250?utm_source=x" are the post
        # "/p/250", which a raw-form classifier would not recognize (and would drop).
        canonical = {link: self.site.canonicalize(link) or link for link in page.links + page.next_pages}
        self.site.classifier.observe_page(claimed.url, [canonical[link] for link in page.links])
        depth = claimed.depth + 1
        follow_listings = self.site.profile.use_listings and depth <= self.settings.discovery.listing_max_depth
        nofollow = set(page.nofollow)
        outlinks: dict[str, DiscoveredUrl] = {}
        next_pages = set(page.next_pages)
        decided: list[tuple[str, UrlKind | None]] = []
        for link in page.links + page.next_pages:
            if link in nofollow:
                continue
            kind = self.site.classifier.classify(canonical[link])
            if kind is None and claimed.depth == 0:
                kind = self.site.classifier.guess_navigation(canonical[link])
            decided.append((link, kind))
        paginated_list = bool(next_pages) or is_pagination(claimed.url)  # a list for sure, not a front page
        items = self.site.classifier.repeated_items(
            canonical[link] for link, kind in decided
            if kind is None and link not in next_pages and self.site.in_scope(canonical[link])
        ) if paginated_list else set()
        for link, kind in decided:
            if kind is None and canonical[link] in items:
                kind = UrlKind.DETAIL  # one of the page's list of items (``LinkClassifier.repeated_items``)
                self.counters["links_as_items"] += 1
            # A "next page" the site's own shapes call a detail is one ("/p/2" is a post on many blogs).
            paginated = link in next_pages and kind is not UrlKind.DETAIL
            if paginated:
                kind = UrlKind.LISTING
            if kind is UrlKind.FEED:
                self._queue_feed(link)
                continue
            if kind is None:
                self.counters["links_unclassified"] += 1  # neither a detail nor a listing by any rule: not followed
            if kind not in (UrlKind.DETAIL, UrlKind.LISTING):
                continue
            if kind is UrlKind.LISTING and not (follow_listings or (paginated and self.site.profile.use_listings)):
                continue
            # The next page of a listing is the same listing, one step on: it does not count as a level of depth
            # (a 40-page archive would otherwise hide its tail); the page budget and trap filters bound it.
            item = self.site.admit(
                link, base=None, source=Source.PAGINATION if paginated else Source.LISTING, where=claimed.url,
                depth=claimed.depth if paginated else depth, now=now, allowed=self.rules.allowed, kind=kind,
                report_to=self.origin,
            )
            if item is not None:
                outlinks[item.url] = item
        return outlinks

    def _listing_failure(self, claimed: ClaimedUrl, result: FetchResult, base: Completion) -> Completion:
        """Gone, disallowed or failed: the same fetch-to-state rules as extraction (``revisit.classify_outcome``)."""
        outcome = revisit.classify_outcome(claimed, result, None, settings=self.settings, now=utcnow())
        return replace(
            base, state=outcome.state, error_class=outcome.error_class, error=outcome.error,
            next_fetch_at=outcome.next_fetch_at or base.next_fetch_at,
        )

    # -- feeds --------------------------------------------------------------------------------------------------

    def _queue_feed(self, url: str) -> None:
        canonical = self.site.canonicalize(url)
        if canonical is None or canonical in self._feeds_seen or not self.site.in_scope(canonical):
            return
        if self.site.profile.use_feeds:
            self._feeds_found.append(canonical)  # written with the listing page that named it (``_listings``)
        self._feeds_seen.add(canonical)
        self._feeds.append(canonical)

    async def _drain_feeds(self) -> None:
        while self._feeds:
            await self._feed(self._feeds.popleft())

    async def _feed(self, url: str) -> None:
        """A feed head, then its older documents (RFC 5005) while they may hold entries not seen before.

        First read: every ``rel="next"`` page and every ``prev-archive`` archive, up to ``max_feed_pages``. On a
        later read the head comes first (conditionally: a 304 ends it); a next page is read only when the page
        before it held nothing but news (entries dated after our last read of the head, on the server's clock,
        or, undated, URLs new to the frontier), since a feed lists newest first; archives never change
        (RFC 5005 §4), so known ones are walked past without a request and only new ones are read.
        """
        known = await db(self.store.get_document, url)
        if known is not None and not self._due(known):
            self.counters["documents_skipped"] += 1
            return
        if known is not None and known.kind == "feed_mirror" and self._mirror_fresh(known):
            self.counters["feed_mirrors_skipped"] += 1
            return
        last_read = known.fetched_at if known is not None and known.content_hash is not None else None
        head = await self._feed_document(url, "feed", known, last_read)
        if head is None:
            return
        if head.repeats or (known is not None and known.kind == "feed_mirror"):
            # Everything it lists came from another feed of this host in this run (the Atom twin of an RSS
            # feed, a category feed): poll it again only after feed_mirror_recheck_s, and read no older pages.
            # Once a mirror, its head is still read (an Atom twin ordered by `updated` shows edits of old
            # entries, which then differ from the twin's head) but its history is the twin's: never walked.
            self.counters["feeds_mirrored"] += 1
            await db(self.store.save_document, replace(head.state, kind="feed_mirror"))
            return
        rereading = known is not None and known.content_hash is not None
        reference = revisit.http_time(known.last_modified) if known is not None and rereading else None
        budget = self.settings.discovery.max_feed_pages - 1
        page: _FeedRead | None = head
        while page is not None and page.doc.next_page and budget > 0:
            if rereading and not page.only_news(reference):
                self.counters["feed_pages_not_needed"] += 1
                break
            target = page.doc.next_page
            if target in self._feed_docs_seen or not self.site.in_scope(target):
                break
            budget -= 1
            page = await self._feed_document(
                target, "feed_page", await db(self.store.get_document, target), last_read
            )
        archive = head.doc.prev_archive
        while archive is not None and budget > 0 and archive not in self._feed_docs_seen:
            if not self.site.in_scope(archive):
                break
            known_archive = await db(self.store.get_document, archive)
            if known_archive is not None and known_archive.content_hash is not None:
                self._feed_docs_seen.add(archive)
                self.counters["feed_archives_known"] += 1
                archive = known_archive.children[0] if known_archive.children else None
                continue
            budget -= 1
            read = await self._feed_document(archive, "feed_archive", known_archive, None)
            archive = read.doc.prev_archive if read is not None else None
        if budget <= 0 and ((page is not None and page.doc.next_page) or archive is not None):
            self._problem(f"feed {url}: more than {self.settings.discovery.max_feed_pages} documents; rest skipped")

    async def _feed_document(
        self, url: str, kind: str, known: DocumentState | None, last_read: datetime | None
    ) -> _FeedRead | None:
        """Fetch (conditionally) and ingest one feed document; None when it answered 304 or failed.
        ``last_read``: our previous read of the feed, to tell entries found since (None: all are new)."""
        assert self.rules is not None
        self._feed_docs_seen.add(url)
        result = await self.client.fetch(
            url, validators=known.validators if known else Validators(), accept=FEED_TYPES,
            max_bytes=self.settings.discovery.max_feed_bytes,
        )
        now = utcnow()
        if result.not_modified and known is not None:
            self.counters["feeds_not_modified"] += 1
            await db(self.store.save_document, self._refetched(known, now))
            return None
        if not result.ok or result.body is None:
            self._failed_document(url, "feed", result)
            await db(self.store.save_document, self._failure(url, kind, result, now, known))
            return None
        # Off the event loop: feedparser reads a megabyte in about half a second (a malformed one, through its
        # loose parser, in more than one), and every other host's discovery would wait that long.
        doc = await asyncio.to_thread(parse_feed, result.body, url=url)
        for problem in doc.problems[:5]:
            self._problem(f"feed {url}: {problem}")
        batch: list[DiscoveredUrl] = []
        dates: list[datetime | None] = []
        for entry in doc.entries:
            # Only a modification date (Atom updated, JSON Feed date_modified) is stored as lastmod: an RSS
            # pubDate stays put when the page is edited, so as "lastmod" it would predict "unchanged" forever.
            item = self.site.admit(
                entry.link, base=url, source=Source.FEED, where=url, depth=1, now=now, allowed=self.rules.allowed,
                lastmod=entry.updated, published=entry.published, trusted=True, fetched_at=now,
                report_to=self.origin,
            )
            if item is not None:
                batch.append(item)
                dates.append(entry.lastmod)
        admitted = len(batch)
        urls = frozenset(item.url for item in batch)
        repeats = bool(urls) and urls <= self._feed_entries
        if len(self._feed_entries) < MAX_FEED_ENTRIES_REMEMBERED:
            self._feed_entries |= urls
        seen_before = await db(self.store.known_urls, list(urls), before=last_read) if last_read and urls else ()
        await self._flush(batch)
        self.counters["feeds_parsed" if kind == "feed" else "feed_pages_parsed"] += 1
        revisit_s = self.settings.discovery.feed_revisit_s
        state = DocumentState(
            url=url, kind=kind, status=result.status, etag=result.etag, last_modified=result.last_modified,
            content_hash=hashlib.sha256(result.body).hexdigest(), fetched_at=now, read_at=now,
            next_fetch_at=revisit.due_at(now, revisit_s, self.settings.revisit), url_count=len(doc.entries),
            # An archive leads to the one before it, so a later read can walk past known archives.
            children=(doc.prev_archive,) if kind == "feed_archive" and doc.prev_archive else (),
        )
        # A feed's head is re-read every run: an entry it showed last time and not now has been pushed out by
        # newer ones or deleted, and one conditional request tells which. Pages past the head shift every day.
        vanished = self._vanished(Source.FEED, url, known, now) if kind == "feed" else None
        self.counters["urls_vanished_rechecked"] += await db(self.store.save_document, state, vanished=vanished)
        return _FeedRead(doc=doc, admitted=admitted, fresh=admitted - len(seen_before), dates=tuple(dates),
                         state=state, repeats=repeats)

    def _mirror_fresh(self, known: DocumentState) -> bool:
        """A feed found to repeat another is skipped until our last read of it is ``feed_mirror_recheck_s`` old."""
        if known.fetched_at is None:
            return False
        age_s = (utcnow() - aware(known.fetched_at)).total_seconds()
        return age_s < self.settings.discovery.feed_mirror_recheck_s

    # -- documents ----------------------------------------------------------------------------------------------

    def _due(self, doc: DocumentState) -> bool:
        """Asked in every run that has not asked it yet, whatever minute the run starts: a document that can be
        asked conditionally (it was read, and the server gave a validator) costs the site a 304 when unchanged,
        and it is what announces changes, new pages and deletions. One without validators would be downloaded
        whole each time: it waits for its revisit time (``revisit.due_at``: a little ahead of the interval, so a
        run on the same schedule as the last one finds it due). A failed one waits for its retry time."""
        if doc.fetched_at is not None and doc.fetched_at >= self.run_started:
            return False
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
        return Vanished(labels=(provenance(source, url),), origins=tuple(self._homes()), named_since=known.read_at,
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

