"""extract_flow: phase two, a few workers that lease hosts and fetch their due URLs politely."""

from __future__ import annotations

import asyncio
from typing import Any

from prefect import flow, get_run_logger

from harvester import phases
from harvester.flows.artifacts import publish, start_progress
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.tasks import extract_worker, host_line, load_settings, run_profile
from harvester.phases.cycle_state import CycleState, find_cycle
from harvester.runtime import db, shared_as, task_group
from harvester.settings import Settings
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
        try:
            async with task_group() as tasks:
                runs = [tasks.create_task(worker(n), name=f"extract-{n}") for n in range(max(1, workers))]
        except Exception as failed:  # a stop (``Interrupted``, a BaseException) leaves the run to be resumed
            await _finish_failed(settings, run_id, failed)
            raise
        results = [run.result() for run in runs]
    result, stats = await phases.finish_run(settings, run_id, "extract", results)
    logger = get_run_logger()
    for origin, host in sorted(result.hosts.items()):  # one line per host per run, whichever worker served it
        logger.info("%s", host_line(origin, host))
    await publish(result, title=f"Extraction of {profile.name}", run_id=run_id, stats=stats)
    return result.counters


FINISH_FAILED_S = 15.0
"""How long a failed extraction tries to mark its run row failed before it fails with its own error."""


async def _finish_failed(settings: Settings, run_id: int, error: Exception) -> None:
    """Close the run row as failed, with the error and the requests it sent per host (as ``finish_run`` counts
    them). Left ``running``, it was never the last extraction ``harvester status`` shows: that was the run before,
    as if this one had not happened. A store that cannot be written (the failure may be the database itself)
    leaves the row as it was, and the run's logs say so; the flow fails with its own error either way, within
    ``FINISH_FAILED_S`` (a store that is away would otherwise be waited on for minutes, ``runtime.db``)."""
    try:
        async with asyncio.timeout(FINISH_FAILED_S), phases.open_store(settings) as store:
            sent = await db(store.run_fetch_counts, run_id)
            hosts = {origin: {"fetched": counts.get("fetched", 0), "not_modified": counts.get("not_modified", 0),
                              "gone": counts.get("gone", 0),
                              "errors": {key[6:]: n for key, n in counts.items() if key.startswith("error:")}}
                     for origin, counts in sent.items()}
            await db(store.finish_run, run_id, status="failed",
                     counters={"error": f"{type(error).__name__}: {error}", "hosts": hosts})
    except Exception as unwritten:  # the flow's own error is the one to raise (TimeoutError included)
        get_run_logger().warning("extraction run %d failed, and could not be marked failed: %s", run_id, unwritten)
