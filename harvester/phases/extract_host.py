"""Extraction's unit of work over the frontier: leased hosts in, completions (with outlinks) out.

``ExtractWork`` is what the fetch engine's per-host workers pull jobs from and hand results to. It turns a
fetch into the URL's next state (``revisit.classify_outcome``), extracts the page, spots duplicates, and
writes completions in small batched transactions (each URL atomically with its outlinks). A crash loses at
most the completions of the last fraction of a second, whose leases a rerun reclaims.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harvester.errors import InvalidRecord, LeaseLost, StoreError
from harvester.extraction import Extracted, ExtractorHook, extract_page
from harvester.fetch.workers import Job
from harvester.phases.leases import HostHolds, fair_take, lease_clock
from harvester.records import (
    ClaimedUrl,
    CompleteResult,
    Completion,
    DiscoveredUrl,
    FetchResult,
    Source,
    UrlKind,
    UrlState,
)
from harvester.rules import revisit
from harvester.runtime import db, retire_owner, utcnow

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.phases.budget import PageBudget
    from harvester.phases.cycle_state import Unwritten
    from harvester.phases.handover import Handover
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site
    from harvester.settings import Settings

logger = logging.getLogger(__name__)

EXTRACTION = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extract")
"""Where pages are parsed and hooks called (``ExtractWork._extract``): one thread, started on first use."""

FLUSH_ITEMS = 64
"""Completions written per transaction at most: big enough to amortise a commit, small enough to lose little."""

FLUSH_EVERY_S = 0.25
"""A pending completion waits at most this long before it is written."""

WRITE_ATTEMPTS = 5
WRITE_BACKOFF_S = 0.25
"""A failed completion write is retried after 0.25, 0.5, 1, 2 s: a lock or a database restart is waited out."""

MOVED_ANSWERS_BYTES = 32 * 2**20
"""Bodies of permanent redirects' targets kept until the target is claimed (oldest dropped past this)."""


async def write_unwritten(
    store: FrontierStore, unwritten: Unwritten, *, run_id: int | None,
    canonicalize: Callable[[str], str | None] | None = None,
) -> int:
    """Write what an earlier failed attempt of this cycle left behind; raises if the database still fails.
    Content duplicates are marked again first, so a holder a kept page takes over (rel=canonical) is demoted
    with it: the pairs the failed write carried were not kept."""
    written = 0
    batches = unwritten.batches
    while batches:
        owner, items = batches[0]
        marker = CompletionBatcher(store, owner, run_id=run_id, canonicalize=canonicalize)
        items, demote = await marker._mark_duplicates(items)
        batches[0] = (owner, items)
        await db(store.complete_many, owner, items, run_id=run_id, demote=demote)
        batches.pop(0)
        retire_owner(owner)  # its other leases now return through recover_leases
        written += len(items)
    return written


