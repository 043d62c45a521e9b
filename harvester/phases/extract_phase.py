"""Phase two, ``extract``: one worker leases hosts with due detail URLs and fetches them politely, in rounds,
until none is due; beside the rounds, a lease keeper renews its host leases and a writer flushes completions.

Resumable from the database alone: leases whose holder died return to the queue, completions a failed attempt
left unwritten are written first, and a completed URL is never fetched again in its cycle. Each host's work is
``extract_host.ExtractWork``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from harvester.errors import DatabaseUnavailable, Interrupted, StoreError
from harvester.extraction import ExtractorHook, resolve_hook
from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import PROGRESS_EVERY_S, run_hosts
from harvester.frontier import FrontierStore
from harvester.owners import make_owner, retire_owner
from harvester.phases.budget import PageBudget, page_budget
from harvester.phases.client import phase_client
from harvester.phases.completions import write_unwritten
from harvester.phases.cycle_state import CycleState
from harvester.phases.extract_host import ExtractWork
from harvester.phases.extraction_lock import one_extraction
from harvester.phases.host_policy import PolicyKeeper
from harvester.phases.results import PhaseResult, Progress, ProgressCallback
from harvester.phases.runs import recover_leases, teach_classifier
from harvester.records import HostDiagnostics
from harvester.rules.admission import Site
from harvester.rules.stop import StopRule
from harvester.runtime import OUTAGE_WAIT_S, check_stop, db, task_group, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

logger = logging.getLogger(__name__)


async def extract(
    store: FrontierStore,
    settings: Settings,
    profile: SiteProfile,
    *,
    run_id: int | None = None,
    worker: int = 0,
    on_progress: ProgressCallback | None = None,
    extractor: ExtractorHook | None = None,
    cycle: CycleState | None = None,
) -> PhaseResult:
    """Phase two for one worker: lease hosts with due detail URLs and fetch them politely until none is due.

    Several workers (tasks, processes, machines) may run at once on one frontier: each host is leased to one
    of them at a time. Completed URLs are never fetched again in this cycle; leases of dead workers return.
    ``extractor`` is the user hook as a callable, for library callers (the profile names one as
    ``module:function``; giving both is a ``ConfigError``). ``cycle`` (``phases.cycle_state``): the state this run
    shares with its cycle: with a handover, discovery is running beside it and a host is taken once discovery hands
    it over; completions an earlier attempt with the same ``cycle`` could not write are written first, and what this
    one cannot write is kept there for the next.
    """

    hook = resolve_hook(profile.extractor, extractor)  # a bad hook fails before anything is leased
    with one_extraction(settings):  # a second process on one SQLite file is refused here, before any lease
        return await _extract(store, settings, profile, run_id=run_id, worker=worker, on_progress=on_progress,
                              hook=hook, cycle=cycle)


async def _extract(
    store: FrontierStore, settings: Settings, profile: SiteProfile, *, run_id: int | None, worker: int,
    on_progress: ProgressCallback | None, hook: ExtractorHook | None, cycle: CycleState | None,
) -> PhaseResult:
    """``extract`` itself; ``cycle`` None: the run's own state (no handover, nothing an earlier attempt left), kept
    from no retry (``_wind_down``)."""
    state = cycle or CycleState()
    site = Site(settings, profile, keep_reports=False)  # extraction reports no admissions per host
    site.add_moved(await db(store.moved_hosts))
    written = await write_unwritten(store, state.unwritten, run_id=run_id, canonicalize=site.canonicalize)
    if written:
        logger.info("wrote %d completions a failed attempt had left unwritten", written)
    await recover_leases(store)
    await teach_classifier(store, site)
    owner = make_owner(f"extract-{worker}")
    result = PhaseResult(phase="extract")
    shared = state.polite(site)
    async with phase_client(shared, store, settings, profile, site) as client:
        policies = shared.policies if shared is not None else PolicyKeeper(store, client)
        # The frontier never hands out a parked host: parks of the profile's hosts that have run out end here.
        await policies.lift_expired([*site.origins, *site.moved.values()])
        started = await db(store.run_started_at, run_id) if run_id is not None else None
        budget = PageBudget(store, limit=page_budget(settings, profile), since=started or utcnow())
        work = ExtractWork(store, settings, site, owner=owner, run_id=run_id, hook=hook, budget=budget,
                           policies=policies, handover=state.handover, beside=shared is not None)
        if shared is not None:
            shared.owners.add(owner)  # discovery's listing claims pass this worker's host leases (one gate)
        if hook is not None:  # pages the hook failed on before this run: asked again now, so a fixed hook repairs
            work.hook_retries.update(await db(store.due_hook_retries, await work.my_hosts(),
                                              before=started or utcnow()))

        tally = ProgressTally(store, work, client.diagnostics)
        ended: Progress | None = None
        try:
            async with task_group() as tasks:
                keepers = [tasks.create_task(_keep_leases(work)),
                           tasks.create_task(_keep_writing(work, on_progress, tally.snapshot))]
                await _rounds(store, client, work, StopRule(max_idle_rounds=settings.politeness.max_attempts))
                for keeper in keepers:
                    keeper.cancel()
        except (Exception, Interrupted):
            ended = tally.ended()  # its claims as the run ended, before the wind-down hands them back
            raise
        finally:
            if shared is None:
                await policies.aclose()
            await _wind_down(store, work, cycle)
            if shared is not None:  # after its leases went back: until then discovery's listing claims pass them
                shared.owners.discard(owner)
            if ended is not None and on_progress is not None:  # stopped or failed part-way: what it reached
                await _report_ended(on_progress, tally, ended)
        diagnostics = client.diagnostics()
        if on_progress is not None:
            # The run ended of its own accord: nothing it could take is left (what is still due waits for its
            # host's back-off, the next run's budget, or a park), so what it finished is all of its work.
            await _report(on_progress, Progress(done=work.finished_total, total=work.finished_total,
                                                hosts=diagnostics, final=True))
    result.counters.update(work.counters)
    result.counters.update({f"state:{key}": value for key, value in work.writer.counters.items()})
    for origin, diag in diagnostics.items():
        result.hosts[origin] = diag.as_dict()
    for origin, deferred in budget.deferred.items():
        result.hosts.setdefault(origin, {})["deferred_by_budget"] = deferred
    return result


async def _rounds(store: FrontierStore, client: PoliteClient, work: ExtractWork, stop: StopRule) -> None:
    """Rounds of ``run_hosts`` over the hosts with due work, as long as ``stop`` says (``rules.stop``), or until
    the process is asked to stop (``runtime.request_stop``: then the round drains and ``Interrupted`` ends it).

    A run does not end while discovery of its cycle is still handing hosts over (``phases.handover``), while
    hosts with work due are held by other live workers (it waits for them), or while hosts with work due are free
    to take (a dead holder's, released after the round looked: another round takes them). What discovery hands
    over may widen the site (a seed found moved) and teach it detail shapes: both are read again before the next
    round."""
    settings = work.settings
    handover = work.handover
    scoped = 0
    while True:
        seen = handover.version if handover is not None else 0
        # Read before the round looks for hosts: discovery ending while the round runs opens hosts the round
        # never looked at, so that round cannot be the last (ending then left a host's URLs queued).
        handing_over = handover is not None and not handover.ended
        if seen != scoped:
            await _rescope(store, work)
            scoped = seen
        known_before = await db(store.url_high_water)
        engine = await run_hosts(client, work, max_active_hosts=settings.politeness.max_active_hosts,
                                 holds=work.may_send, ended=work.turn_over, offered=work.offered)
        await work.give_back(engine.unsent)
        await work.writer.flush()
        check_stop()
        await work.round_over()
        if engine.unsent and (await _liveness_back(store) or await _renew_voided(work)):
            continue  # the round sent nothing for want of this process's session: no idle round, no end
        if (stop.again_now(added_urls=await db(store.url_high_water) > known_before)
                and await db(store.due_count, kinds=("detail",)) > 0):
            continue
        soonest = await db(store.next_due_at, kinds=("detail",))
        gap = stop.wait_s(next_due_in_s=None if soonest is None else (soonest - utcnow()).total_seconds(),
                          settled=_settled(work))
        if gap is None:
            try:
                await recover_leases(store)  # a holder that died here hands its hosts back now, not at lease expiry
            except StoreError as exc:  # only a shortcut: their leases run out anyway; asked again next look
                logger.warning("handing back dead holders' leases: %s", exc, extra={"error_class": "storage"})
            claimable, held = await work.unfinished()
            gap = stop.hold_s(claimable=len(claimable), held_elsewhere=len(held), handing_over=handing_over,
                              settled=_settled(work))
            if gap is None:
                return
        if handover is not None and handing_over:
            await handover.changed(seen, gap)  # a host handed over starts the next round at once
        else:
            await asyncio.sleep(gap)


LIVENESS_POLL_S = 0.1


async def _liveness_back(store: FrontierStore) -> bool:
    """Wait, when this process's liveness session is away (a database restart ended it; ``frontier.liveness``
    opens it again each second), until it is back; True when there was a wait. Until then no lease is known live,
    so each round's hosts stopped before their first request: rounds that spun in milliseconds were counted idle,
    and the run ended with the work queued (``test_db_outage``: 137 of 182 URLs left, exit 0). Past the outage bound
    it fails as a store call would, and a retry resumes."""
    liveness = store.liveness
    if liveness.present:
        return False
    waited = 0.0
    while not liveness.present:
        check_stop()  # a stop during the outage ends the run now, not when the session is back
        if waited >= OUTAGE_WAIT_S:
            raise DatabaseUnavailable(f"this process's liveness session was not back within {OUTAGE_WAIT_S:.0f} s")
        await asyncio.sleep(LIVENESS_POLL_S)
        waited += LIVENESS_POLL_S
    logger.info("this process's liveness session is back after %.1f s: its hosts are leased again", waited)
    return True


async def _renew_voided(work: ExtractWork) -> bool:
    """Renew now the leases whose local deadlines the session's loss voided (``HostHolds.voided``), rather than let
    rounds spin until the lease keeper's next tick; True when some were."""
    if not any(work.holds.voided(origin) for origin in work.leased):
        return False
    await work.renew()
    return True


