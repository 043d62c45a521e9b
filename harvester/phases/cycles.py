"""Whole crawl cycles: ``harvest()`` (discover, then extract, per host) and ``recrawl()`` (the scheduled re-crawl).

The order of a cycle's steps is written once, in ``harvest_steps`` and ``recrawl_steps``, over a ``Steps``
object that says how each phase runs: ``LocalSteps`` runs it in this process (the library's ``harvest`` and
``recrawl``, the tests), ``harvester.flows.steps.SubflowSteps`` as a Prefect subflow with a task per host or worker
(the flows, and through them the CLI and the deployments). Both record a run per phase in the frontier, so
``harvester status`` and a resumed run see a library harvest as they see a flow's. Never imports prefect.

Sync or async: ``harvest`` and ``recrawl`` block and run their own event loop, because the common library
caller is a plain script or a notebook cell's worth of code, for which ``asyncio.run`` is noise;
``aharvest`` and ``arecrawl`` are the same cycles as coroutines, for callers that already run a loop (an
async application, the flows, the tests). ``discover`` and ``extract`` (harvester.phases) stay async only:
they are building blocks for callers that manage the store and the run themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from harvester.errors import EveryRequestFailed, ExtractorFailed, HarvesterError, Interrupted, NothingFetched
from harvester.extraction import ExtractorHook, hook_failed_everywhere, resolve_hook
from harvester.phases.client import shared_politeness
from harvester.phases.cycle_state import CycleState
from harvester.phases.discover_phase import discover
from harvester.phases.extract_phase import extract
from harvester.phases.handover import Handover
from harvester.phases.results import PhaseResult, ProgressCallback
from harvester.phases.runs import (
    begin_cycle,
    begin_run,
    close_cycle,
    finish_failed,
    finish_run,
    finished_discovery,
    mark_due,
    note_stopped,
    open_store,
    silence,
    site_hosts,
)
from harvester.runtime import db, siblings, stop_requested
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import Changes

logger = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
T = TypeVar("T")


class Steps(Protocol[R_co]):
    """How each phase of a cycle runs; what a phase returns (``R_co``) is up to the runner."""

    async def discover(self, *, refresh: bool, cycle: CycleState) -> R_co:
        """One whole discovery run of the profile's hosts; ``refresh`` asks every document again (conditionally);
        each host is handed over (``cycle.handover``) as its discovery ends."""
        ...

    async def extract(self, *, cycle: CycleState) -> R_co:
        """One whole extraction run: everything due, by all workers, beside the discovery that hands the hosts over
        (``cycle.handover``), each taken once handed."""
        ...

    def recorded(self, run: dict[str, Any]) -> R_co:
        """What ``discover`` returned, from its completed run's row (``runs.counters`` and its id): a resumed cycle
        whose discovery finished is not discovered again."""
        ...


@dataclass(frozen=True, slots=True)
class Cycle(Generic[R]):
    """What one cycle's phases returned, and what the cycle changed on the profile's hosts: ``changes`` is
    ``FrontierStore.cycle_counts`` over the whole cycle, every attempt of it (new, changed, restyled, gone,
    missing, deferred, fetched, not modified, failed, with examples) and ``fetches`` its per-host part (requests
    per host by outcome). ``silent`` says why the cycle counts as having fetched nothing (``NothingFetched``),
    None when some seed host answered."""

    discover: R
    extract: R
    changes: Changes
    fetches: dict[str, dict[str, int]] = field(default_factory=dict)
    started_at: datetime | None = None
    silent: str | None = None
    found: int = 0
    """URLs this cycle's discovery added to the frontier."""
    problems: list[str] = field(default_factory=list)
    """This cycle's discovery problems (robots.txt unavailable, sitemaps refused or cut, ...), as its run recorded."""


async def harvest_steps(steps: Steps[R], settings: Settings, profile: SiteProfile) -> Cycle[R]:
    """A full harvest: discovery, then extraction of what it found (a rerun resumes the cycle from the frontier,
    and reports all of it)."""
    cycle_id, since, resumed = await begin_cycle(settings, "harvest", profile)
    done = await finished_discovery(settings, cycle_id) if resumed else None
    discovered, extracted = await _pipelined(steps, settings, profile, refresh=False, done=done)
    return await _close(settings, profile, cycle_id, since, discovered, extracted)


