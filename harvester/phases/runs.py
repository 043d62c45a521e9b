"""Run and cycle bookkeeping around the phases: a run per phase (resumed when unfinished), a cycle per harvest
or re-crawl, and what every phase does before its hosts (dead holders' leases back, learned shapes relearned).

Each function opens the frontier for itself (``open_store``): the flows call them as separate Prefect tasks, so
none may hold a store another task opened.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from harvester.errors import FrontierBusy
from harvester.frontier import FrontierStore
from harvester.owners import make_owner
from harvester.phases.host_policy import end_cycle_parks
from harvester.phases.results import PhaseResult
from harvester.rules.admission import Site
from harvester.runtime import db, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import Changes

logger = logging.getLogger(__name__)


@asynccontextmanager
async def open_store(settings: Settings) -> AsyncIterator[FrontierStore]:
    """The frontier of ``settings``, opened off the event loop (opening may migrate or wait on a lock) and closed
    when the block ends: the one way the phases, the cycle and the CLI open a store of their own."""
    with await db(FrontierStore.open, settings) as store:
        yield store


async def recover_leases(store: FrontierStore) -> int:
    """The crash-resume path: expired leases and leases of dead processes (``store.liveness``) go back to the
    queue."""
    recovered = await db(store.requeue_expired)
    for owner in await db(store.liveness.dead_of, await db(store.lease_owners)):
        recovered += await db(store.release_owner, owner)
    if recovered:
        logger.info("requeued %d URLs whose lease holder died or expired", recovered)
    return recovered


async def release_dead_holders(store: FrontierStore, owner: str, hosts: Sequence[str]) -> int:
    """Hosts of ``hosts`` leased by a process known dead (``store.liveness``: of this machine on SQLite, of any on
    PostgreSQL) go back now: a worker's look for hosts asks this, so a killed worker's hosts are taken while the
    survivors still serve their own, not once their round ends (its hosts sat idle 36-43 s beside three workers)
    or its lease runs out (300 s)."""
    recovered = 0
    for holder in await db(store.liveness.dead_of, await db(store.host_holders, owner, hosts=hosts)):
        recovered += await db(store.release_owner, holder)
        logger.info("took back the hosts of %s, a dead process", holder)
    return recovered


async def teach_classifier(store: FrontierStore, site: Site) -> None:
    """Detail URL shapes learned from what the frontier already holds, so outlinks are classified like discovery."""
    site.classifier.learn_details(await db(store.sample_urls, kind="detail", limit=5_000))


def site_hosts(settings: Settings, profile: SiteProfile) -> list[str]:
    """The seed origins of a profile: discovery runs one task per host."""
    return Site(settings, profile).origins


async def site_origins(settings: Settings, profile: SiteProfile) -> list[str]:
    """Every host of the frontier that is the profile's (its seeds', those they moved to, those its scope takes in):
    what a run's own artifacts count on a frontier several sites share (``Site.owns``, as extraction takes them)."""
    site = Site(settings, profile, keep_reports=False)
    async with open_store(settings) as store:
        site.add_moved(await db(store.moved_hosts))
        origins = await db(store.host_origins)
    return sorted(origin for origin in origins if site.owns(origin))


async def begin_run(settings: Settings, phase: str, profile: SiteProfile) -> int:
    """The run this phase belongs to: an unfinished run of the same phase, profile and User-Agent is resumed. It
    records the User-Agent its client sends (``polite_client``: the profile's, else the settings'), which the WARC
    export writes into the run's request records. An extraction first queues the profile's failed URLs and
    duplicates whose recheck time has come (``FrontierStore.requeue_rechecks``): no URL is done with for good while
    the site may still serve it."""
    async with open_store(settings) as store:
        if phase == "extract":
            requeued = await db(store.requeue_rechecks, site_hosts(settings, profile))
            if requeued:
                logger.info("%d failed or duplicate URLs due again", requeued)
        return await db(
            store.resume_or_start_run, phase, profile=profile.model_dump(mode="json"), owner=make_owner(phase),
            user_agent=profile.user_agent or settings.http.user_agent,
        )


async def finish_run(
    settings: Settings, run_id: int, phase: str, parts: Iterable[PhaseResult | dict[str, Any]]
) -> tuple[PhaseResult, dict[str, Any]]:
    """Merge the tasks' counters, close the run, and return them with the frontier's stats.

    An extraction's per-host ``fetched``, ``not_modified``, ``gone``, ``errors`` and ``bytes`` are its own
    requests', read from the frontier, on every host of its line (one it never asked: none): the polite client's
    diagnostics also count what discovery asked through it when a cycle shares it (robots.txt, sitemaps and their
    probes, listing pages)."""
    result = PhaseResult.merge(phase, parts)
    result.run_id = run_id
    async with open_store(settings) as store:
        if phase == "extract":
            own = await _requests_per_host(store, run_id)
            for origin in {*result.hosts, *own}:
                result.hosts.setdefault(origin, {}).update(own.get(origin) or _requests({}))
        await db(store.finish_run, run_id, status="completed", counters=result.as_dict())
        stats = (await db(store.stats)).as_dict()
    return result, stats


FINISH_FAILED_S = 15.0
"""How long a failed phase tries to mark its run row failed before it fails with its own error."""

FAILED_ERROR_CHARS = 500
"""The most of a failed run's error kept in its row (as a completion's): a message may carry a whole response or
statement, and ``harvester status`` shows it on one line."""


