"""Runs of one site never overlap (issue 23): a harvest and a re-crawl of one site started together run one after
the other (the late one waits for the site's slot), while a run of another site is not held up."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from conftest import child_runs, prepared
from test_shutdown import run_logs

from harvester.flows.site_slot import limit_name
from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec


async def span(flow_run_id: Any) -> tuple[Any, Any]:
    """When the run's phases (its subflows) began and ended: the cycle itself, not the wait before it."""
    children = await child_runs(flow_run_id)
    assert children, "the cycle ran no phase"
    return min(c.start_time for c in children), max(c.end_time for c in children)


async def test_two_runs_of_one_site_started_together_never_run_at_once(prefect_api, make_web, sqlite_url, tmp_path):
    from prefect import get_client
    from prefect.logging.handlers import APILogWorker

    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

    web = make_web([HostSpec("a", pages=30, latency_s=0.01), HostSpec("b", pages=20, latency_s=0.01)], seed=61)
    overrides = prepared(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="together")
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = errors.append  # type: ignore[method-assign]
    watched = [logging.getLogger(name) for name in ("prefect", "prefect._internal")]  # the second propagates not
    for logger in watched:
        logger.addHandler(handler)
    try:
        first, second = await asyncio.gather(
            harvest_flow(profile, workers=3, overrides=overrides, return_state=True),
            recrawl_flow(profile, overrides=overrides, return_state=True),
        )
    finally:
        for logger in watched:
            logger.removeHandler(handler)
    # The late run's wait is an expected one: before, Prefect logged an ERROR with a TimeoutError for it.
    assert not [r for r in errors if "TimeoutError" in r.getMessage() or r.exc_info], [r.getMessage() for r in errors]
    assert first.is_completed() and second.is_completed(), (first, second)
    spans = sorted([await span(first.state_details.flow_run_id), await span(second.state_details.flow_run_id)])
    assert spans[0][1] <= spans[1][0], f"the two runs overlapped: {spans}"
    assert duplicates(web.records()) == {}
    # One log line per host per extraction run, whichever of its 3 workers served the host (before: each worker
    # logged every host's line).
    await APILogWorker.drain_all(timeout=10)  # the logs of this process's runs, sent
    origins = sorted(seed.rstrip("/") for seed in web.seeds)
    for child in await child_runs(first.state_details.flow_run_id):
        if child.name.startswith("extract-"):
            lines = [line for line in (await run_logs(child.id)).splitlines() if " fetched=" in line]
            assert sorted(line.split()[0] for line in lines) == origins, lines
    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(limit_name("together"))
    assert limit.limit == 1 and limit.active_slots == 0  # held while a run ran, free once both ended