async def recrawl_steps(steps: Steps[R], settings: Settings, profile: SiteProfile, *, refresh: bool) -> Cycle[R]:
    """The re-crawl: conditional rediscovery, extraction of what is due, and what appeared or vanished meanwhile.

    ``refresh`` first makes every known URL and document of the profile due now (still asked conditionally):
    a re-crawl off schedule; not again when an earlier attempt of this cycle is resumed (what it fetched stays
    fetched). The counts are the whole cycle's, every attempt of it (``FrontierStore.cycle_counts``).
    """
    cycle_id, since, resumed = await begin_cycle(settings, "recrawl", profile)
    if refresh and not resumed:
        await mark_due(settings, profile)
    done = await finished_discovery(settings, cycle_id) if resumed else None
    discovered, extracted = await _pipelined(steps, settings, profile, refresh=refresh, done=done)
    return await _close(settings, profile, cycle_id, since, discovered, extracted)


async def _pipelined(steps: Steps[R], settings: Settings, profile: SiteProfile, *, refresh: bool,
                     done: dict[str, Any] | None = None) -> tuple[R, R]:
    """Both phases at once, per host in order: a host's extraction starts when its own discovery ends (so a slow
    host's discovery delays only that host), never on a host discovery is still reading. A discovery that fails
    fails the cycle, as it did when the phases ran one after the other: its extraction is cancelled. ``done``: the
    run of this cycle's discovery that completed before an interruption (``finished_discovery``); then only the
    extraction runs, every host handed over at once.

    ``shared_politeness`` opens the frontier (a new SQLite file created and migrated) before either phase starts:
    two phases opening a new file at the same moment would both try to migrate it, and one would find it locked."""
    ready = Handover()
    cycle = CycleState(handover=ready)
    try:
        async with shared_politeness(cycle, settings, profile):
            return await _both(steps, cycle, ready, refresh=refresh, done=done)
    finally:
        ready.end()


async def _both(steps: Steps[R], cycle: CycleState, ready: Handover, *, refresh: bool,
                done: dict[str, Any] | None) -> tuple[R, R]:
    async def discovery() -> R:
        try:
            if done is not None:
                logger.info("the cycle's discovery (run %s) completed before it was interrupted: extraction resumes",
                            done.get("run_id"))
                return steps.recorded(done)
            return await steps.discover(refresh=refresh, cycle=cycle)
        finally:
            ready.end()

    discovered = asyncio.create_task(discovery(), name="discovery")
    extracted = asyncio.create_task(steps.extract(cycle=cycle), name="extraction")
    both = (discovered, extracted)
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_EXCEPTION)
        if any(_failure(task) is not None for task in both) and stop_requested() is None:
            for task in both:
                task.cancel()
        # A phase stopped by ``runtime.request_stop`` (discovery meets it at its next request) leaves the other
        # to drain by itself, for the stop is the whole process's: cancelled instead, an extraction lost the
        # answers it had in flight and a rerun fetched them again.
        await asyncio.wait(both)
    except BaseException:  # this cycle is cancelled: so are both phases, and none outlives it
        for task in both:
            task.cancel()
        await asyncio.wait(both)
        raise
    for task in both:
        if (failure := _failure(task)) is not None:
            raise failure
    return discovered.result(), extracted.result()


def _failure(task: asyncio.Task[Any]) -> BaseException | None:
    """What ended ``task`` in error; None while it runs, when it returned, or when it was cancelled."""
    return None if not task.done() or task.cancelled() else task.exception()


async def _close(settings: Settings, profile: SiteProfile, cycle_id: int, since: datetime, discovered: R,
                 extracted: R) -> Cycle[R]:
    """Close the cycle and read its report from the frontier (so it is the same whoever ran the phases, and
    covers every attempt of a resumed cycle)."""
    silent = await silence(settings, profile, since)
    changes = await close_cycle(settings, cycle_id, site_hosts(settings, profile), failed=silent is not None)
    found = getattr(discovered, "counters", discovered)
    problems = _recorded_problems(discovered)
    if problems is None:
        async with open_store(settings) as store:
            last = await db(store.last_run, "discover")
        problems = list(((last["counters"] if last else None) or {}).get("problems") or [])
    return Cycle(discover=discovered, extract=extracted, changes=changes, fetches=changes["hosts"],
                 started_at=since, silent=silent, problems=problems,
                 found=int(found.get("urls_new") or 0) if isinstance(found, dict) else 0)


