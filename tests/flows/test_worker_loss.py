"""A run on a process work pool whose worker is killed outright, or which is cancelled from Prefect, stops the way a
SIGTERM stops it (issue 47): no new request, answers in flight written, the extraction's row marked stopped.

Before: a worker killed with SIGKILL left its run's engine crawling on (the worker's command between them, which the
engine watched, outlived the worker): every page fetched after the kill and the run Completed. A cancellation
threw the answers in flight away (the rerun fetched them again), left the ``runs`` row ``running`` with no stop
mark, and filled the worker's log with ``CancelledError`` tracebacks.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from conftest import stop_group
from test_shutdown import (
    WAIT_S,
    harvest_on_pool,
    harvesting_on_a_worker,
    run_logs,
    run_processes,
    start_worker,
    wait_for,
)

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import duplicates

CANCELLED = "this run was cancelled from Prefect"
"""How the run's logs, its state and its extraction's row say it was cancelled."""

STOPS_WITHIN_S = 3.0
"""The engine sees its worker's end at once (a pidfd); the bound leaves room for a loaded machine and for one
answer's time: a request sent just before the kill may start its answer after it."""


def detail_urls(web: TestWeb) -> set[str]:
    return {url for name in web.names for url in web.truth[name].detail_urls()}


async def processes_gone(flow_run_id: Any) -> None:
    """Wait for every process of the run to end: once gone it sends nothing, so what it sent can be judged."""
    deadline = time.monotonic() + WAIT_S
    while run_processes(flow_run_id):
        assert time.monotonic() < deadline, run_processes(flow_run_id)
        await asyncio.sleep(0.2)


def assert_all_done(web: TestWeb, db_url: str) -> None:
    with FrontierStore.open(Settings.load(database_url=db_url)) as store:
        states = store.url_states()
    for name in web.names:
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls())


async def test_a_worker_killed_outright_stops_its_runs_crawl_which_crashes_and_is_retried(
    pool, prefect_api, make_web, sqlite_url, tmp_path
):
    web = make_web([HostSpec("g", pages=60, latency_s=0.15), HostSpec("h", pages=50, latency_s=0.15)], seed=47)
    details = detail_urls(web)
    worker, created, log, mine = await harvesting_on_a_worker(pool, web, sqlite_url, tmp_path, pages=10)
    try:
        assert len(run_processes(created.id)) == 2  # control: the worker's command, and the engine it started
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone: its command and the engine are left behind
        killed_at = time.monotonic()  # the test web stamps requests with this same system-wide clock
        worker.wait()
        ended = await wait_for(created.id, lambda s: not s.is_running(), "left Running", log)
        await processes_gone(created.id)  # waited for, not timed
        assert ended.state.is_crashed() or ended.state.is_scheduled(), ended.state  # Crashed, or already retried
        said = await run_logs(created.id)
        assert f"the worker that started this run (pid {worker.pid}) is gone: stopping (no new request" in said, said

        await wait_for(created.id, lambda s: s.is_scheduled(), "scheduled again by the retry automation", log)
        restarted_at = time.monotonic()
        worker = start_worker(pool, log, **mine)
        done = await wait_for(created.id, lambda s: s.is_final(), "finished", log)
        assert done.state.is_completed(), done.state
        assert done.run_count >= 2, done.run_count
    finally:
        stop_group(worker)
    before = [r.start for r in web.records() if r.url in details and r.start < restarted_at]
    print(f"last request {max(before) - killed_at:.2f} s after the kill, {len(before)} before the restart")
    assert max(before) - killed_at <= STOPS_WITHIN_S, f"requests went on {max(before) - killed_at:.1f} s after"
    assert duplicates(web.records()) == {}
    assert_all_done(web, sqlite_url)


async def test_a_run_cancelled_from_prefect_stops_gracefully_and_a_new_run_fetches_nothing_twice(
    pool, prefect_api, make_web, sqlite_url, tmp_path
):
    from prefect import get_client
    from prefect.client.schemas.objects import StateType
    from prefect.states import State

    web = make_web([HostSpec("c", pages=60, latency_s=0.15), HostSpec("d", pages=50, latency_s=0.15)], seed=48)
    worker, created, log, _mine = await harvesting_on_a_worker(pool, web, sqlite_url, tmp_path, pages=10)
    try:
        async with get_client() as client:  # what `prefect flow-run cancel` and the UI's Cancel do
            await client.set_flow_run_state(created.id, State(type=StateType.CANCELLING))
        ended = await wait_for(created.id, lambda s: s.is_final(), "ended", log)
        await processes_gone(created.id)
        assert ended.state.is_cancelled(), ended.state
        assert CANCELLED in (ended.state.message or ""), ended.state  # not Prefect's bare "cancelled successfully"
        said = await run_logs(created.id)
        assert f"{CANCELLED} (the UI, the API or `prefect flow-run cancel`): stopping (no new request" in said, said
        assert "CancelledError" not in log.read_text()  # Prefect's cancel left ~150 lines of tracebacks there
        with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
            stopped = store.last_run("extract", stopped=True)
        assert stopped is not None and stopped["status"] == "running", stopped  # left for the next run to resume
        assert CANCELLED in (stopped["counters"] or {}).get("stopped", ""), stopped

        again = await harvest_on_pool(web, queue=pool["queue"])  # the operator's next run resumes the cycle
        done = await wait_for(again.id, lambda s: s.is_final(), "finished", log)
        assert done.state.is_completed(), done.state
    finally:
        stop_group(worker)
    assert duplicates(web.records()) == {}
    assert_all_done(web, sqlite_url)
