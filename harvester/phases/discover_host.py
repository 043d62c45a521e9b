"""Discovery of one host through the polite client: robots.txt, seeds, then its steps in order: the sitemap walk
(``discover_sitemaps``), the listing crawl (``discover_listings``) with the feed reader beside it, then the feeds
left (``discover_feeds``). Each step is its own object over the host's ``HostContext`` (``discover_context``); the
feeds the others find reach the reader through its ``FeedQueue``.

Resumable: a document already processed in this run is not fetched again, and the listing crawl lives in the
frontier (listing URLs are leased and completed with their outlinks in one transaction), so a killed discovery
picks up where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from harvester.errors import Interrupted, StoreError
from harvester.fetch.workers import turn_ended
from harvester.owners import retire_owner
from harvester.phases.discover_feeds import FeedQueue, FeedReader
from harvester.phases.discover_listings import ListingCrawl
from harvester.phases.discover_sitemaps import SitemapWalk
from harvester.records import (
    ErrorClass,
    FetchResult,
    Source,
    UrlKind,
    UrlState,
    Validators,
    origin_of,
)
from harvester.rules import revisit
from harvester.runtime import check_stop, db, settle, utcnow

if TYPE_CHECKING:
    from collections import Counter
    from datetime import datetime

    from harvester.fetch.engine import PoliteClient
    from harvester.frontier import UrlInfo
    from harvester.phases.discover_context import HostContext

logger = logging.getLogger(__name__)


async def discover_hosts(client: PoliteClient, origins: Sequence[str], make: Callable[[str], HostDiscovery],
                         finished: Callable[[HostDiscovery], None], *, at_once: int) -> None:
    """Discover ``origins``, at most ``at_once`` hosts at a time (``politeness.max_active_hosts``, as extraction).

    Memory stays flat however many hosts a site has: only the hosts being discovered hold a ``HostDiscovery`` (its
    sets of what it read and found) and an open pool in ``client``. Each is made by ``make`` when its turn comes,
    handed to ``finished`` once its discovery returned (its politeness state saved: the caller may hand it over to
    extraction), then dropped, its pool closed in the background (``PoliteClient.retire``: recreated on demand, its
    gate kept). The first failure propagates at once, as from ``asyncio.gather``; but the process's stop
    (``Interrupted``, met by one host at its next request) propagates once every host being discovered has
    stopped too: each sends no request any more, but records what it read and what it has on the wire, so the
    rerun asks none of it again (left running, they were cancelled with the run's event loop, their answers
    lost). No host starts after the stop.
    """
    pending = iter(origins)
    closing: set[asyncio.Task[None]] = set()

    async def worker() -> None:
        for origin in pending:  # one shared iterator: each origin is taken by exactly one worker
            check_stop()
            item = make(origin)
            try:
                await item.run()
            finally:
                await _hand_back(item)
            finished(item)
            for home in item.homes():
                turn_ended(client, home, closing)

    workers = [asyncio.create_task(worker(), name="discover hosts")
               for _ in range(max(1, min(at_once, len(origins))))]
    try:
        await asyncio.gather(*workers)
    except Interrupted:
        left = sum(1 for task in workers if not task.done())
        if left:
            logger.info("stopping: waiting for %d more hosts to record what they read", left)
        ended = await asyncio.gather(*workers, return_exceptions=True)  # cancelled, it cancels them too
        for failed in ended:
            if isinstance(failed, Exception):
                logger.warning("a host failed as discovery stopped: %s", failed, extra={"error_class": "internal"})
        raise
    finally:
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)


async def _hand_back(item: HostDiscovery) -> None:
    """However the host's discovery ended, its claims go back, then its owner is retired. A stop met with listing
    pages claimed and unread (one whose turn met ``check_stop``, a continuation, a facet variant held) left them
    leased to a dead owner until the next run recovered them, while the CLI said the leases were given back (a
    SIGINTed harvest under load: one listing page leased). A store fault here is logged: the next run's recovery
    (``recover_leases``) takes them back as before."""
    try:
        await db(item.host.store.release_owner, item.host.owner)
    except StoreError as exc:
        logger.warning("%s: could not hand back discovery's leases: %s", item.host.origin, exc,
                       extra={"error_class": "storage"})
    finally:
        retire_owner(item.host.owner)


def _seed_due(known: UrlInfo, now: datetime) -> bool:
    """Whether the listing crawl claims this stored seed in this run (``FrontierStore.claim``'s rule)."""
    due_at = known.next_fetch_at
    return known.state in (UrlState.QUEUED.value, UrlState.DONE.value) and (due_at is None or due_at <= now)


class HostDiscovery:
    """One host's discovery in one run: robots.txt, seeds, then the sitemap walk, the listing crawl (the feed reader
    beside it) and the feeds left, in that order, each step an object of its own over ``host``."""

    def __init__(self, host: HostContext, *, listed: Callable[[list[str]], None] | None = None) -> None:
        self.host = host
        self.listed = listed
        """Called with the host's homes once its sitemaps are read: the caller may hand it to extraction beside
        the rest of its discovery (``handover.Handover.hand_over``'s ``beside``)."""
        self.feeds = FeedQueue(host.site)
        """Feeds found by any step (a seed, a sitemap, a listing page), for the reader."""
        self.reader = FeedReader(host, self.feeds)
        self.sitemaps = SitemapWalk(host, self.feeds)
        self.listings = ListingCrawl(host, self.feeds, between_batches=self.reader.read_beside)

    @property
    def counters(self) -> Counter[str]:
        """What the task reports, with ``problems``."""
        return self.host.counters

    @property
    def problems(self) -> list[str]:
        return self.host.problems

    def homes(self) -> list[str]:
        return self.host.homes()

    async def run(self) -> None:
        """Discover the host. Its persisted politeness state applies first: a host still parked from an earlier
        run gets no request at all, and a back-off still running delays the first one (robots.txt included)."""
        host = self.host
        try:
            await self._run()
        except Interrupted:
            await self.sitemaps.record_asked()  # asked beside the seed: an answer in is recorded
            raise
        finally:
            await self.sitemaps.drop_asked(cancel=True)  # asked beside the seed, never walked (a failure between)
            await host.record_all_refused()
            await host.urls.aclose()
            if host.policies is not None:
                for home in host.homes():
                    await host.policies.save(home)

    async def _run(self) -> None:
        host, site = self.host, self.host.site
        if host.policies is not None:
            parked = await host.policies.load(host.origin)
            if parked:
                host.counters["hosts_parked"] += 1
                host.problem(f"{host.origin}: parked ({parked}); nothing discovered")
                return
        rules = await host.read_robots()
        await host.rejudge()
        if rules.mode == "disallow":  # RFC 9309 §2.3.1.4: 5xx or unreachable means disallow all
            state = rules.state
            why = state.error_class.value if state.error_class is not None else f"http_{state.status}"
            host.counters[f"robots_unavailable:{why}"] += 1
            # Name what was refused: the address robots.txt redirected to, not the seed's own origin.
            at = f" at {state.refused}" if state.refused and not state.refused.startswith(host.origin + "/") else ""
            host.problem(f"{host.origin}: robots.txt unavailable ({why}{at}): nothing is requested until it "
                         "answers; its URLs keep their state and last good version, deferred to the next run")
        parked = host.client.parked(host.origin)
        if parked and rules.mode == "disallow" and parked.startswith("robots.txt unavailable"):
            # The client parked the host for it (``fetch.engine.robots_unavailable``): no sitemap probe, feed or
            # listing page is asked, so none is counted as refused (nor as a problem of the site's sitemaps).
            host.counters["hosts_parked"] += 1
            # A first harvest's seeds are still the frontier's: queued, never fetched, deferred like the rest.
            await self._add_seeds([url for url in site.seeds_of(host.origin) or [host.origin + "/"]
                                   if site.classifier.classify(url) not in (UrlKind.SITEMAP, UrlKind.FEED)],
                                  allowed=lambda _url: True)
            return
        if parked:
            host.problem(f"{host.origin}: parked ({parked}); nothing discovered")
            return
        profile = site.profile
        seed_urls = site.seeds_of(host.origin) or [host.origin + "/"]
        # A seed that names a sitemap or a feed (https://example.org/sitemap_index.xml) is read as one: it is the
        # operator's pointer to what the site publishes, not a page whose links to follow.
        published = {url: kind for url in seed_urls
                     if (kind := site.classifier.classify(url)) in (UrlKind.SITEMAP, UrlKind.FEED)}
        self.sitemaps.add_seeds([url for url, kind in published.items() if kind is UrlKind.SITEMAP])
        for url, kind in published.items():
            if kind is UrlKind.FEED:
                self.feeds.offer(url)
            if not (profile.use_sitemaps if kind is UrlKind.SITEMAP else profile.use_feeds):
                host.problem(f"{host.origin}: the seed {url} is a {kind.value}, which this profile does not read")
        seed_urls = [url for url in seed_urls if url not in published]
        if profile.use_sitemaps and not site.moved.get(host.origin) and seed_urls:
            self.sitemaps.ask_ahead()  # beside the seed's request, which the walk waits for
        moved = site.moved.get(host.origin) or (await self._seed_moved(seed_urls[0]) if seed_urls else None)
        if moved is not None:
            host.move_to(moved)
            if host.policies is not None:
                # Read as part of this host from here on: its persisted back-off or park holds for our requests.
                await host.policies.load(moved)
        self.sitemaps.home_known()
        await self._add_seeds(seed_urls, allowed=rules.allowed)
        # The seed's answer is recorded now, beside the walk, not once the crawl claims it after the walk: a kill
        # meanwhile asked it again (issue 31).
        early = asyncio.ensure_future(self.listings.read_kept())
        try:
            if profile.use_sitemaps:
                await self.sitemaps.walk()
        except Interrupted:
            await asyncio.gather(early, return_exceptions=True)  # what it read is recorded
            raise
        except BaseException:
            await settle([early], cancel=True)
            raise
        await early
        if self.listed is not None:
            # What the sitemaps listed (and their lastmod verdicts) is in the frontier: extraction may fetch it while
            # the listing crawl and the feeds, often chains of one page after another, go on through the same gate.
            self.listed(host.homes())
        try:
            await self.listings.crawl()  # the feeds found so far read beside it (``FeedReader.read_beside``)
        except Interrupted:
            await self.reader.stop(cancel=False)  # what it read is recorded; it stops at its next request
            raise
        except BaseException:
            await self.reader.stop(cancel=True)
            raise
        await self.reader.caught_up()
        if profile.use_feeds:
            # Feeds read before are polled on their own schedule, whether or not a page advertising them changed.
            for known in await db(host.store.host_documents, host.origin, kinds=("feed", "feed_mirror")):
                self.feeds.offer(known.url)
            await self.reader.read_queued()
        host.report.add_rejections({}, source="link")
        await self._nothing_taken()

    async def _add_seeds(self, seed_urls: list[str], *, allowed: Callable[[str], bool]) -> None:
        """The seeds as the frontier's listing pages (those ``allowed`` refuses are counted as refused)."""
        now = utcnow()
        seeds = [
            item for url in seed_urls
            if (item := self.host.site.admit(url, base=None, source=Source.SEED, where="", depth=0, now=now,
                                             allowed=allowed, kind=UrlKind.LISTING, trusted=True))
        ]
        if seeds:
            await db(self.host.store.add_discovered, seeds)

    async def _nothing_taken(self) -> None:
        """Say so when the host's listing pages named links and none was taken for a page to harvest, and the
        frontier holds none of its pages: a run of "new: 0" that read a shop's whole list is no clean result."""
        host = self.host
        unclassified = host.counters["links_unclassified"]
        if not unclassified or await db(host.store.holds_kind, host.homes(), kind=UrlKind.DETAIL.value):
            return
        host.problem(f"{host.origin}: {unclassified} links on {host.counters['listing_pages']} listing pages, none "
                     "taken for a page to harvest (no sitemap or feed, and no item shape recognized): nothing to "
                     "extract; name the item URLs in the profile's detail_patterns")

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
        known = await db(self.host.store.url_info, seed)
        if known is None:
            result = await self._fetch_seed(seed, Validators())
            self.listings.keep_answer(seed, result)
            return await self._moved_to(seed, result, due=True)
        validators = Validators(known.etag, known.last_modified)
        if _seed_due(known, utcnow()):
            result = await self.host.client.fetch(seed, validators=validators,
                                                  accept=self.host.settings.http.allowed_content_types)
            self.listings.keep_answer(seed, result)
            if result.error_class is not ErrorClass.OUT_OF_SCOPE or result.status not in revisit.PERMANENT_REDIRECTS:
                return None
            return await self._moved_to(seed, await self._fetch_seed(seed, validators), due=True)
        if known.last_status not in revisit.PERMANENT_REDIRECTS:
            return None
        return await self._moved_to(seed, await self._fetch_seed(seed, validators), due=False)

    async def _fetch_seed(self, seed: str, validators: Validators) -> FetchResult:
        """The seed asked following any redirect (off the scope too, the deny patterns holding on every hop)."""
        denied = self.host.site.filter.denied
        return await self.host.client.fetch(
            seed, accept=self.host.settings.http.allowed_content_types, validators=validators,
            in_scope=lambda hop: hop.startswith(("http://", "https://")) and not denied(hop),
        )

    async def _moved_to(self, seed: str, result: FetchResult, *, due: bool) -> str | None:
        """Record the move ``result`` shows, if it is one (see ``_seed_moved``); ``due``: the listing crawl reads
        the seed itself in this run, else the page it leads to is admitted to be read in its place."""
        final = result.final_url or result.url
        target = origin_of(final)
        if (not result.ok or not revisit.is_permanent_move(result) or target == self.host.origin
                or self.host.site.in_scope(final)):
            return None
        if due:
            self.listings.keep_answer(seed, result)
        await db(self.host.store.set_moved_to, self.host.origin, target)
        self.host.site.add_moved({self.host.origin: target})
        self.host.counters["seeds_moved"] += 1
        self.host.problem(f"{self.host.origin}: the seed {seed} redirects to {final}; {target} is crawled as this site")
        if not due:
            # The seed stays as its redirect left it: the page it leads to is read in its place, with this answer.
            home = self.host.site.admit(final, base=None, source=Source.SEED, where="", depth=0, now=utcnow(),
                                        kind=UrlKind.LISTING, trusted=True)
            if home is not None:
                await db(self.host.store.add_discovered, [home])
                self.listings.keep_answer(home.url, result)
        return target