def _recorded_problems(discovered: object) -> list[str] | None:
    """The problems discovery's run recorded, from the result its step returned (the merged ``PhaseResult``, or its
    ``as_dict``) when it carries them; None: read the run. Reading the run back loads every host's report and
    diagnostics it recorded (20 MB of objects at 2,000 hosts, the run's peak: issue 22) for this one list."""
    if isinstance(discovered, PhaseResult):
        return list(discovered.as_dict()["problems"])
    if isinstance(discovered, dict) and isinstance(discovered.get("problems"), list):
        return list(discovered["problems"])
    return None


@dataclass(frozen=True, slots=True)
class LocalSteps:
    """The phases in this process, with the bookkeeping of the flows: one run per phase (an unfinished one of
    the same profile is resumed), ``workers`` extraction workers, each with its own store and host leases."""

    settings: Settings
    profile: SiteProfile
    workers: int = 1
    extractor: ExtractorHook | None = None
    on_progress: ProgressCallback | None = None

    async def discover(self, *, refresh: bool, cycle: CycleState | None = None) -> PhaseResult:
        run_id = await begin_run(self.settings, "discover", self.profile)
        try:
            async with open_store(self.settings) as store:
                part = await discover(store, self.settings, self.profile, run_id=run_id, refresh=refresh,
                                      cycle=cycle)
        except Exception as failed:  # as ``extract``: a stop leaves the run to be resumed
            await finish_failed(self.settings, run_id, failed)
            raise
        result, _ = await finish_run(self.settings, run_id, "discover", [part])
        return result

    def recorded(self, run: dict[str, Any]) -> PhaseResult:
        return PhaseResult.from_dict({"phase": "discover", **run})

    async def extract(self, *, cycle: CycleState | None = None) -> PhaseResult:
        run_id = await begin_run(self.settings, "extract", self.profile)
        try:
            # A failed worker cancels the others: they wind down, nothing is lost. The process's stop cancels none:
            # each drains its requests in flight (cancelled, their answers were lost and a rerun fetched them again).
            parts = await siblings({f"extract-{n}": self._worker(run_id, n, cycle)
                                    for n in range(max(1, self.workers))})
        except Interrupted as stopped:  # left to be resumed, with what it did kept for ``status``
            await note_stopped(self.settings, run_id, stopped)
            raise
        except Exception as failed:
            await finish_failed(self.settings, run_id, failed)
            raise
        result, _ = await finish_run(self.settings, run_id, "extract", parts)
        return result

    async def _worker(self, run_id: int, worker: int, cycle: CycleState | None) -> PhaseResult:
        async with open_store(self.settings) as store:
            return await extract(store, self.settings, self.profile, run_id=run_id, worker=worker,
                                 on_progress=self.on_progress, extractor=self.extractor, cycle=cycle)


async def aharvest(
    settings: Settings, profile: SiteProfile, *, workers: int = 1, extractor: ExtractorHook | None = None,
    on_progress: ProgressCallback | None = None,
) -> Cycle[PhaseResult]:
    """``harvest`` as a coroutine, for a caller that already runs an event loop."""
    resolve_hook(profile.extractor, extractor)  # a bad hook is refused before the site is asked anything
    return loud(await harvest_steps(LocalSteps(settings, profile, workers, extractor, on_progress), settings, profile))


async def arecrawl(
    settings: Settings, profile: SiteProfile, *, refresh: bool = False, workers: int = 1,
    extractor: ExtractorHook | None = None, on_progress: ProgressCallback | None = None,
) -> Cycle[PhaseResult]:
    """``recrawl`` as a coroutine, for a caller that already runs an event loop."""
    resolve_hook(profile.extractor, extractor)
    return loud(await recrawl_steps(LocalSteps(settings, profile, workers, extractor, on_progress), settings,
                                     profile, refresh=refresh))


def loud(cycle: Cycle[T]) -> Cycle[T]:
    """The cycle, unless it fetched nothing (``NothingFetched``), its extractor hook failed on every page
    (``ExtractorFailed``) or every page request it sent failed (``EveryRequestFailed``); its record is already in
    the frontier."""
    if cycle.silent is not None:
        raise NothingFetched(cycle.silent)
    counters = getattr(cycle.extract, "counters", cycle.extract)  # a PhaseResult, or the flows' counters dict
    if isinstance(counters, Mapping) and (failed := hook_failed_everywhere(counters)) is not None:
        raise ExtractorFailed(failed)
    if (unanswered := every_request_failed(cycle.changes)) is not None:
        raise EveryRequestFailed(unanswered)
    return cycle


SHOWN_IN_FAILURE = 3
"""Failed URLs the message of ``EveryRequestFailed`` names (all the cycle's examples: ``status``, the artifact)."""