async def _rescope(store: FrontierStore, work: ExtractWork) -> None:
    """Read again what discovery may have learned since: hosts that moved (they join the scope) and detail shapes."""
    work.site.add_moved(await db(store.moved_hosts))
    work.rescope()
    await teach_classifier(store, work.site)


async def _wind_down(store: FrontierStore, work: ExtractWork, cycle: CycleState | None) -> None:
    """However extraction ends: write what is pending, hand every lease back, and retire the owner, so a retry
    in this same process (a Prefect task retry) can take the hosts at once instead of waiting out the lease.
    ``cycle`` None: the caller gave no cycle, so no retry can find what is unwritten; the owner is retired (its
    leases return to the next run at once) and those few pages are fetched again. Answers whose record a
    cancelled turn never ran join the pending batch after it (``record_unrecorded``: a parse, no store call), so
    a wind-down cut short (a stop's grace spent) has written what was recorded first."""
    try:
        await work.writer.flush()
        if await _record_unrecorded(work):
            await work.writer.flush()
        await db(store.release_owner, work.owner)
    except StoreError as exc:
        if cycle is not None:
            # Keep the unwritten completions (and their leases): a retry of this cycle's extraction writes them first.
            await _record_unrecorded(work)
            cycle.unwritten.keep(work.owner, work.writer.take_pending())
        else:
            retire_owner(work.owner)
        logger.warning(
            "could not write or hand back leases of %s: %s", work.owner, exc, extra={"error_class": "storage"}
        )
    else:
        retire_owner(work.owner)
    finally:
        work.leave()




