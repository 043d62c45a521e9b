"""Extraction's unit of work over the frontier: leased hosts in, completions (with outlinks) out.

``ExtractWork`` is what the fetch engine's per-host workers pull jobs from and hand results to. It turns a
fetch into the URL's next state (``revisit.classify_outcome``) and extracts the page; its ``CompletionBatcher``
(``completions``) spots duplicates and writes completions in small batched transactions.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from harvester.extraction import Extracted, ExtractorHook, extract_page
from harvester.fetch.workers import HandedBack, Job
from harvester.phases.completions import CompletionBatcher
from harvester.phases.host_turns import HostTurns, Parses
from harvester.phases.leases import HostHolds, fair_take, lease_clock, over_share
from harvester.phases.moved_answers import MovedAnswers
from harvester.phases.reasks import Reasks
from harvester.phases.runs import release_dead_holders, teach_classifier
from harvester.records import (
    ClaimedUrl,
    Completion,
    DiscoveredUrl,
    FetchResult,
    Source,
    UrlKind,
    UrlState,
)
from harvester.rules import revisit
from harvester.runtime import db, join_peers, leave_peers, local_peers, utcnow

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.phases.budget import PageBudget
    from harvester.phases.handover import Handover
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site
    from harvester.settings import Settings

logger = logging.getLogger(__name__)

EXTRACTION = ThreadPoolExecutor(max_workers=1, thread_name_prefix="extract")
"""Where pages are parsed and hooks called (``ExtractWork._extract``): one thread, started on first use."""

OFFER_WAIT_S = 3600.0
"""``ExtractWork.offered`` asks the handover again this often (it is woken by the change itself)."""

TURNS = HostTurns(EXTRACTION)
"""How the hosts share ``EXTRACTION``: in turns, so a slow host's answer never waits behind a fast host's backlog."""


class ExtractWork:
    """The engine's ``HostWork`` over the frontier for one extraction worker (one lease owner)."""

    def __init__(
        self, store: FrontierStore, settings: Settings, site: Site, *, owner: str, run_id: int | None,
        hook: ExtractorHook | None, budget: PageBudget, policies: PolicyKeeper | None = None,
        handover: Handover | None = None, beside: bool = False,
    ) -> None:
        self.store = store
        self.handover = handover
        self.beside = beside
        """This worker fetches through the cycle's shared client: hosts handed over beside their discovery are open."""
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
        self.finished_total = 0
        """Claimed URLs this worker has finished: answered (``done``) or kept on their lastmod (``_job``)."""
        self._sharing = (0, 0)
        """(hosts with work, other workers) at the last look for hosts: ``store.sharing`` and ``local_peers``."""
        self.shedding: set[str] = set()
        """Hosts handed back to share the hosts out (``_share_out``): no request is sent for them any more
        (``may_send``); once their turn's requests in flight have ended (``turn_over``), their unsent claims and
        their lease go back, so the worker that takes them over never meets one of ours on the host."""
        self._unsent: dict[str, set[int]] = {}
        """Per host, URLs claimed in its turn and not yet handed to ``done``: what a host handed back returns."""
        join_peers(settings.database_url, site.profile.name, owner)
        self._truth: dict[str, float | None] = {}
        self._checks: dict[str, tuple[int, int]] = {}
        """Lastmod (checks, hits) per host: the stored tally plus this run's, so a host can prove its lastmod
        truthful within the run that first revisits it (``revisit.truthfulness`` needs ``lastmod_min_checks``)."""
        self.reasks = Reasks(store, self.writer, self.counters, run_id=run_id)
        """Contradicting 304s asked again in full, per host, as far as its record allows (``reasks``)."""
        self._moved = MovedAnswers(site.canonicalize, store, followed_wait_s=settings.http.timeout_s,
                                   holds=self.holds.holds)
        self.hook_retries: set[int] = set()
        """URLs whose stored page lacks its hook's fields (the hook failed on it): asked in full, never skipped on
        their lastmod, until the hook succeeds on them (``FrontierStore.due_hook_retries`` fills it too)."""
        self._in_scope: dict[str, bool] = {}
        self._taught = 0
        """The handover's version when detail shapes were last learned (``hosts``)."""
        self._looked = 0
        """The handover's version at the last look for hosts (``hosts``, ``offered``)."""
        self._unrecorded: dict[int, tuple[Job, FetchResult]] = {}
        """Answers handed to ``done`` whose record has not yet put their completion in the writer. A turn cancelled
        before their record ran (the run failed or was stopped) closes the record unrun; the answer stays here and
        ``record_unrecorded`` puts it in the writer as the run winds down, so it is written, or kept for the
        retry, and not asked again."""
        self._parses = Parses(TURNS)
        """Parses in flight per URL: one whose record was cancelled meanwhile is awaited by the answer's next record."""

    # -- engine protocol --------------------------------------------------------------------------------------

    async def hosts(self) -> Sequence[str]:
        """Lease more hosts with due work (SKIP LOCKED on PostgreSQL); those already ours come first.

        A newly leased host gets its persisted politeness state (back-off, learned limit) before its first
        request. A host parked in this run is handed back: its jobs would only be refused again.
        """
        if self.handover is not None:
            self._looked = self.handover.version  # read before the hosts it opens: a change after is seen
        politeness = self.settings.politeness
        active = len(self.leased - self.exhausted - self.spent)
        room = politeness.max_active_hosts - active
        if room > 0:
            handed = self.handover.open_hosts(beside=self.beside) if self.handover is not None else None
            mine = [origin for origin in await self.my_hosts() if handed is None or origin in handed]
            await release_dead_holders(self.store, self.owner, mine)
            with_work, others = await db(self.store.sharing, self.owner, hosts=mine, site=self.site.profile.name)
            others = max(others, local_peers(self.settings.database_url, self.site.profile.name, self.owner))
            self._sharing = (with_work, others)
            room = fair_take(room=room, with_work=with_work, others=others, mine=active)
            await self._share_out()
        if room > 0 and self.handover is not None and self.handover.version != self._taught:
            # A host handed over since the round began (``_rounds`` teaches between rounds): its sitemaps' detail
            # shapes are learned before any of its pages is read, or a page's links to details went unclassified,
            # depending on whether the round began before or after the handover.
            self._taught = self.handover.version
            await teach_classifier(self.store, self.site)
        if room > 0:
            asked_at, losses = lease_clock(), self.store.liveness.losses
            got = await db(self.store.claim_hosts, self.owner, limit=room, lease_s=self.settings.store.lease_s,
                           hosts=mine)
            self.holds.grant(got, asked_at, losses)
            got = [origin for origin in got if origin not in self.spent and origin not in self.shedding]
            # The hosts are opened side by side: one after another, four reads each, a look that leased 50 hosts
            # kept every new host waiting ~2 s under load (half the run on a site of small hosts, issue 32).
            await asyncio.gather(*(self._open(origin, new=origin not in self.leased) for origin in got))
            for origin in got:
                self.leased.add(origin)
                self.exhausted.discard(origin)
        if self.policies is not None:
            parked = [o for o in self.leased if o not in self.exhausted and self.policies.parked(o)]
            for origin in parked:
                await self._end_turn(origin)
        return [origin for origin in self.leased if origin not in self.exhausted and origin not in self.spent]

    async def offered(self) -> None:
        """Returns once discovery has handed a host over (or ended) since the last look for hosts: ``run_hosts``
        looks again at once, so the host's requests start now, not at its next poll. Never, without a handover."""
        if self.handover is None:
            await asyncio.get_running_loop().create_future()
            return
        while not await self.handover.changed(self._looked, OFFER_WAIT_S):
            pass

    async def _open(self, origin: str, *, new: bool) -> None:
        """A host leased by this look: what the run spent there (read once, when newly ours), its persisted
        politeness state (before its first request) and its lastmod tally."""
        if new:
            await self.budget.open(origin)
        if self.policies is not None:
            await self.policies.load(origin)
        if origin not in self._checks:
            self._checks[origin] = await db(self.store.lastmod_truthfulness, origin)
            self._judge(origin)
        await self.reasks.open(origin)

    async def my_hosts(self) -> list[str]:
        """The profile's hosts in the frontier (its seeds', those they moved to, those its scope takes in): a run
        of another site on the same frontier must not extract them, since it would judge their links by its own
        scope. Each origin is judged once."""
        judged = self._in_scope
        for origin in await db(self.store.host_origins):
            if origin not in judged:
                judged[origin] = self.site.owns(origin)
        return [origin for origin, mine in judged.items() if mine]

    def outstanding(self) -> int:
        """URLs this worker has claimed and not yet answered: in flight, or waiting for their host's turn."""
        return sum(len(ids) for ids in self._unsent.values())

    def rescope(self) -> None:
        """The site's scope grew (a host discovery found moved joined it): judge every origin again."""
        self._in_scope.clear()

    async def unfinished(self) -> tuple[list[str], list[str]]:
        """The profile's hosts with work due and room in the run's budget: (those this worker may take now, those
        other live workers hold). Hosts this run spent or parked, and hosts discovery has yet to hand over, are
        not this worker's to take."""
        claimable, held = await db(self.store.unfinished, self.owner, hosts=await self.my_hosts())
        handed = self.handover.open_hosts(beside=self.beside) if self.handover is not None else None
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
        if release:  # else ``turn_over`` writes them, after the turn's last answers, before the lease goes back
            await self.writer.flush()
        if self.policies is not None:
            await self.policies.save(host)
        if release:
            await self._release(host)

    async def _release(self, host: str) -> None:
        self.holds.drop(host)  # before the frontier's lease goes: another worker may take the host at once
        await db(self.store.release_hosts, self.owner, [host])
        self.leased.discard(host)

    async def turn_over(self, host: str) -> None:
        """The host's turn has ended, none of its requests out: a host whose turn was ended goes back now, with
        the claims a host handed back to share the hosts out had left unsent."""
        unsent = self._unsent.pop(host, set())
        if host in self.shedding:
            self.shedding.discard(host)
            await self.writer.flush()  # the turn's last answers are written while the URLs are still ours
            await db(self.store.release, self.owner, sorted(unsent))
            if host in self.leased:
                await self._release(host)
            return
        if host in self.exhausted and host in self.leased and host not in self.spent:
            await self.writer.flush()  # the turn's last records, written after its answers (``done``)
            await self._release(host)

    def may_send(self, origin: str) -> bool:
        """Asked before each request (``run_hosts``' ``holds``): the lease is known live. A host being handed back
        raises ``HandedBack``: its turn stops like a lapsed lease's, but it is no failure and is not logged as one."""
        if origin in self.shedding:
            raise HandedBack(f"{origin} was handed back to share the hosts out; nothing was sent")
        return self.holds.holds(origin)

    async def round_over(self) -> None:
        """A round of ``run_hosts`` has ended: a host handed back whose turn never started goes back now."""
        for host in sorted(self.shedding):
            await self.turn_over(host)
        self.exhausted.clear()

    def leave(self) -> None:
        """The run is over: other workers of this process stop counting this one (``local_peers``)."""
        leave_peers(self.settings.database_url, self.site.profile.name, self.owner)

    async def _share_out(self) -> None:
        """Others came (a worker started late) since this worker took its hosts, and it holds more than its share:
        hand one host back, the one with the most claims still unsent, at its next request. One at a time, each
        once its requests in flight have ended; the next look decides again."""
        if self.shedding or not self._over_share():
            return
        active = sorted(self.leased - self.exhausted - self.spent)
        await self._shed(max(active, key=lambda origin: len(self._unsent.get(origin, ()))))

    async def _shed(self, host: str) -> None:
        logger.info("handed host %s back to share the hosts with %d other worker(s)", host, self._sharing[1],
                    extra={"host": host})
        self.counters["hosts_shared_out"] += 1
        self.shedding.add(host)
        await self._end_turn(host, release=False)

    def _over_share(self) -> bool:
        """This worker holds more hosts than its share while others are there to take them (``fair_take``)."""
        with_work, others = self._sharing
        return over_share(active=len(self.leased - self.exhausted - self.spent), with_work=with_work, others=others)

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        """Up to ``n`` jobs; URLs the host's truthful lastmod says are unchanged are completed without a request.
        ``n`` is ``store.claim_batch``; the lease keeper renews what is held, so a crawl-delayed host's batch
        outlasting ``store.lease_s`` is kept, not lost.
        """
        # No wait for the writer here (``_keep_writing`` ticks it): behind its lock, one completion write at a time
        # (~0.2 s under load), every host's next claim waited ~0.6 s and its requests with it (issue 32).
        if host in self.shedding:
            return []
        if self._over_share():  # others came since this worker took its hosts: one goes back to them
            await self._shed(host)
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
            self._unsent.setdefault(host, set()).update(job.payload.id for job in jobs)
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
        if item.content_hash and item.id not in self.hook_retries and revisit.listed(item) and revisit.may_skip(
            lastmod=item.lastmod, last_fetched_at=item.last_fetched_at, truthfulness=self._truth.get(host), now=now,
            threshold=revisit_settings.lastmod_truthful, copy_last_modified=item.last_modified,
            lastmod_until=item.lastmod_until,
        ):
            if revisit.spot_check(item.url, now, revisit_settings.lastmod_spot_check):
                self.counters["lastmod_spot_checks"] += 1
            else:
                revisit_s, next_at = revisit.next_revisit(
                    previous_s=item.revisit_s, changed=False, changefreq=item.changefreq, settings=revisit_settings,
                    now=now, listed=True,
                )
                self.counters["skipped_by_lastmod"] += 1
                self.finished_total += 1
                await self.writer.put(
                    Completion(url_id=item.id, state=UrlState.DONE, fetched_at=item.last_fetched_at or now,
                               content_hash=item.content_hash, next_fetch_at=next_at, revisit_s=revisit_s,
                               etag=item.etag, last_modified=item.last_modified, claimed=True,
                               claimed_lastmod=item.lastmod),
                    [],
                )
                return None
        return Job(url=item.target, host=host, validators=item.validators,
                   accept=self.settings.http.allowed_content_types, payload=item,
                   answered=functools.partial(self._kept_answer, item.url),
                   read=functools.partial(self._moved.asked_alone, item.url))

    def _kept_answer(self, url: str) -> FetchResult | None:
        """Asked at the job's turn: a redirect followed since the claim may have brought its answer."""
        answered = self._moved.take(url)
        if answered is not None:
            self.counters["moved_target_read_once"] += 1
        return answered

    async def done(self, job: Job, result: FetchResult) -> Awaitable[None]:
        """Nothing here stops the host's next request (a park is the client's, decided from the answer's status;
        a lapsed lease is the engine's check before each request): the parse, extraction and write are handed
        back to run once the next request is on its way (``HostWork.done``)."""
        self._unsent.get(job.host, set()).discard(job.payload.id)
        self.finished_total += 1
        self._moved.answered(job.payload.url, result)
        self._unrecorded[job.payload.id] = (job, result)
        return self._record(job, result)

    async def _record(self, job: Job, result: FetchResult) -> None:
        await self.writer.put(*await self._recorded(job, result))

    async def record_unrecorded(self) -> int:
        """Put every answer whose record never ran (its turn was cancelled) in the writer's pending batch, and
        write nothing: the caller's flush writes them, or keeps them for the retry. Nothing here waits on the
        store, so a store fault that ended the run still ends it at once. An answer that cannot be parsed is
        dropped, logged (its URL's lease returns and it is asked again), so the others are still kept."""
        kept = 0
        while self._unrecorded:
            job, result = next(iter(self._unrecorded.values()))
            try:
                completion, outlinks = await self._recorded(job, result)
            except Exception as exc:
                self._unrecorded.pop(job.payload.id, None)
                logger.warning("answer of %s not recorded as the run ended: %s: %s", job.url, type(exc).__name__,
                               exc, extra={"host": job.host})
                continue
            self.writer.keep(completion, outlinks)
            kept += 1
        return kept

    async def _recorded(self, job: Job, result: FetchResult) -> tuple[Completion, list[DiscoveredUrl]]:
        """The answer's completion and outlinks, taken out of ``_unrecorded``: from here to the writer's pending
        batch the caller does not yield, so the answer is always in one of the two."""
        claimed: ClaimedUrl = job.payload
        extracted = await self._extract(claimed.id, result, job.host)
        self._unrecorded.pop(claimed.id, None)
        completion, outlinks = self._complete(claimed, result, extracted)
        predicted = revisit.lastmod_predicts_change(claimed.lastmod, claimed.last_fetched_at, claimed.last_modified,
                                                    claimed.lastmod_until)
        completion, predicted = self.reasks.settle(claimed, result, completion, predicted)
        # A check is a change we saw on a page whose lastmod made a prediction (same URL, no move); a hit is a
        # change the lastmod announced. Skipping risks exactly the changes a lastmod fails to announce.
        if predicted is not None and completion.changed and claimed.content_hash and not result.redirects:
            self.writer.note_lastmod(claimed.host, hit=predicted)
            checks, hits = self._checks.get(claimed.host, (0, 0))
            self._checks[claimed.host] = (checks + 1, hits + predicted)
            self._judge(claimed.host)
        return completion, outlinks

    def _judge(self, host: str) -> None:
        checks, hits = self._checks.get(host, (0, 0))
        self._truth[host] = revisit.truthfulness(checks, hits, min_checks=self.settings.revisit.lastmod_min_checks)

    # -- decisions ----------------------------------------------------------------------------------------------

    async def _extract(self, url_id: int, result: FetchResult, host: str) -> Extracted | None:
        """The page's parse and the hook, off the event loop (in ``EXTRACTION``'s one thread, so a hook is never
        called twice at once), ``host`` taking its turn with the others (``TURNS``): the loop stays free to send
        the hosts' next requests and read their answers, and a slow host's records keep up with its answers. A
        record cancelled meanwhile leaves the parse running for the answer's next record (``Parses``)."""
        if not (result.ok and result.body is not None):
            return None
        return await self._parses.run(url_id, result, host, functools.partial(
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
                self.hook_retries.add(claimed.id)
            else:
                self.hook_retries.discard(claimed.id)
        outcome = revisit.classify_outcome(
            claimed, result, new_hash, settings=self.settings, now=now, hook_error=hook_error
        )
        self.counters[outcome.counter] += 1
        failed = outcome.error_class is not None
        page = extracted.page if extracted is not None and outcome.store_page else None
        # A moved URL is recorded with the answer it gave (301/308) and where it leads; the page and validators are its
        # target's. It keeps none (``forget_validators``): never again is its revisit asked with the target's ETag.
        status = result.redirect_statuses[0] if outcome.moved_to and result.redirect_statuses else result.status
        # A failed hook keeps no validators on the URL (its page keeps them), so the next fetch is unconditional and
        # the hook runs again; a failure (a 304 nobody asked for among them) says nothing of our copy: the store
        # keeps the validators it has.
        own = not (hook_error or failed or outcome.moved_to)
        completion = Completion(
            url_id=claimed.id, state=outcome.state, fetched_at=now, status=status,
            # A hop refused (robots.txt at the target): where the answer led, what robots.txt judged (``rejudge_urls``).
            final_url=result.refused_target or (result.final_url if result.final_url != claimed.target else None),
            etag=result.etag or (claimed.etag if result.not_modified else None) if own else None,
            last_modified=result.last_modified or (claimed.last_modified if result.not_modified else None) if own
            else None,
            content_hash=outcome.content_hash, changed=outcome.changed, next_fetch_at=outcome.next_fetch_at,
            revisit_s=outcome.revisit_s, error_class=outcome.error_class, error=outcome.error, page=page,
            bytes_read=result.bytes_read, sent_validators=result.sent_validators, hooked=self.hook is not None,
            claimed=True, claimed_lastmod=claimed.lastmod, forget_validators=outcome.moved_to is not None,
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
                outlinks.append(target)  # its answer, if the redirect was followed, is kept (``done``)
        return completion, outlinks

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