def every_request_failed(changes: Mapping[str, Any]) -> str | None:
    """Why the cycle failed when it sent page requests (detail and listing pages, every attempt of the cycle) and
    every one failed (``failed == fetched > 0``); None when none was sent or any was answered usefully: a page
    (2xx), a 304, a 404/410, a redirect (even one not followed), a page the hook failed on (``ExtractorFailed``'s
    case). A cycle where some requests failed is the pages' problem, reported by the counts; all of them failing
    is the run's: the site answered robots.txt or a sitemap but no page (5xx everywhere, timeouts, a 403)."""
    fetched, failed = int(changes.get("fetched") or 0), int(changes.get("failed") or 0)
    if not fetched or failed < fetched:
        return None
    failures = ", ".join(f"{name}={n}" for name, n in sorted((changes.get("failures") or {}).items()))
    examples = [f"{row['url']} ({row['reason']})" for row in (changes.get("failed_urls") or [])[:SHOWN_IN_FAILURE]]
    more = int(changes.get("failed_url_count") or 0) - len(examples)
    named = "; failed: " + ", ".join(examples) + (f" and {more} more (harvester status)" if more > 0 else "")
    return (f"every page request failed: {failed} of {fetched}" + (f" ({failures})" if failures else "")
            + ", none answered with a page, a 304 or a 404/410" + (named if examples else "")
            + ". Check the site (its logs, whether it blocks this crawler), then run again: the pages are retried")


async def extraction_failure(settings: Settings, run_id: int) -> str | None:
    """``every_request_failed`` for one extraction run on its own (``harvester extract``, the extract flow started
    alone), from its fetch log: the rule harvest and recrawl follow. It exited 0 when every page request failed."""
    async with open_store(settings) as store:
        per_host = await db(store.run_fetch_counts, run_id)
    totals: dict[str, int] = {}
    for counts in per_host.values():
        for key, n in counts.items():
            totals[key] = totals.get(key, 0) + n
    failures = {key[len("error:"):]: n for key, n in totals.items() if key.startswith("error:")}
    return every_request_failed({"fetched": totals.get("fetched", 0), "failed": totals.get("failed", 0),
                                 "failures": failures})


def cycle_failure(cycle: Cycle[Any]) -> str | None:
    """Why the cycle counts as failed (nothing fetched, or every page request failed); None when it did not."""
    return cycle.silent if cycle.silent is not None else every_request_failed(cycle.changes)


def harvest(
    settings: Settings, profile: SiteProfile, *, workers: int = 1, extractor: ExtractorHook | None = None,
    on_progress: ProgressCallback | None = None,
) -> Cycle[PhaseResult]:
    """Harvest one site into the frontier at ``settings.database_url``: discover its URLs, then fetch the pages.

    Blocks until done, in an event loop of its own (see the module docstring for why; inside a running loop,
    ``await aharvest(...)``). Rerunning it resumes an interrupted harvest and fetches nothing already stored
    again. ``extractor`` is a callable given each ``Page`` (``harvester.extraction.Page``) whose JSON-able
    fields are stored with it, the alternative to naming one in ``profile.extractor`` (not both). Read the
    pages back with ``FrontierStore.open(settings).iter_pages()``. Raises ``NothingFetched`` when no seed host
    answered anything (down, or a wrong seed): a harvest of nothing is an error, not an empty success.
    """
    return _run(aharvest(settings, profile, workers=workers, extractor=extractor, on_progress=on_progress),
                "harvest")


def recrawl(
    settings: Settings, profile: SiteProfile, *, refresh: bool = False, workers: int = 1,
    extractor: ExtractorHook | None = None, on_progress: ProgressCallback | None = None,
) -> Cycle[PhaseResult]:
    """Re-crawl a harvested site: unchanged sitemaps and pages cost 304s, changed and new pages are fetched.

    What the daily schedule runs; ``refresh`` treats everything as due now (still conditionally). The result's
    ``changes`` says which URLs appeared and vanished. Blocks like ``harvest``; ``arecrawl`` is the coroutine.
    """
    return _run(arecrawl(settings, profile, refresh=refresh, workers=workers, extractor=extractor,
                         on_progress=on_progress), "recrawl")


def _run(cycle: Coroutine[Any, Any, T], name: str) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop running: the usual case, run outside this handler (a failure's traceback is not chained to it)
    else:
        cycle.close()
        raise HarvesterError(
            f"{name}() runs an event loop of its own and cannot be called inside a running one (an async function, "
            f"a notebook): use `await a{name}(...)` there"
        )
    return asyncio.run(cycle)