async def _record_unrecorded(work: ExtractWork) -> int:
    kept = await work.record_unrecorded()
    if kept:
        logger.info("%d answers received before extraction ended were recorded as it wound down", kept)
    return kept


def _settled(work: ExtractWork) -> int:
    """Completions written in this run, bar URLs handed back unfetched (a parked host, a redirect into one): a
    round that adds none made no progress."""
    return sum(work.writer.counters.values()) - work.counters["parked"]


TICK_EVERY_S = 0.1


async def _keep_leases(work: ExtractWork) -> None:
    """Renew this worker's host leases well before they lapse (a third of the lease spent, on the clock
    ``phases.leases`` keeps: after a freeze, at once). A task of its own: a completion batch slow to write (a
    busy database) must not hold the renewal back until the leases have lapsed."""
    while True:
        await asyncio.sleep(TICK_EVERY_S)
        if not work.holds.due_for_renewal(work.leased):
            continue
        try:
            await work.renew()
        except StoreError as exc:
            # A lock or a lasting fault: asked again next tick. The workers' own writes meet the same fault and end
            # the run if it lasts; this loop must not die first (its leases would lapse unseen). Meanwhile the
            # local deadlines run out and the workers send nothing more for hosts that may be someone else's.
            logger.warning("lease keeper: %s; asked again in %.1f s", exc, TICK_EVERY_S,
                           extra={"error_class": "storage"})


async def _keep_writing(work: ExtractWork, on_progress: ProgressCallback | None,
                        snapshot: Callable[[], Awaitable[Progress]]) -> None:
    """Flush idle completions and report progress."""
    loop = asyncio.get_running_loop()
    last_report = loop.time()
    while True:
        # Often: a quiet host's last completions are written within FLUSH_EVERY_S plus this, so a kill repeats
        # no fetch answered more than half a second before it.
        await asyncio.sleep(TICK_EVERY_S)
        now = loop.time()
        try:
            await work.writer.tick()
        except StoreError as exc:  # the batch stays pending and is asked again next tick
            logger.warning("completions: %s; asked again in %.1f s", exc, TICK_EVERY_S,
                           extra={"error_class": "storage"})
        if on_progress is not None and now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            try:
                progress = await snapshot()
            except StoreError as exc:  # a report is never worth the run: the next tick asks again
                logger.warning("progress: %s", exc, extra={"error_class": "storage"})
                continue
            await _report(on_progress, progress)