class CompletionBatcher:
    """Batches completions into ``complete_many`` transactions, marking content duplicates on the way."""

    def __init__(self, store: FrontierStore, owner: str, *, run_id: int | None,
                 canonicalize: Callable[[str], str | None] | None = None) -> None:
        self._store = store
        self._canonicalize = canonicalize or (lambda url: url)
        self._owner = owner
        self._run_id = run_id
        self._pending: list[tuple[Completion, list[DiscoveredUrl]]] = []
        self._first_at = 0.0
        self._lock = asyncio.Lock()
        self._lastmod: dict[str, tuple[int, int]] = {}
        self.counters: Counter[str] = Counter()

    def take_pending(self) -> list[tuple[Completion, list[DiscoveredUrl]]]:
        items, self._pending = self._pending, []
        return items

    def note_lastmod(self, host: str, *, hit: bool) -> None:
        """One lastmod check (a change seen on a page whose lastmod made a prediction) and whether the lastmod
        announced it; written with the next batch, not a transaction per URL."""
        checks, hits = self._lastmod.get(host, (0, 0))
        self._lastmod[host] = (checks + 1, hits + (1 if hit else 0))

    async def put(self, completion: Completion, outlinks: list[DiscoveredUrl]) -> None:
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append((completion, outlinks))
        if len(self._pending) >= FLUSH_ITEMS or time.monotonic() - self._first_at >= FLUSH_EVERY_S:
            await self.flush()

    async def tick(self) -> None:
        """Called periodically so a quiet host's last completions are not held back."""
        if self._pending and time.monotonic() - self._first_at >= FLUSH_EVERY_S:
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending. A passing database fault (a lock, a restart) is waited out a few times, so
        completed fetches are not lost to it; a lasting one raises with the batch kept for the next flush."""
        async with self._lock:
            items, self._pending = self._pending, []
            if not items:
                return
            try:
                items, demoted = await self._mark_duplicates(items)
                result = await self._write(items, demoted)
            except BaseException:
                self._pending[:0] = items
                raise
            self.counters["duplicate"] += result.demoted
            self.counters["lease_lost"] += result.lost
            if self._lastmod:
                tallies, self._lastmod = self._lastmod, {}
                await db(self._store.add_lastmod_checks, tallies)
            for completion, _ in items:
                # By the state the URL is left in: a failure with a next time (below max_attempts) is queued again.
                failed_for_now = completion.state is UrlState.FAILED and completion.next_fetch_at is not None
                self.counters[UrlState.QUEUED.value if failed_for_now else completion.state.value] += 1

    async def _write(
        self, items: list[tuple[Completion, list[DiscoveredUrl]]], demote: list[tuple[int, int]]
    ) -> CompleteResult:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return await db(self._store.complete_many, self._owner, items, run_id=self._run_id, demote=demote)
            except (InvalidRecord, LeaseLost):
                raise
            except StoreError as exc:
                if attempt + 1 == WRITE_ATTEMPTS:
                    raise
                delay = WRITE_BACKOFF_S * 2**attempt
                logger.warning("completions not written (%s); retrying in %.1f s", exc, delay,
                               extra={"error_class": "storage"})
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _mark_duplicates(
        self, items: list[tuple[Completion, list[DiscoveredUrl]]]
    ) -> tuple[list[tuple[Completion, list[DiscoveredUrl]]], list[tuple[int, int]]]:
        """A page whose main content is already held by another URL is a duplicate; its links are not expanded.

        Which URL holds the content follows the site's rel=canonical where it says: a page that is its own
        canonical, and is what the holder names as canonical, takes the content over, and the holder becomes
        its duplicate (returned as (holder, new holder) pairs, demoted as this batch is written). Otherwise the
        first URL read keeps it."""
        fresh = [c for c, _ in items if c.page is not None and c.content_hash]
        if not fresh:
            return items, []
        known = await db(
            self._store.duplicates_of, [c.content_hash for c in fresh if c.content_hash],
            exclude_ids=[c.url_id for c in fresh],
        )
        # What each holder's page names as canonical (in canonical form): stored holders from the store, this
        # batch's from the batch.
        canon = self._canonicalize
        declared = {url_id: canon(url) for url_id, url in
                    (await db(self._store.declared_canonicals, list(set(known.values())))).items()}
        position: dict[int, int] = {}
        demoted: list[tuple[int, int]] = []
        out: list[tuple[Completion, list[DiscoveredUrl]]] = []
        for completion, outlinks in items:
            digest, page = completion.content_hash, completion.page
            if page is not None and digest:
                holder = known.get(digest)
                if holder is None or holder == completion.url_id:
                    known[digest] = completion.url_id
                elif (completion.final_url is None and page.canonical_url is not None  # read at its own address
                      and (here := canon(page.final_url)) is not None and here == canon(page.canonical_url)
                      and declared.get(holder) == here):
                    known[digest] = completion.url_id  # the holder points here: this URL takes the content over
                    if holder in position:  # read in this same batch: not stored yet, simply its duplicate
                        index = position.pop(holder)
                        out[index] = (replace(out[index][0], state=UrlState.DUPLICATE, duplicate_of=completion.url_id,
                                              page=None), [])
                    else:
                        demoted.append((holder, completion.url_id))
                else:
                    completion = replace(completion, state=UrlState.DUPLICATE, duplicate_of=holder, page=None)
                    outlinks = []
                if known[digest] == completion.url_id:
                    position[completion.url_id] = len(out)
                    if page.canonical_url is not None:
                        declared[completion.url_id] = canon(page.canonical_url)
            out.append((completion, outlinks))
        return out, demoted


class ExtractWork:
    """The engine's ``HostWork`` over the frontier for one extraction worker (one lease owner)."""

    def __init__(
        self, store: FrontierStore, settings: Settings, site: Site, *, owner: str, run_id: int | None,
        hook: ExtractorHook | None, budget: PageBudget, policies: PolicyKeeper | None = None,
        handover: Handover | None = None,
    ) -> None:
        self.store = store
        self.handover = handover
        self.budget = budget
        self.policies = policies
        self.settings = settings
        self.site = site
        self.owner = owner
        self.hook = hook
        self.writer = CompletionBatcher(store, owner, run_id=run_id, canonicalize=site.canonicalize)
        self.holds = HostHolds(store, owner, settings.store.lease_s)
        self.counters: Counter[str] = Counter()
        self.leased: set[str] = set()
        self.exhausted: set[str] = set()
        self.spent: set[str] = set()
        """Hosts whose page budget this run is spent: kept leased (so no worker of the run takes them up again)
        and handed back with every other lease when the run ends."""
        self.claimed_total = 0
        self._sharing = (0, 0)
        """(hosts with work, other workers) at the last look for hosts: ``store.sharing``."""
        self._truth: dict[str, float | None] = {}
        self._checks: dict[str, tuple[int, int]] = {}
        """Lastmod (checks, hits) per host: the stored tally plus this run's, so a host can prove its lastmod
        truthful within the run that first revisits it (``revisit.truthfulness`` needs ``lastmod_min_checks``)."""
        self._moved_answers: dict[str, FetchResult] = {}
        """Canonical target URL -> the answer its permanent redirect gave (``_keep_moved_answer``), oldest first."""
        self._moved_bytes = 0
        self._in_scope: dict[str, bool] = {}

    # -- engine protocol --------------------------------------------------------------------------------------

    async def hosts(self) -> Sequence[str]:
        """Lease more hosts with due work (SKIP LOCKED on PostgreSQL); those already ours come first.

        A newly leased host gets its persisted politeness state (back-off, learned limit) before its first
        request. A host parked in this run is handed back: its jobs would only be refused again.
        """
        politeness = self.settings.politeness
        active = len(self.leased - self.exhausted - self.spent)
        room = politeness.max_active_hosts - active
        if room > 0:
            handed = self.handover.open_hosts() if self.handover is not None else None
            mine = [origin for origin in await self.my_hosts() if handed is None or origin in handed]
            self._sharing = with_work, others = await db(self.store.sharing, self.owner, hosts=mine)
            room = fair_take(room=room, with_work=with_work, others=others, mine=active)
        if room > 0:
            asked_at = lease_clock()
            got = await db(self.store.claim_hosts, self.owner, limit=room, lease_s=self.settings.store.lease_s,
                           hosts=mine)
            self.holds.grant(got, asked_at)
            for origin in got:
                if origin in self.spent:
                    continue
                if origin not in self.leased:  # newly ours: what the run spent there is read once, now
                    await self.budget.open(origin)
                self.leased.add(origin)
                self.exhausted.discard(origin)
                if self.policies is not None:
                    await self.policies.load(origin)
                if origin not in self._checks:
                    self._checks[origin] = await db(self.store.lastmod_truthfulness, origin)
                    self._judge(origin)
        if self.policies is not None:
            parked = [o for o in self.leased if o not in self.exhausted and self.policies.parked(o)]
            for origin in parked:
                await self._end_turn(origin)
        return [origin for origin in self.leased if origin not in self.exhausted and origin not in self.spent]

    async def my_hosts(self) -> list[str]:
        """The profile's hosts in the frontier (its seeds', those they moved to, those its scope takes in): a run
        of another site on the same frontier must not extract them, since it would judge their links by its own
        scope. Each origin is judged once."""
        judged = self._in_scope
        for origin in await db(self.store.host_origins):
            if origin not in judged:
                judged[origin] = self.site.in_scope(origin + "/")
        return [origin for origin, mine in judged.items() if mine]

    def rescope(self) -> None:
        """The site's scope grew (a host discovery found moved joined it): judge every origin again."""
        self._in_scope.clear()

    async def unfinished(self) -> tuple[list[str], list[str]]:
        """The profile's hosts with work due and room in the run's budget: (those this worker may take now, those
        other live workers hold). Hosts this run spent or parked, and hosts discovery has yet to hand over, are
        not this worker's to take."""
        claimable, held = await db(self.store.unfinished, self.owner, hosts=await self.my_hosts())
        handed = self.handover.open_hosts() if self.handover is not None else None
        parked = self.policies.parked if self.policies is not None else (lambda _origin: None)
        takes = [origin for origin in claimable if origin not in self.spent and parked(origin) is None
                 and (handed is None or origin in handed)]
        return ([origin for origin in takes if await self.budget.left(origin) > 0],
                [origin for origin in held if await self.budget.left(origin) > 0])

    async def renew(self) -> None:
        """Renew the hosts this worker holds; a host a renewal finds lost is no longer ours (its turn stops at its
        next request: ``holds``), and makes room for another."""
        for origin in await self.holds.renew(self.leased):
            logger.warning("lease on %s lost to another worker", origin, extra={"host": origin})
            self.leased.discard(origin)

    async def give_back(self, jobs: Sequence[Job]) -> None:
        """Claims whose request was never sent (their host's hold lapsed first) go back to the queue, where they
        are still this owner's; a lease another worker already took back is left alone."""
        ids = [job.payload.id for job in jobs if isinstance(job.payload, ClaimedUrl)]
        if ids:
            await db(self.store.release, self.owner, ids)

    async def _end_turn(self, host: str, *, release: bool = True) -> None:
        """The host has nothing more for this worker now: write what is pending, its politeness state, and
        hand its lease back, now or (``release=False``) when its turn's last request has ended (``turn_over``):
        handed back while requests were still out, another worker could start its own on the host, and the
        host would see both at once."""
        self.exhausted.add(host)
        await self.writer.flush()
        if self.policies is not None:
            await self.policies.save(host)
        if release:
            await self._release(host)

    async def _release(self, host: str) -> None:
        await db(self.store.release_hosts, self.owner, [host])
        self.leased.discard(host)

    async def turn_over(self, host: str) -> None:
        """The host's turn has ended, none of its requests out: a host whose turn was ended goes back now."""
        if host in self.exhausted and host in self.leased and host not in self.spent:
            await self.writer.flush()  # the turn's last records, written after its answers (``done``)
            await self._release(host)

    def _over_share(self) -> bool:
        """This worker holds more hosts than its share while others are there to take them (``fair_take``)."""
        with_work, others = self._sharing
        active = len(self.leased - self.exhausted - self.spent)
        return others > 0 and active > 1 and active > -(-with_work // (others + 1))

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        """Up to ``n`` jobs; URLs the host's truthful lastmod says are unchanged are completed without a request.
        ``n`` is ``store.claim_batch``; the lease keeper renews what is held, so a crawl-delayed host's batch
        outlasting ``store.lease_s`` is kept, not lost.
        """
        await self.writer.tick()
        if self._over_share():  # others came since this worker took its hosts: one goes back to them
            logger.info("%s: handed over to share the hosts out", host, extra={"host": host})
            self.counters["hosts_shared_out"] += 1
            await self._end_turn(host, release=False)
            return []
        while True:
            room = self.budget.room(host)
            if room <= 0:
                await self._spend_out(host)
                return []
            claimed = await db(
                self.store.claim, self.owner, hosts=[host], per_host=min(n, room),
                lease_s=self.settings.store.lease_s, kinds=(UrlKind.DETAIL,),
            )
            if not claimed:
                await self._end_turn(host, release=False)
                return []
            jobs = [job for item in claimed if (job := await self._job(host, item)) is not None]
            if jobs:
                self.budget.spend(host, len(jobs))
                self.claimed_total += len(jobs)
                return jobs

    async def _spend_out(self, host: str) -> None:
        """The host's page budget for this run is spent: what it still has due waits for the next run. Its lease
        is kept (renewed with the others) so that no worker of this run leases it again only to find no room."""
        self.spent.add(host)
        await self.writer.flush()
        if self.policies is not None:
            await self.policies.save(host)
        deferred = await self.budget.defer(host)
        self.counters["deferred_by_budget"] += deferred
        logger.info("%s: page budget of %d spent this run; %d due URLs deferred to the next run",
                    host, self.budget.limit, deferred, extra={"host": host})

    async def _job(self, host: str, item: ClaimedUrl) -> Job | None:
        now = utcnow()
        revisit_settings = self.settings.revisit
        # A lastmod vouches for a page only where a list that names every page carries it: a feed entry's date
        # says nothing once the entry has left the feed, nor of a page deleted since.
        if item.content_hash and revisit.listed(item) and revisit.may_skip(
            lastmod=item.lastmod, last_fetched_at=item.last_fetched_at, truthfulness=self._truth.get(host), now=now,
            threshold=revisit_settings.lastmod_truthful, copy_last_modified=item.last_modified,
        ):
            if revisit.spot_check(item.url, now, revisit_settings.lastmod_spot_check):
                self.counters["lastmod_spot_checks"] += 1
            else:
                revisit_s, next_at = revisit.next_revisit(
                    previous_s=item.revisit_s, changed=False, changefreq=item.changefreq, settings=revisit_settings,
                    now=now, listed=True,
                )
                self.counters["skipped_by_lastmod"] += 1
                await self.writer.put(
                    Completion(url_id=item.id, state=UrlState.DONE, fetched_at=item.last_fetched_at or now,
                               content_hash=item.content_hash, next_fetch_at=next_at, revisit_s=revisit_s,
                               etag=item.etag, last_modified=item.last_modified),
                    [],
                )
                return None
        answered = self._moved_answers.pop(item.url, None)
        if answered is not None:
            self._moved_bytes -= len(answered.body or b"")
            self.counters["moved_target_read_once"] += 1
        return Job(url=item.target, host=host, validators=item.validators,
                   accept=self.settings.http.allowed_content_types, payload=item, answered=answered)

    async def done(self, job: Job, result: FetchResult) -> Awaitable[None]:
        """Nothing here stops the host's next request (a park is the client's, decided from the answer's status;
        a lapsed lease is the engine's check before each request): the parse, extraction and write are handed
        back to run once the next request is on its way (``HostWork.done``)."""
        return self._record(job, result)

    async def _record(self, job: Job, result: FetchResult) -> None:
        claimed: ClaimedUrl = job.payload
        completion, outlinks = self._complete(claimed, result, await self._extract(result))
        predicted = revisit.lastmod_predicts_change(claimed.lastmod, claimed.last_fetched_at, claimed.last_modified)
        # A check is a change we saw on a page whose lastmod made a prediction (same URL, no move); a hit is a
        # change the lastmod announced. Skipping risks exactly the changes a lastmod fails to announce.
        if predicted is not None and completion.changed and claimed.content_hash and not result.redirects:
            self.writer.note_lastmod(claimed.host, hit=predicted)
            checks, hits = self._checks.get(claimed.host, (0, 0))
            self._checks[claimed.host] = (checks + 1, hits + predicted)
            self._judge(claimed.host)
        await self.writer.put(completion, outlinks)

    def _judge(self, host: str) -> None:
        checks, hits = self._checks.get(host, (0, 0))
        self._truth[host] = revisit.truthfulness(checks, hits, min_checks=self.settings.revisit.lastmod_min_checks)

    # -- decisions ----------------------------------------------------------------------------------------------

    async def _extract(self, result: FetchResult) -> Extracted | None:
        """The page's parse and the hook, off the event loop (in ``EXTRACTION``'s one thread, so a hook is never
        called twice at once): the loop stays free to send the hosts' next requests and read their answers."""
        if not (result.ok and result.body is not None):
            return None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(EXTRACTION, functools.partial(
            extract_page, result, settings=self.settings, hook=self.hook, user_agent=self.site.profile.user_agent))

    def _complete(self, claimed: ClaimedUrl, result: FetchResult,
                  extracted: Extracted | None) -> tuple[Completion, list[DiscoveredUrl]]:
        now = utcnow()
        new_hash = None
        hook_error = None
        if extracted is not None:
            new_hash = extracted.content_hash
            if extracted.failed:
                hook_error = extracted.error
        outcome = revisit.classify_outcome(
            claimed, result, new_hash, settings=self.settings, now=now, hook_error=hook_error
        )
        self.counters[outcome.counter] += 1
        failed = outcome.error_class is not None
        page = extracted.page if extracted is not None and outcome.store_page else None
        # A moved URL is recorded with the answer it gave (301/308) and where it leads; the page is its target's.
        status = result.redirect_statuses[0] if outcome.moved_to and result.redirect_statuses else result.status
        completion = Completion(
            url_id=claimed.id, state=outcome.state, fetched_at=now, status=status,
            final_url=result.final_url if result.final_url != claimed.target else None,
            # A failed hook keeps no validators, so the next fetch is unconditional and the hook runs again; a failure
            # (a 304 nobody asked for among them) says nothing of our copy: the store keeps the validators it has.
            etag=None if hook_error or failed else result.etag or (claimed.etag if result.not_modified else None),
            last_modified=None if hook_error or failed else (
                result.last_modified or (claimed.last_modified if result.not_modified else None)
            ),
            content_hash=outcome.content_hash, changed=outcome.changed, next_fetch_at=outcome.next_fetch_at,
            revisit_s=outcome.revisit_s, error_class=outcome.error_class, error=outcome.error, page=page,
            bytes_read=result.bytes_read,
        )
        outlinks: list[DiscoveredUrl] = []
        if extracted is not None and outcome.expand_links:
            outlinks = self._outlinks(claimed, result.final_url, extracted.outlinks, now)
        if outcome.moved_to:
            target = self.site.admit(
                outcome.moved_to, base=None, source=Source.REDIRECT, where=claimed.url, depth=claimed.depth,
                now=now, kind=UrlKind.DETAIL,
            )
            if target is not None:
                outlinks.append(target)
                self._keep_moved_answer(target.url, result)
        return completion, outlinks

    def _keep_moved_answer(self, target: str, result: FetchResult) -> None:
        """The answer of a permanent redirect is the target's page: kept so that the target, queued as a URL of
        its own, is recorded from it when claimed instead of being downloaded a second time. In memory and
        bounded: a target claimed by another worker, or after a restart, is simply fetched."""
        answer = replace(result, url=target, final_url=target, redirects=(), redirect_statuses=())
        earlier = self._moved_answers.pop(target, None)  # many old addresses may lead to one target
        if earlier is not None:
            self._moved_bytes -= len(earlier.body or b"")
        self._moved_answers[target] = answer
        self._moved_bytes += len(answer.body or b"")
        while self._moved_bytes > MOVED_ANSWERS_BYTES and self._moved_answers:
            dropped = self._moved_answers.pop(next(iter(self._moved_answers)))
            self._moved_bytes -= len(dropped.body or b"")

    def _outlinks(self, claimed: ClaimedUrl, base: str, links: Sequence[str], now: Any) -> list[DiscoveredUrl]:
        """Links of a detail page that look like details too: the pages sitemaps and listings missed."""
        found: dict[str, DiscoveredUrl] = {}
        depth = claimed.depth + 1
        for link in links:
            canonical = self.site.canonicalize(link, base)
            if canonical is None or canonical in found:
                continue
            if self.site.classifier.classify(canonical) is not UrlKind.DETAIL:
                continue
            item = self.site.admit(link, base=base, source=Source.LINK, where=claimed.url, depth=depth, now=now,
                                   kind=UrlKind.DETAIL, canonical=canonical)
            if item is not None:
                found[item.url] = item
        return list(found.values())

