"""The listing crawl of one host: listing pages leased from the frontier like extraction, their links classified
and admitted, next pages followed only after a page of news."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from harvester.discovery.listings import PageLinks, apply_robots_header, extract_links
from harvester.errors import Interrupted
from harvester.extraction import read_listing
from harvester.fetch.robots import robots_token
from harvester.phases.discover_context import HostContext
from harvester.phases.discover_feeds import FeedQueue
from harvester.records import (
    ClaimedUrl,
    Completion,
    DiscoveredUrl,
    FetchResult,
    PageRecord,
    Source,
    UrlKind,
    UrlState,
    Vanished,
    provenance,
)
from harvester.rules import revisit
from harvester.rules.classify import is_pagination, same_list
from harvester.rules.facets import FacetChoice
from harvester.runtime import aware, db, settle, utcnow

logger = logging.getLogger(__name__)

FOLLOW_NEW_SHARE = 0.5
"""A revisited listing page whose detail links are at least this share new to the frontier may continue on its
next page (a full page of news; sticky posts on top and widgets of known links keep the share below 1)."""


class ListingCrawl:
    """The listing pages of one host: leased from the frontier, links classified and admitted, next pages after a
    page of news. Feeds a page names are offered to ``feeds``; ``between_batches`` is called before the first batch
    of pages and after each (the host's discovery starts its feed reader beside the crawl there)."""

    def __init__(
        self, host: HostContext, feeds: FeedQueue, *, between_batches: Callable[[], None] = lambda: None
    ) -> None:
        self.host = host
        self.feeds = feeds
        self._between_batches = between_batches
        self._prefetched: dict[str, FetchResult] = {}
        """Pages already asked by the host's discovery (its seed, see ``keep_answer``): read from here, not again."""
        self._follows: dict[str, bool] = {}
        """Listing pages read (or passed over) in this run → whether their next pages may hold news."""
        self._listed_details: set[str] = set()
        """Detail URLs the listing pages read in this run listed: what a facet variant must add to be useful."""
        self._started = host.run_started
        """When this host's listing crawl began: items the frontier held before it were found by other pages."""
        self._vanished_from: dict[int, Vanished] = {}
        """Listing pages read in this batch → what they may have stopped naming (written with their completion)."""
        self._read_early: list[tuple[ClaimedUrl, FetchResult, set[str]]] = []
        """Pages read and recorded before the sitemap walk ended (``read_kept``), their answer and the links that
        reached admission then: judged again after it (``_rejudge``)."""
        self._judged: set[str] = set()
        """The links (canonical) the last ``outlinks`` call took to admission."""
        self._writing = asyncio.Lock()
        """The crawl's pages are written one at a time: pages of one site name the same URLs, and two upserts of
        them in another order deadlocked on PostgreSQL past ``runtime.db``'s retries. SQLite takes one writer
        anyway."""

    def keep_answer(self, url: str, result: FetchResult) -> None:
        """``url`` was asked already (the seed, by the host's discovery): the crawl reads this answer when it
        claims it, instead of asking again."""
        self._prefetched[url] = result

    async def read_kept(self) -> None:
        """Read and record the answers already in hand (the seed's, ``keep_answer``) now, beside the sitemap walk:
        held until the crawl claimed them after the walk, a kill meanwhile asked them again (issue 31). Their links
        are judged again once the walk has taught the classifier the site's detail shapes (``_rejudge``). A page
        the claim did not reach (another due listing page scored above it) is left to the crawl, as before."""
        if not self._prefetched:
            return
        claimed = await db(
            self.host.store.claim, self.host.owner, hosts=self.host.homes(), per_host=len(self._prefetched),
            lease_s=self.host.settings.store.lease_s, kinds=(UrlKind.LISTING,), beside=sorted(self.host.beside),
        )
        kept = [item for item in claimed if item.url in self._prefetched]
        others = [item.id for item in claimed if item.url not in self._prefetched]
        if others:
            await db(self.host.store.release, self.host.owner, others)
        for item in kept:
            result = self._prefetched[item.url]
            self._judged = set()
            read = await self._listing(item)
            self._read_early.append((item, result, self._judged))
            self.host.counters["listing_pages"] += 1 - await self._write_listings([read])

    async def _rejudge(self) -> None:
        """The links of the pages read before the sitemap walk (``read_kept``), judged again by the classifier the
        walk taught: what it now admits is added (a detail only the sitemaps' shapes tell). Nothing is counted or
        reported twice. A rerun whose earlier attempt recorded such a page has no answer in hand: those few links
        wait for the page's next read."""
        early, self._read_early = self._read_early, []
        for claimed, result, judged in early:
            if not result.ok or result.body is None:
                continue
            # Off the loop, as the first read's parse (``_read_listing``): the hosts' answers wait for none.
            links = await asyncio.to_thread(extract_links, result.body, base_url=result.final_url,
                                            content_type=result.content_type)
            page = apply_robots_header(
                links, result.headers.get("x-robots-tag"),
                robots_token(self.host.client.user_agent, self.host.settings.robots),
            )
            if page.robots_nofollow:
                continue
            added = list(self.outlinks(claimed, page, utcnow(), judged=judged).values())
            if added:
                self.host.counters["listing_links_rejudged"] += len(added)
                await self.host.urls.add(added)

    async def crawl(self) -> None:
        """Breadth-first over listing pages held in the frontier, within the depth and page budget.

        A listing page known only as the next page of others (a pure continuation) is, on a revisit, read
        only when a page before it in this run was mostly news (``_follows``): a list shows its newest items
        first, so once a page holds known items the pages after it hold older, known ones (see
        ``_continuation``). Continuations are handled after the rest of their batch, in claim order.

        A facet variant still to be judged (``FacetChoice.PROBE``) is held, claimed, until no plain listing page
        is left to claim: judged before the pagination reached its items, a filter listing page 9's items on
        page 1 looked useful and every variant of it was read. Then the held ones are read one at a time.
        """
        discovery = self.host.settings.discovery
        budget = discovery.listing_page_budget
        fetched = self.host.counters["listing_pages"]  # read before the walk ended (``read_kept``)
        limit = self.host.client.gate_config.start_limit  # the site's limit as its gates start
        self._started = utcnow()
        await self._rejudge()
        self._between_batches()  # feeds the seeds named
        held: dict[int, ClaimedUrl] = {}
        """Facet variants to be judged, waiting (claimed) for the plain listing's end."""
        while fetched < budget:
            claimed = await db(
                self.host.store.claim, self.host.owner, hosts=self.host.homes(),
                per_host=min(2 * limit, budget - fetched), lease_s=self.host.settings.store.lease_s,
                kinds=(UrlKind.LISTING,), beside=sorted(self.host.beside),
            )
            ending = not claimed
            if ending:
                if not held:
                    break
                # Every plain listing page is read: what a variant lists is now judged against all they reach.
                claimed, held = list(held.values())[: budget - fetched], {}
            firsts: list[ClaimedUrl] = []
            probes: list[ClaimedUrl] = []
            continuations: list[tuple[ClaimedUrl, list[str]]] = []
            items: list[tuple[Completion, list[DiscoveredUrl]]] = []
            for item in claimed:
                choice = self.host.site.facets.choose(item.url)
                if choice is FacetChoice.USELESS:
                    items.append(self._variant_not_needed(item))
                    continue
                if choice is FacetChoice.PROBE:
                    if ending:
                        probes.append(item)
                    else:
                        held[item.id] = item
                    continue
                before = await self._predecessors(item)
                if before:
                    continuations.append((item, before))
                else:
                    firsts.append(item)
            # Each page is written as soon as it is read (and the page being written before it is), by its own task:
            # not with the rest of its batch. A kill repeats only the requests in flight (issue 31).
            lost = await self._write_listings(items) if items else 0
            reading = [asyncio.create_task(self._read_and_write(item)) for item in firsts]
            try:
                lost += sum(await asyncio.gather(*reading))
            except Interrupted:
                # No page sends its request any more (each meets ``check_stop`` first), but those on the wire end
                # and are written, so the rerun does not ask them again. A cancel meanwhile cancels the rest.
                await self._settle_on_stop(reading)
                raise
            except BaseException:
                await settle(reading, cancel=True)
                raise
            for item in probes:
                # One at a time, after the plain pages of the batch: each verdict is in before the next variant
                # is asked, so a site whose filters add nothing costs a few requests however many were claimed.
                if self.host.site.facets.choose(item.url) is FacetChoice.USELESS:
                    lost += await self._write_listings([self._variant_not_needed(item)])
                else:
                    self.host.counters["listing_variants_probed"] += 1
                    lost += await self._write_listings([await self._listing(item)])
            for item, before in continuations:
                lost += await self._write_listings([await self._continuation(item, before)])
            taken = len(claimed) - sum(1 for item in claimed if item.id in held)
            self.host.counters["listing_pages"] += taken - lost
            fetched += taken
            self._between_batches()
        if held:  # the budget ran out first: the variants waiting go back to the queue for a later run
            await db(self.host.store.release, self.host.owner, list(held))
        if fetched >= budget:
            self.host.problem(f"{self.host.origin}: listing page budget of {budget} reached")

    async def _read_and_write(self, claimed: ClaimedUrl) -> int:
        """Read one listing page and write it at once; returns 1 when its lease was lost."""
        return await self._write_listings([await self._listing(claimed)])

    @staticmethod
    async def _settle_on_stop(reading: list[asyncio.Task[int]]) -> None:
        """The process is stopping (``runtime.request_stop``): the pages being read end and write what they read
        (cancelled, their answers were lost and the cycle's counts missed them). A cancel meanwhile (the stop's
        grace spent) cancels the rest."""
        try:
            await asyncio.gather(*reading, return_exceptions=True)
        except BaseException:
            await settle(reading, cancel=True)
            raise

    async def _write_listings(self, items: list[tuple[Completion, list[DiscoveredUrl]]]) -> int:
        """Complete listing pages read (with what they named, what they stopped naming and the feeds found so far)
        in one transaction; returns how many were lost (their lease gone)."""
        ids = {completion.url_id for completion, _ in items}
        vanished = {url_id: self._vanished_from.pop(url_id) for url_id in ids if url_id in self._vanished_from}
        async with self._writing:
            feeds = self.feeds.take_found()
            done = await db(self.host.store.complete_many, self.host.owner, items, run_id=self.host.run_id,
                            vanished=vanished, feeds=feeds, read_as=UrlKind.LISTING)
        # What the pages named, counted as the sitemaps' and feeds' URLs are (``UrlBatches``): a cycle's "found by
        # discovery" is ``urls_new``, and said 1 where a listing page had added two more.
        counters = self.host.counters
        counters["urls_new"] += done.outlinks.inserted
        counters["urls_seen_again"] += done.outlinks.updated
        counters["urls_made_due"] += done.outlinks.made_due
        return done.lost

    async def _predecessors(self, claimed: ClaimedUrl) -> list[str]:
        """The pages whose next page ``claimed`` is, when it was read before and is reached in no other way.

        Only pages of its own list (``same_list``): a numbered link from another page (a home page's "All products"
        to ``/list?page=1``) makes ``claimed`` the first page of a list, read when due, not a continuation that
        page's verdict may pass over. The seed answering 304 stopped the whole list being read again."""
        if claimed.last_fetched_at is None or claimed.content_hash is None:
            return []
        labels = await db(self.host.store.sources_of, claimed.url)
        prefix = f"{Source.PAGINATION.value}:"
        if not labels or not all(label.startswith(prefix) for label in labels):
            return []
        before = [label[len(prefix):] for label in labels]
        if not all(same_list(page, claimed.url) for page in before):
            return []
        return before

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
        if any(verdicts) or not verdicts or age >= self.host.settings.discovery.pagination_recheck_s:
            return await self._listing(claimed)
        self._follows[claimed.url] = False
        self.host.counters["listing_pages_not_needed"] += 1
        revisit_s = self.host.settings.discovery.listing_revisit_s
        return Completion(
            url_id=claimed.id, state=UrlState.DONE, fetched_at=claimed.last_fetched_at,
            content_hash=claimed.content_hash, etag=claimed.etag, last_modified=claimed.last_modified,
            next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit), revisit_s=revisit_s,
            claimed=True, claimed_lastmod=claimed.lastmod,
        ), []

    async def _listing(self, claimed: ClaimedUrl) -> tuple[Completion, list[DiscoveredUrl]]:
        completion, outlinks, follows = await self._read_listing(claimed)
        if follows is not None:
            self._follows[claimed.url] = follows
        if completion.changed:
            await self._learn_items(claimed.url, [item.url for item in outlinks if item.kind is UrlKind.DETAIL])
        return completion, outlinks

    async def _learn_items(self, url: str, details: list[str]) -> None:
        """Tell the site's ``FacetLearner`` what a facet variant read added: the details it lists that no listing
        page read before it listed and that the frontier held before this listing crawl from anything but a
        variant (an item only a filter reaches was first found by that filter, and it keeps counting as its)."""
        facets = self.host.site.facets
        if not facets.is_variant(url):
            facets.read_plain(url)
        elif facets.choose(url) is FacetChoice.PROBE:
            new = [detail for detail in details if detail not in self._listed_details]
            if new:
                firsts = await db(self.host.store.first_sources, new, before=self._started)
                new = [detail for detail in new if detail not in firsts or self._from_variant(firsts[detail])]
            facets.learned(url, added=len(new))
            self.host.counters["listing_variants_useful" if new else "listing_variants_useless"] += 1
        self._listed_details.update(details)

    def _from_variant(self, label: str) -> bool:
        kind, _, where = label.partition(":")
        return kind in (Source.LISTING.value, Source.PAGINATION.value) and self.host.site.facets.is_variant(where)

    def _variant_not_needed(self, claimed: ClaimedUrl) -> tuple[Completion, list[DiscoveredUrl]]:
        """A queued facet variant whose parameters turned out to add nothing on this site: completed without a
        request (due again at the listing revisit, when the next run judges afresh) and counted in the report."""
        self.host.counters["listing_variants_not_fetched"] += 1
        self.host.report.add_unfetched(Source.LISTING, FacetChoice.USELESS.value)
        now = utcnow()
        revisit_s = self.host.settings.discovery.listing_revisit_s
        return Completion(
            url_id=claimed.id, state=UrlState.DONE, fetched_at=claimed.last_fetched_at or now,
            content_hash=claimed.content_hash, etag=claimed.etag, last_modified=claimed.last_modified,
            next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit), revisit_s=revisit_s,
            claimed=True, claimed_lastmod=claimed.lastmod,
        ), []

    async def _read_listing(self, claimed: ClaimedUrl) -> tuple[Completion, list[DiscoveredUrl], bool | None]:
        """One listing page; the flag says whether its next pages may hold news (it was mostly news itself),
        None when the fetch failed and says nothing about them."""
        result = self._prefetched.pop(claimed.url, None) or await self.host.client.fetch(
            claimed.target, validators=claimed.validators, accept=self.host.settings.http.allowed_content_types
        )
        now = utcnow()
        revisit_s = self.host.settings.discovery.listing_revisit_s
        base = Completion(
            url_id=claimed.id, state=UrlState.DONE, fetched_at=now, status=result.status, final_url=result.final_url,
            etag=result.etag or claimed.etag, last_modified=result.last_modified or claimed.last_modified,
            next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit), revisit_s=revisit_s,
            claimed=True, claimed_lastmod=claimed.lastmod,
            bytes_read=result.bytes_read, sent_validators=result.sent_validators,
        )
        if result.not_modified and (claimed.etag or claimed.last_modified):  # else a failure (UNASKED_304)
            return base, [], False
        if not result.ok or result.body is None:
            return self._listing_failure(claimed, result, base), [], None
        # The parse in a worker thread, as a sitemap's and a feed's: on the loop, every host's answers waited for it
        # (a listing crawl goes on beside extraction, and the slow host's next requests wait longest, issue 31).
        read = await asyncio.to_thread(read_listing, result.body, base_url=result.final_url,
                                       content_type=result.content_type, headers=result.headers)
        page = apply_robots_header(
            read.links, result.headers.get("x-robots-tag"),
            robots_token(self.host.client.user_agent, self.host.settings.robots),
        )
        for feed in page.feeds:
            self.feeds.offer(feed)
        digest = hashlib.sha256(result.body).hexdigest()
        # The page's bytes are kept as a version like any page's (the store dedups by digest): a list is content.
        # Its title, language and JSON-LD too: null in the export means what the page did not give, a list's too.
        # Not its rel=canonical: a stored page's canonical decides duplicates, and page 2 of a list often names page 1.
        kept = PageRecord(final_url=result.final_url, status=result.status or 200, content_type=result.content_type,
                          content_hash=digest, body=result.body, etag=result.etag, last_modified=result.last_modified,
                          title=read.title, description=read.description,
                          language=read.language, jsonld=read.jsonld,
                          robots=tuple(name for name, on in (("noindex", page.robots_noindex),
                                                             ("nofollow", page.robots_nofollow)) if on))
        completion = replace(base, content_hash=digest, changed=True, page=kept)
        outlinks = {} if page.robots_nofollow else self.outlinks(claimed, page, now)
        # What it names that robots.txt refuses, before the page's completion (a kill repeats both); a page read
        # before has what it named then replaced.
        reread = claimed.content_hash is not None and self.host.rules.refuses_any
        await self.host.record_refused(provenance(Source.LISTING, claimed.url),
                                       provenance(Source.PAGINATION, claimed.url), replace=reread)
        if page.robots_nofollow:
            return completion, [], False
        if claimed.content_hash is not None:
            # Read before: what it named then and does not name now is asked again in this run (moved down the
            # list, a conditional request says so; deleted, a 404/410 marks it gone).
            self._vanished_from[claimed.id] = Vanished(
                labels=(provenance(Source.LISTING, claimed.url), provenance(Source.PAGINATION, claimed.url)),
                origins=tuple(self.host.homes()), named_since=await db(self.host.store.last_read_at, claimed.id),
                seen_before=self.host.run_started, now=now,
            )
        next_pages = set(page.next_pages)
        details = [item.url for item in outlinks.values() if item.kind is UrlKind.DETAIL]
        follows = False
        if details and next_pages:
            # News: details first found after our last read of this page (today's sitemap may know them already).
            known = await db(self.host.store.known_urls, details, before=claimed.last_fetched_at or now)
            follows = len(details) - len(known) >= FOLLOW_NEW_SHARE * len(details)
        return completion, list(outlinks.values()), follows

    def outlinks(self, claimed: ClaimedUrl, page: PageLinks, now: datetime, *,
                 judged: set[str] | None = None) -> dict[str, DiscoveredUrl]:
        """The details and listing pages a listing page links to, admitted (feeds found are queued). ``judged``:
        the page was judged before (``_rejudge``), these links (canonical) reaching admission then: they are
        passed over, and nothing is learned or counted again. The links that reach admission are kept in
        ``_judged`` (read by ``read_kept`` before its next await)."""
        rejudge = judged is not None
        # Shapes are learned and judged on canonical forms: "/p/./250" and "/p/250?utm_source=x" are the post
        # "/p/250", which a raw-form classifier would not recognize (and would drop).
        canonical = {link: self.host.site.canonicalize(link) or link for link in page.links + page.next_pages}
        counters = Counter[str]() if rejudge else self.host.counters
        if not rejudge:
            self.host.site.classifier.observe_page(claimed.url, [canonical[link] for link in page.links])
        depth = claimed.depth + 1
        follow_listings = (self.host.site.profile.use_listings
                           and depth <= self.host.settings.discovery.listing_max_depth)
        nofollow = set(page.nofollow)
        outlinks: dict[str, DiscoveredUrl] = {}
        self._judged = set()
        next_pages = set(page.next_pages)
        decided: list[tuple[str, UrlKind | None]] = []
        for link in page.links + page.next_pages:
            if link in nofollow:
                continue
            kind = self.host.site.classifier.classify(canonical[link])
            if kind is None and claimed.depth == 0:
                kind = self.host.site.classifier.guess_navigation(canonical[link])
            decided.append((link, kind))
        paginated_list = bool(next_pages) or is_pagination(claimed.url)  # a list for sure, not a front page
        items = self.host.site.classifier.repeated_items(
            (canonical[link] for link, kind in decided
             if kind is None and link not in next_pages and self.host.site.in_scope(canonical[link])),
            pager=[canonical[link] for link in page.next_pages], page=claimed.url,
        ) if paginated_list else set()
        for link, kind in decided:
            if kind is None and canonical[link] in items:
                kind = UrlKind.DETAIL  # one of the page's list of items (``LinkClassifier.repeated_items``)
                counters["links_as_items"] += 1
            # A "next page" the site's own shapes call a detail is one ("/p/2" is a post on many blogs).
            paginated = link in next_pages and kind is not UrlKind.DETAIL
            if paginated:
                kind = UrlKind.LISTING
            if kind is UrlKind.FEED:
                self.feeds.offer(link)
                continue
            if kind is None:
                # Neither a detail nor a listing by any rule: not followed.
                counters["links_unclassified"] += 1
            if kind not in (UrlKind.DETAIL, UrlKind.LISTING):
                continue
            if kind is UrlKind.LISTING and not (follow_listings or (paginated and self.host.site.profile.use_listings)):
                continue
            if judged is not None and canonical[link] in judged:
                continue
            self._judged.add(canonical[link])
            if kind is UrlKind.LISTING and (refusal := self._facet_refusal(claimed.url, canonical[link])):
                if not rejudge:
                    self.host.report.add_entry(
                        provenance(Source.PAGINATION if paginated else Source.LISTING, claimed.url), canonical[link],
                        refusal,
                    )
                counters[f"listing_links_refused:{refusal}"] += 1
                continue
            # The next page of a listing is the same listing, one step on: it does not count as a level of depth
            # (a 40-page archive would otherwise hide its tail); the page budget and trap filters bound it.
            item = self.host.site.admit(
                link, base=None, source=Source.PAGINATION if paginated else Source.LISTING, where=claimed.url,
                depth=claimed.depth if paginated else depth, now=now, allowed=self.host.rules.allowed, kind=kind,
                report_to=self.host.origin,
            )
            if item is not None:
                outlinks[item.url] = item
        return outlinks

    def _facet_refusal(self, page: str, link: str) -> str | None:
        """Why the listing link ``link`` (canonical) found on ``page`` is not crawled, or None: the same list
        re-presented, or a variant of facet parameters that added nothing on this site (``rules.facets``)."""
        facets = self.host.site.facets
        if facets.presentation(link, found_on=page):
            return FacetChoice.PRESENTATION.value
        if facets.choose(link) is FacetChoice.USELESS:
            return FacetChoice.USELESS.value
        return None

    def _listing_failure(self, claimed: ClaimedUrl, result: FetchResult, base: Completion) -> Completion:
        """Gone, disallowed or failed: the same fetch-to-state rules as extraction (``revisit.classify_outcome``)."""
        outcome = revisit.classify_outcome(claimed, result, None, settings=self.host.settings, now=utcnow())
        return replace(
            base, state=outcome.state, error_class=outcome.error_class, error=outcome.error,
            next_fetch_at=outcome.next_fetch_at or base.next_fetch_at,
            # A failure says nothing of our copy: the server's validators (a 304 nobody asked for) are not kept.
            etag=claimed.etag, last_modified=claimed.last_modified,
        )