DUE_EVERY_S = 15.0
"""How often a worker reads what is still due for its progress figure (the flows log it every 15 s): the count grows
with the due URLs (~1.5 s for a million on SQLite), so a one-second tick estimates it in between (``ProgressTally``)."""


class ProgressTally:
    """This worker's progress: what it finished, of that plus what it holds unanswered (in flight, or waiting for
    its host's turn) plus what is still due on the site's hosts (not every site's, on a shared frontier).

    What is due is read every ``DUE_EVERY_S``; in between it is that reading less what this worker has claimed or
    finished since, which came out of it; a read that took ``t`` waits at least ``20 t`` (~5 % of the time). Once
    that estimate is spent (nothing due as far as it knows: a run's start, while discovery still adds URLs, or its
    end) it is read every tick, as the figure must not say all is done while it is not; a reading that finds much
    due ends that. Read every tick throughout, as first written, a million-URL site kept a worker reading ~1.5 s out
    of every 2.5 s (review 47b); read every 15 s even when spent, a loaded run's first tick said 0 of 0 with a page
    in flight (CI)."""

    def __init__(
        self, store: FrontierStore, work: ExtractWork, hosts: Callable[[], dict[str, HostDiagnostics]],
    ) -> None:
        self._store = store
        self._work = work
        self._hosts = hosts
        self._due = 0
        self._counted = 0
        """Finished plus held unanswered when ``_due`` was read: what grew past it since came out of ``_due``."""
        self._read_at = self._took = float("-inf")

    async def snapshot(self) -> Progress:
        """A tick's snapshot: reads what is due from the store when its time has come."""
        spent = self._estimate(self._work.outstanding()) == 0
        wait = PROGRESS_EVERY_S if spent else max(DUE_EVERY_S, 20 * self._took)
        if time.monotonic() >= self._read_at + wait:
            await self._read_due(outstanding=self._work.outstanding())
        return self._progress(outstanding=self._work.outstanding(), final=False)

    def ended(self) -> Progress:
        """The snapshot of a run that ended part-way, from the last reading of what is due (no store call: the
        store may be what failed); ``ended_after`` reads it again once the claims went back."""
        return self._progress(outstanding=self._work.outstanding(), final=True)

    async def ended_after(self) -> Progress:
        """As ``ended``, read after the wind-down: the claims it handed back unanswered are due again."""
        await self._read_due(outstanding=0)
        return self._progress(outstanding=0, final=True)

    async def _read_due(self, *, outstanding: int) -> None:
        started = time.monotonic()
        self._due = await db(self._store.due_count, kinds=("detail",), hosts=await self._work.my_hosts())
        self._read_at, self._took = started, time.monotonic() - started
        self._counted = self._work.finished_total + outstanding

    def _estimate(self, outstanding: int) -> int:
        """What is due now, as far as the last reading tells: it less what was claimed or finished since."""
        return max(0, self._due - (self._work.finished_total + outstanding - self._counted))

    def _progress(self, *, outstanding: int, final: bool) -> Progress:
        done = self._work.finished_total
        return Progress(done=done, total=done + outstanding + self._estimate(outstanding), hosts=self._hosts(),
                        final=final)


ENDED_REPORT_S = 5.0
"""How long a run that ended part-way spends on its last progress report: it is on its way out (a stop's grace)."""


async def _report_ended(on_progress: ProgressCallback, tally: ProgressTally, ended: Progress) -> None:
    """The last report of a run that ended part-way: what it reached, of what is due now (else of what was due at
    the last tick, the store being away)."""
    try:
        async with asyncio.timeout(ENDED_REPORT_S):
            try:
                ended = await tally.ended_after()
            except StoreError as exc:
                logger.warning("progress: %s", exc, extra={"error_class": "storage"})
            await _report(on_progress, ended)
    except TimeoutError:
        logger.warning("the last progress report took longer than %.0f s: left", ENDED_REPORT_S)


async def _report(on_progress: ProgressCallback, progress: Progress) -> None:
    """Hand ``progress`` to the caller; a report that fails is logged, never the run's failure (an orchestrator API
    away at the last snapshot made a finished extraction a failed one, its work done and written)."""
    try:
        await on_progress(progress)
    except Exception as exc:
        logger.warning("progress report failed%s: %s", " (the last)" if progress.final else "", exc,
                       extra={"error_class": type(exc).__name__})
