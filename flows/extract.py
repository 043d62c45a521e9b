"""extract_flow: phase two, a few workers that lease hosts and fetch their due URLs politely."""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger

from harvester import phases
from harvester.errors import EveryRequestFailed, Interrupted
from harvester.flows.artifacts import publish, site_scope, start_progress
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.tasks import extract_worker, host_line, load_settings, run_profile
from harvester.phases.cycle_state import CycleState, find_cycle
from harvester.phases.cycles import extraction_failure
from harvester.runtime import shared_as, siblings
from harvester.site_profile import SiteProfile


@flow(name="extract", flow_run_name="extract-{profile.name}", validate_parameters=True)
async def extract_flow(
    profile: SiteProfile, workers: Workers = 1, config_file: str | None = None, overrides: RunOverrides | None = None,
    handover: str | None = None,
) -> dict[str, Any]:
    """Fetch what is due. Workers hold host leases, so each host is served by one of them at a time.
    ``handover`` is set by the harvest and recrawl flows (the key of the cycle's state, ``phases.cycle_state``);
    leave it empty. Without one, the run keeps a state of its own: its tasks' retries find what an earlier attempt
    could not write."""
    settings = load_settings(config_file, overrides)
    profile = run_profile(profile, overrides)
    run_id = await phases.begin_run(settings, "extract", profile)
    progress_id = await start_progress("extract")
    cycle = find_cycle(handover) or CycleState()  # none given, or its cycle runs elsewhere: not pipelined
    with shared_as(cycle.key, cycle) as key:

        async def worker(n: int) -> dict[str, Any]:
            return await extract_worker(profile, n, run_id, progress_id, config_file, overrides, key)

        # A worker that fails (its retries spent) cancels the others, each winding down as a stopped run does (what
        # was answered is written, its leases go back: a rerun repeats only what was in flight), and the flow fails
        # with that first error. ``asyncio.gather`` left them fetching and holding their hosts after the flow ended.
        # The process's stop cancels none: each drains its requests in flight (cancelled when the first worker
        # ended with the stop, their answers were lost and the rerun fetched them again).
        try:
            results = await siblings({f"extract-{n}": worker(n) for n in range(max(1, workers))})
        except Interrupted as stopped:  # left to be resumed, with what it did kept for ``status``
            await phases.note_stopped(settings, run_id, stopped)
            raise
        except Exception as failed:
            await phases.finish_failed(settings, run_id, failed)
            raise
    result, stats = await phases.finish_run(settings, run_id, "extract", results)
    logger = get_run_logger()
    for origin, host in sorted(result.hosts.items()):  # one line per host per run, whichever worker served it
        logger.info("%s", host_line(origin, host))
    await publish(result, title=f"Extraction of {profile.name}", run_id=run_id, stats=stats,
                  hosts=await site_scope(settings, profile))
    # Started alone, it fails as a harvest does when every page request it sent failed; within a cycle, the cycle
    # judges all of its requests (a harvest's flow raises that after closing the cycle).
    if handover is None and (unanswered := await extraction_failure(settings, run_id)) is not None:
        raise EveryRequestFailed(unanswered)
    return result.counters