async def finish_failed(settings: Settings, run_id: int, error: Exception) -> None:
    """Close a phase's run row as failed, with the error and the page requests it sent per host (as ``finish_run``
    counts an extraction's). Left ``running``, it was never the last run of its phase ``harvester status`` shows:
    that was the run before, as if this one had not happened. A store that cannot be written (the failure may be the
    database itself) leaves the row as it was, and the log says so; the caller fails with its own error either way,
    within ``FINISH_FAILED_S`` (a store that is away would otherwise be waited on for minutes, ``runtime.db``). A stop
    (``Interrupted``) is no failure: its row stays for the rerun to resume. Nor is ``FrontierBusy``: this run never
    started, and the unfinished row it resumed (``begin_run``) may be that of the extraction holding the frontier."""
    if isinstance(error, FrontierBusy):
        return
    try:
        async with asyncio.timeout(FINISH_FAILED_S), open_store(settings) as store:
            hosts = await _requests_per_host(store, run_id)
            said = f"{type(error).__name__}: {error}"
            await db(store.finish_run, run_id, status="failed",
                     counters={"error": said[:FAILED_ERROR_CHARS], "hosts": hosts})
    except Exception as unwritten:  # the run's own error is the one to raise (TimeoutError included)
        logger.warning("run %d failed, and could not be marked failed: %s", run_id, unwritten)


async def note_stopped(settings: Settings, run_id: int, stop: BaseException) -> None:
    """Keep on a stopped extraction's row (``Interrupted``: a SIGTERM, an orchestrator's stop) why it stopped and
    the page requests it sent per host, leaving it unfinished for the rerun to resume: ``harvester status`` showed
    the day before's "Last extraction" after a stop, as if the stopped run had asked nothing. Best effort, within
    ``FINISH_FAILED_S``: the stop is what the caller raises either way."""
    try:
        async with asyncio.timeout(FINISH_FAILED_S), open_store(settings) as store:
            hosts = await _requests_per_host(store, run_id)
            said = str(stop) or type(stop).__name__
            await db(store.stop_run, run_id, counters={"stopped": said[:FAILED_ERROR_CHARS], "hosts": hosts})
    except Exception as unwritten:
        logger.warning("run %d stopped, and what it did could not be kept: %s", run_id, unwritten)


async def _requests_per_host(store: FrontierStore, run_id: int) -> dict[str, dict[str, Any]]:
    """An extraction run's own requests per host, from the fetch log: fetched, not modified, gone, errors by class,
    and the body bytes their answers carried (``bytes``: the client's own tally counted discovery's too)."""
    return {origin: _requests(counts) for origin, counts in (await db(store.run_fetch_counts, run_id)).items()}


def _requests(counts: dict[str, int]) -> dict[str, Any]:
    return {"fetched": counts.get("fetched", 0), "not_modified": counts.get("not_modified", 0),
            "failed": counts.get("failed", 0),
            "gone": counts.get("gone", 0), "bytes": counts.get("bytes", 0),
            "errors": {key[6:]: n for key, n in counts.items() if key.startswith("error:")}}


async def mark_due(settings: Settings, profile: SiteProfile) -> datetime:
    """Make every known URL and discovery document of the profile's hosts due now (still conditional)."""
    now = utcnow()
    async with open_store(settings) as store:
        await db(store.make_due, site_hosts(settings, profile), now=now)
    return now


async def begin_cycle(settings: Settings, kind: str, profile: SiteProfile) -> tuple[int, datetime, bool]:
    """(cycle id, its start, resumed): the unfinished cycle of ``kind`` and profile an earlier attempt left (killed,
    failed, retried), else a new one. Every phase run started meanwhile belongs to it."""
    async with open_store(settings) as store:
        cycle_id, resumed = await db(store.begin_cycle, kind, profile=profile.model_dump(mode="json"))
        started = await db(store.cycle_started_at, cycle_id)
        if not resumed:  # a park lasts for the rest of its cycle: a new one asks every host again
            seeds = site_hosts(settings, profile)
            moved = await db(store.moved_hosts)
            await end_cycle_parks(store, [*seeds, *(moved[o] for o in seeds if o in moved)])
    return cycle_id, started or utcnow(), resumed


async def finished_discovery(settings: Settings, cycle_id: int) -> dict[str, Any] | None:
    """The counters of the cycle's discovery when it completed before the cycle was interrupted (killed during
    extraction), else None: a rerun resumes such a cycle at its extraction, and asks no robots.txt or sitemap again
    (docs/operations.md §4b: a rerun repeats only what was in flight)."""
    async with open_store(settings) as store:
        run = await db(store.completed_run, cycle_id, "discover")
    return None if run is None else dict(run["counters"] or {}, run_id=run["id"])


async def close_cycle(settings: Settings, cycle_id: int, origins: Sequence[str], *, failed: bool) -> Changes:
    """Close the cycle and read its counts (``FrontierStore.cycle_counts``: the one source of what it reports)."""
    async with open_store(settings) as store:
        await db(store.finish_cycle, cycle_id, origins=origins, status="failed" if failed else "completed")
        return await db(store.cycle_counts, cycle_id)


async def silence(settings: Settings, profile: SiteProfile, since: datetime) -> str | None:
    """Why a cycle begun at ``since`` counts as having fetched nothing, or None when some seed host answered.

    Asked and silent (every seed host down, refused or not a web server, like an unedited placeholder seed) is
    a failure; so is a frontier that never got an answer from any of them. A cycle that asked nothing of hosts
    that answered before (everything cached and not yet due) is not."""
    origins = site_hosts(settings, profile)
    async with open_store(settings) as store:
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
