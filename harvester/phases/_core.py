"""The plain async entry points the flows and the CLI call: discover, extract, and run bookkeeping.

Idempotent and resumable from the database alone: discovery skips documents this run already processed and
keeps its listing-page crawl in the frontier (leased, completed with its outlinks in one transaction);
extraction requeues leases whose holder died and never refetches a completed URL. Never imports prefect.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harvester.errors import StoreError
from harvester.extraction import ExtractorHook, resolve_hook
from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import PROGRESS_EVERY_S, run_hosts
from harvester.frontier import FrontierStore
from harvester.phases.budget import PageBudget, page_budget
from harvester.phases.discover_host import HostDiscovery, discover_hosts
from harvester.phases.exclusive import one_extraction
from harvester.phases.extract_host import ExtractWork, stash_unwritten, write_unwritten
from harvester.phases.handover import Handover, Shared, held
from harvester.phases.host_policy import PolicyKeeper
from harvester.records import Changes, ErrorClass, HostDiagnostics, RobotsState
from harvester.rules.admission import Site
from harvester.rules.stop import StopRule
from harvester.runtime import check_stop, db, make_owner, owner_is_dead, retire_owner, task_group, utcnow
from harvester.settings import Settings, SiteProfile

logger = logging.getLogger(__name__)

async def recover_leases(store: FrontierStore) -> int:
    """The crash-resume path: expired leases and leases of dead local processes go back to the queue."""
    recovered = await db(store.requeue_expired)
    for owner in await db(store.lease_owners):
        if owner_is_dead(owner):
            recovered += await db(store.release_owner, owner)
    if recovered:
        logger.info("requeued %d URLs whose lease holder died or expired", recovered)
    return recovered


class StoreRobots:
    """robots.txt persistence for the fetch engine, over the synchronous store."""

    def __init__(self, store: FrontierStore) -> None:
        self._store = store

    async def load_robots(self, origin: str) -> RobotsState | None:
        state = await db(self._store.load_robots, origin)
        if state is not None and state.error_class is ErrorClass.ADDRESS_REFUSED:
            return None  # the verdict of an earlier run's address policy, not a fact about the host: ask again
        return state

    async def save_robots(self, state: RobotsState) -> None:
        await db(self._store.save_robots, state)


def polite_client(store: FrontierStore, settings: Settings, profile: SiteProfile, site: Site) -> PoliteClient:
    """The one polite client of a task: per-host limits, robots.txt persisted in the frontier, scope on hops, and
    the address policy with the profile's allowance and its seeds' addresses."""
    return PoliteClient(
        settings,
        user_agent=profile.user_agent,
        per_host_limit=profile.per_host_limit,
        min_delay_s=profile.min_delay_s,
        robots_store=StoreRobots(store),
        in_scope=site.in_scope,
        canonicalize=lambda url: site.fetch_form(url) or url,
        seeds=profile.seeds,
        allow_addresses=profile.allow_addresses,
    )


def _client(shared: Shared | None, store: FrontierStore, settings: Settings, profile: SiteProfile,
            site: Site) -> AbstractAsyncContextManager[PoliteClient]:
    """The phase's client: the cycle's shared one (closed by the cycle), else one of its own."""
    return nullcontext(shared.client) if shared is not None else polite_client(store, settings, profile, site)


@asynccontextmanager
async def shared_politeness(handover: Handover, settings: Settings, profile: SiteProfile) -> AsyncIterator[None]:
    """Give a cycle's ``handover`` one polite client for both phases in this loop (``phases.handover``), with its
    own store (robots.txt and host policies outlive either phase's), closed when the cycle ends."""
    with await db(FrontierStore.open, settings) as store:
        site = Site(settings, profile)
        site.add_moved(await db(store.moved_hosts))
        async with polite_client(store, settings, profile, site) as client:
            shared = Shared(client, PolicyKeeper(store, client), asyncio.get_running_loop(), [site])
            client.set_scope(shared.in_scope)
            handover.shared = shared
            try:
                yield
            finally:
                handover.shared = None
                await shared.policies.aclose()


# --- results -------------------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    """Small, JSON-able counters of one phase (what a Prefect task returns and artifacts show)."""

    phase: str
    counters: Counter[str] = field(default_factory=Counter)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase, "counters": dict(self.counters), "hosts": self.hosts, "reports": self.reports,
            "problems": self.problems[:200],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseResult:
        return cls(
            phase=data["phase"], counters=Counter(data.get("counters") or {}), hosts=dict(data.get("hosts") or {}),
            reports=dict(data.get("reports") or {}), problems=list(data.get("problems") or []),
        )

    @classmethod
    def merge(cls, phase: str, parts: Iterable[PhaseResult | dict[str, Any]]) -> PhaseResult:
        merged = cls(phase=phase)
        for part in parts:
            item = part if isinstance(part, PhaseResult) else cls.from_dict(part)
            merged.counters.update(item.counters)
            for origin, host in item.hosts.items():
                merged.hosts[origin] = _merge_host(merged.hosts.get(origin), host)
            merged.reports.update(item.reports)
            merged.problems.extend(item.problems)
        deferred = [host["deferred_by_budget"] for host in merged.hosts.values() if "deferred_by_budget" in host]
        if deferred:
            # Per host, not per worker: two workers of a run may each find one spent host (one took it up after the
            # other handed it back) and count the same deferred URLs.
            merged.counters["deferred_by_budget"] = sum(deferred)
        return merged


def _merge_host(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
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


@dataclass(frozen=True, slots=True)
class Progress:
    """A snapshot handed to ``on_progress`` during extraction."""

    done: int
    total: int
    hosts: dict[str, HostDiagnostics]
    final: bool = False
    """The run's last snapshot: a reporter that throttles its updates must not drop this one."""

    @property
    def percent(self) -> float:
        return 100.0 if self.total <= 0 else min(100.0, 100.0 * self.done / self.total)

    def host_lines(self) -> list[str]:
        lines = []
        for origin, diag in sorted(self.hosts.items()):
            errors = ",".join(f"{name}={count}" for name, count in sorted(diag.errors.items())) or "-"
            lines.append(
                f"{origin} fetched={diag.fetched} 304={diag.not_modified} in_flight={diag.in_flight}/{diag.limit} "
                f"peak={diag.peak_in_flight} queue={diag.queue_depth} rate={diag.rate_per_s:.1f}/s errors={errors}"
                + (f" parked={diag.parked_reason}" if diag.parked_reason else "")
            )
        return lines


ProgressCallback = Callable[[Progress], Awaitable[None]]


# --- runs ----------------------------------------------------------------------------------------------------


def site_hosts(settings: Settings, profile: SiteProfile) -> list[str]:
    """The seed origins of a profile: discovery runs one task per host."""
    return Site(settings, profile).origins


async def begin_run(settings: Settings, phase: str, profile: SiteProfile) -> int:
    """The run this phase belongs to: an unfinished run of the same phase and profile is resumed."""
    with await db(FrontierStore.open, settings) as store:
        return await db(
            store.resume_or_start_run, phase, profile=profile.model_dump(mode="json"), owner=make_owner(phase)
        )


async def finish_run(
    settings: Settings, run_id: int, phase: str, parts: Iterable[PhaseResult | dict[str, Any]]
) -> tuple[PhaseResult, dict[str, Any]]:
    """Merge the tasks' counters, close the run, and return them with the frontier's stats.

    An extraction's per-host ``fetched``, ``not_modified``, ``gone`` and ``errors`` are its own requests, read from
    the frontier, on every host of its line (one it never asked: none): the polite client's diagnostics also count
    what discovery asked through it when a cycle shares it (robots.txt, sitemaps and their probes, listing pages)."""
    result = PhaseResult.merge(phase, parts)
    with await db(FrontierStore.open, settings) as store:
        if phase == "extract":
            own = await db(store.run_fetch_counts, run_id)
            for origin in {*result.hosts, *own}:
                sent = own.get(origin, {})
                result.hosts.setdefault(origin, {}).update(
                    fetched=sent.get("fetched", 0), not_modified=sent.get("not_modified", 0),
                    gone=sent.get("gone", 0),
                    errors={key[6:]: n for key, n in sent.items() if key.startswith("error:")})
        await db(store.finish_run, run_id, status="completed", counters=result.as_dict())
        stats = (await db(store.stats)).as_dict()
    return result, stats


async def mark_due(settings: Settings, profile: SiteProfile) -> datetime:
    """Make every known URL and discovery document of the profile's hosts due now (still conditional)."""
    now = utcnow()
    with await db(FrontierStore.open, settings) as store:
        await db(store.make_due, site_hosts(settings, profile), now=now)
    return now


async def begin_cycle(settings: Settings, kind: str, profile: SiteProfile) -> tuple[int, datetime, bool]:
    """(cycle id, its start, resumed): the unfinished cycle of ``kind`` and profile an earlier attempt left (killed,
    failed, retried), else a new one. Every phase run started meanwhile belongs to it."""
    with await db(FrontierStore.open, settings) as store:
        cycle_id, resumed = await db(store.begin_cycle, kind, profile=profile.model_dump(mode="json"))
        started = await db(store.cycle_started_at, cycle_id)
    return cycle_id, started or utcnow(), resumed


async def close_cycle(settings: Settings, cycle_id: int, origins: Sequence[str], *, failed: bool) -> Changes:
    """Close the cycle and read its counts (``FrontierStore.cycle_counts``: the one source of what it reports)."""
    with await db(FrontierStore.open, settings) as store:
        await db(store.finish_cycle, cycle_id, origins=origins, status="failed" if failed else "completed")
        return await db(store.cycle_counts, cycle_id)


async def silence(settings: Settings, profile: SiteProfile, since: datetime) -> str | None:
    """Why a cycle begun at ``since`` counts as having fetched nothing, or None when some seed host answered.

    Asked and silent (every seed host down, refused or not a web server, like an unedited placeholder seed) is
    a failure; so is a frontier that never got an answer from any of them. A cycle that asked nothing of hosts
    that answered before (everything cached and not yet due) is not."""
    origins = site_hosts(settings, profile)
    with await db(FrontierStore.open, settings) as store:
        answered, asked = await db(store.answered_since, since, origins)
        if answered:
            return None
        if not asked:
            ever, _ = await db(store.answered_since, datetime(1970, 1, 1, tzinfo=UTC), origins)
            if ever:
                return None
    hosts = ", ".join(origins[:5]) + (f" and {len(origins) - 5} more" if len(origins) > 5 else "")
    return (
        f"no seed host answered any request (robots.txt, sitemaps, pages): {hosts}. Check that the seeds are the "
        f"site's real addresses and that it is reachable from this machine"
    )


# --- discovery -----------------------------------------------------------------------------------------------


async def discover(
    store: FrontierStore,
    settings: Settings,
    profile: SiteProfile,
    *,
    hosts: Sequence[str] | None = None,
    run_id: int | None = None,
    refresh: bool = False,
    handover: str | None = None,
) -> PhaseResult:
    """Phase one for ``hosts`` (default: the profile's seed hosts), concurrently, each politely.

    A rerun with the same ``run_id`` skips every document already processed in that run; ``refresh`` asks
    for documents whose revisit time has not come yet too (conditionally, so unchanged ones answer 304).
    ``handover`` (``phases.handover``): each host discovered is handed to the cycle's extraction at once.
    """
    ready = held(handover)
    site = Site(settings, profile)
    site.add_moved(await db(store.moved_hosts))
    origins = list(hosts) if hosts else site.origins
    started = await db(store.run_started_at, run_id) if run_id is not None else None
    await recover_leases(store)
    # A rerun skips the sitemaps it already processed, so it would not relearn their detail shapes and would
    # classify the same links differently (as listings) after a crash: learn them from the frontier first.
    await _teach_classifier(store, site)
    result = PhaseResult(phase="discover")
    shared = ready.polite(site) if ready is not None else None
    async with _client(shared, store, settings, profile, site) as client:
        policies = shared.policies if shared is not None else PolicyKeeper(store, client)

        def make(origin: str) -> HostDiscovery:
            return HostDiscovery(store, settings, site, client, origin, run_id=run_id,
                                 run_started=started or utcnow(), refresh=refresh, policies=policies)

        def finished(item: HostDiscovery) -> None:
            result.counters.update(item.counters)
            result.problems.extend(item.problems)
            if ready is not None:
                ready.hand_over(item.homes())

        try:
            await discover_hosts(client, origins, make, finished, at_once=settings.politeness.max_active_hosts)
        finally:
            if shared is None:
                await policies.aclose()
        for origin, diag in client.diagnostics().items():
            result.hosts[origin] = diag.as_dict()
    # One host at a time, each live report dropped as its summary is made: the run is over for them, and holding
    # every host's report and its summary at once was the peak of a wide run (issue 22: 2,000 hosts).
    while site.reports:
        origin = next(iter(site.reports))
        result.reports[origin] = site.reports.pop(origin).to_dict()
    site.forget_learned()
    return result


# --- extraction ----------------------------------------------------------------------------------------------


async def extract(
    store: FrontierStore,
    settings: Settings,
    profile: SiteProfile,
    *,
    run_id: int | None = None,
    worker: int = 0,
    on_progress: ProgressCallback | None = None,
    extractor: ExtractorHook | None = None,
    handover: str | None = None,
) -> PhaseResult:
    """Phase two for one worker: lease hosts with due detail URLs and fetch them politely until none is due.

    Several workers (tasks, processes, machines) may run at once on one frontier: each host is leased to one
    of them at a time. Completed URLs are never fetched again in this cycle; leases of dead workers return.
    ``extractor`` is the user hook as a callable, for library callers (the profile names one as
    ``module:function``; giving both is a ``ConfigError``). ``handover`` (``phases.handover``): the cycle's
    discovery is running beside it; a host is taken once discovery hands it over.
    """

    hook = resolve_hook(profile.extractor, extractor)  # a bad hook fails before anything is leased
    with one_extraction(settings):  # a second process on one SQLite file is refused here, before any lease
        return await _extract(store, settings, profile, run_id=run_id, worker=worker, on_progress=on_progress,
                              hook=hook, handover=held(handover))


async def _extract(
    store: FrontierStore, settings: Settings, profile: SiteProfile, *, run_id: int | None, worker: int,
    on_progress: ProgressCallback | None, hook: ExtractorHook | None, handover: Handover | None = None,
) -> PhaseResult:
    site = Site(settings, profile, keep_reports=False)  # extraction reports no admissions per host
    site.add_moved(await db(store.moved_hosts))
    written = await write_unwritten(store, settings.database_url, run_id=run_id, canonicalize=site.canonicalize)
    if written:
        logger.info("wrote %d completions a failed attempt had left unwritten", written)
    await recover_leases(store)
    await _teach_classifier(store, site)
    owner = make_owner(f"extract-{worker}")
    total = await db(store.due_count)
    result = PhaseResult(phase="extract")
    shared = handover.polite(site) if handover is not None else None
    async with _client(shared, store, settings, profile, site) as client:
        policies = shared.policies if shared is not None else PolicyKeeper(store, client)
        # The frontier never hands out a parked host: parks of the profile's hosts that have run out end here.
        await policies.lift_expired([*site.origins, *site.moved.values()])
        started = await db(store.run_started_at, run_id) if run_id is not None else None
        budget = PageBudget(store, limit=page_budget(settings, profile), since=started or utcnow())
        work = ExtractWork(store, settings, site, owner=owner, run_id=run_id, hook=hook, budget=budget,
                           policies=policies, handover=handover)

        def snapshot() -> Progress:
            return Progress(done=work.claimed_total, total=max(total, work.claimed_total), hosts=client.diagnostics())

        try:
            async with task_group() as tasks:
                keepers = [tasks.create_task(_keep_leases(work)),
                           tasks.create_task(_keep_writing(work, on_progress, snapshot))]
                await _rounds(store, client, work, StopRule(max_idle_rounds=settings.politeness.max_attempts))
                for keeper in keepers:
                    keeper.cancel()
        finally:
            if shared is None:
                await policies.aclose()
            await _wind_down(store, work)
        diagnostics = client.diagnostics()
        if on_progress is not None:
            await on_progress(Progress(done=work.claimed_total, total=work.claimed_total, hosts=diagnostics,
                                       final=True))
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
                                 holds=work.holds.holds, ended=work.turn_over)
        await work.give_back(engine.unsent)
        await work.writer.flush()
        check_stop()
        work.exhausted.clear()
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


async def _rescope(store: FrontierStore, work: ExtractWork) -> None:
    """Read again what discovery may have learned since: hosts that moved (they join the scope) and detail shapes."""
    work.site.add_moved(await db(store.moved_hosts))
    work.rescope()
    await _teach_classifier(store, work.site)


async def _wind_down(store: FrontierStore, work: ExtractWork) -> None:
    """However extraction ends: write what is pending, hand every lease back, and retire the owner, so a retry
    in this same process (a Prefect task retry) can take the hosts at once instead of waiting out the lease."""
    try:
        await work.writer.flush()
        await db(store.release_owner, work.owner)
    except StoreError as exc:
        # Keep the unwritten completions (and their leases): a retry in this process writes them first.
        stash_unwritten(work.settings.database_url, work.owner, work.writer.take_pending())
        logger.warning(
            "could not write or hand back leases of %s: %s", work.owner, exc, extra={"error_class": "storage"}
        )
    else:
        retire_owner(work.owner)




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
                        snapshot: Callable[[], Progress]) -> None:
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
                await on_progress(snapshot())
            except Exception as exc:  # a progress report is never worth the run (an orchestrator API away)
                logger.warning("progress report failed: %s", exc, extra={"error_class": type(exc).__name__})


async def _teach_classifier(store: FrontierStore, site: Site) -> None:
    """Detail URL shapes learned from what the frontier already holds, so outlinks are classified like discovery."""
    site.classifier.learn_details(await db(store.sample_urls, kind="detail", limit=5_000))
