"""A run whose runner dies stops fetching, ends Crashed and is retried by itself (issues 24 item 4 and 23).

``harvester serve`` is killed with SIGKILL mid-extraction. Before: its flow-run process went on fetching (1,302
pages in 8 s), the run stayed Running, and nothing retried it. Now the orphan notices within a second, sends no
new request, writes what was answered, hands its leases back and ends Crashed; the retry automation that serve
created schedules the run again, and a restarted serve completes it from the frontier with no page fetched twice.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import VENV_BIN, prepared, stop_group
from test_serve import deployment, finished
from test_shutdown import harvest_on_pool, run_processes, under_way

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

STATE_WAIT_S = 60.0
STOPS_WITHIN_S = 3.0


def start_serve(env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(  # our own console script, no shell
            [str(VENV_BIN / "harvester"), "serve", "http://127.0.0.1:9/", "--name", "lifeline"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
        )


async def state_of(flow_run_id: Any) -> Any:
    from prefect import get_client

    async with get_client() as client:
        return (await client.read_flow_run(flow_run_id)).state


async def wait_for(flow_run_id: Any, predicate: Any, what: str, log: Path) -> Any:
    deadline = time.monotonic() + STATE_WAIT_S
    while True:
        state = await state_of(flow_run_id)
        if state is not None and predicate(state):
            return state
        assert time.monotonic() < deadline, f"never {what} (still {state}):\n{log.read_text()[-3000:]}"
        await asyncio.sleep(0.5)


async def test_a_killed_runners_run_stops_fetching_crashes_and_is_retried_to_completion(
    prefect_api, make_web, sqlite_url, tmp_path
):
    from prefect import get_client

    web = make_web([HostSpec("k", pages=60, latency_s=0.15), HostSpec("l", pages=50, latency_s=0.15)], seed=71)
    prepared(sqlite_url)
    env = {**prefect_api, "HARVESTER_DATABASE_URL": sqlite_url, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    log = tmp_path / "serve.log"
    serve = start_serve(env, log, tmp_path)
    try:
        await deployment("harvest/lifeline-serve", serve, log)  # serve has made it
        created = await harvest_on_pool(web, "harvest/lifeline-serve", name="lifeline")
        details = {url for name in ("k", "l") for url in web.truth[name].detail_urls()}

        def detail_requests() -> int:
            return sum(1 for r in web.records() if r.url in details)

        await under_way(web, 10, serve, log)
        assert run_processes(created.id), "control: the run's process is found, so its end can be waited for"
        os.kill(serve.pid, signal.SIGKILL)  # the runner only: its flow-run process is left an orphan
        killed_at = time.monotonic()  # the test web stamps requests with this same system-wide clock
        serve.wait()

        crashed = await wait_for(created.id, lambda s: not s.is_running(), "left Running", log)
        # The orphan's end is waited for, not guessed (5 s of sleeps did): once its process is gone it sends
        # nothing, so every request it sent is older than the restart below, and is judged at the end.
        deadline = time.monotonic() + STATE_WAIT_S
        while run_processes(created.id):
            assert time.monotonic() < deadline, f"the orphan never ended:\n{log.read_text()[-3000:]}"
            await asyncio.sleep(0.2)
        assert crashed.is_crashed() or crashed.is_scheduled(), crashed  # Crashed, or already scheduled again

        await wait_for(created.id, lambda s: s.is_scheduled(), "scheduled again by the retry automation", log)
        restarted_at = time.monotonic()  # the test web stamps requests with this same system-wide clock
        assert detail_requests() > 0  # control: the orphan had fetched
        serve = start_serve(env, log, tmp_path)
        run = await finished(created.id, log)
        assert run.state.is_completed(), f"{run.state}:\n{log.read_text()[-3000:]}"
        assert run.run_count >= 2, run.run_count
    finally:
        stop_group(serve)
        async with get_client() as client:  # the server is shared: leave no deployment of ours to other tests
            for name in ("harvest/lifeline-serve", "recrawl/lifeline-serve"):
                await client.delete_deployment((await client.read_deployment_by_name(name)).id)

    # The orphan sent its last request within about a second of the kill (a pidfd, at once; the bound leaves
    # room for a loaded machine), and nothing after it: every request before the restart is the orphan's or older.
    last = max(r.start for r in web.records() if r.url in details and r.start < restarted_at)
    assert last - killed_at <= STOPS_WITHIN_S, f"requests went on {last - killed_at:.1f} s after the kill"
    assert duplicates(web.records()) == {}
    with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
        states = store.url_states()
    for name in ("k", "l"):
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls())


async def test_serve_stopped_with_sigterm_stops_its_run_gracefully(prefect_api, make_web, sqlite_url, tmp_path):
    """systemctl stop of `harvester serve` (SIGTERM to serve alone): its run drains and ends within seconds with
    the reason, no task run left Running; before, Prefect's runner killed it mid-answer."""
    from prefect import get_client
    from test_shutdown import FINAL_WITHIN_S, run_logs, settled_running_task_runs

    web = make_web([HostSpec("u", pages=60, latency_s=0.15)], seed=72)
    prepared(sqlite_url)
    env = {**prefect_api, "HARVESTER_DATABASE_URL": sqlite_url}
    log = tmp_path / "serve.log"
    serve = start_serve(env, log, tmp_path)
    try:
        await deployment("harvest/lifeline-serve", serve, log)  # serve has made it
        created = await harvest_on_pool(web, "harvest/lifeline-serve", name="lifeline")
        await under_way(web, 6, serve, log)
        os.kill(serve.pid, signal.SIGTERM)
        deadline = time.monotonic() + FINAL_WITHIN_S
        while not ((state := await state_of(created.id)).is_final() or state.is_scheduled()):
            assert time.monotonic() < deadline, f"still {state}:\n{log.read_text()[-3000:]}"
            await asyncio.sleep(0.25)
        serve.wait(timeout=30)
        said = await run_logs(created.id)
        assert "stopping (no new request" in said, (state, said)
        assert await settled_running_task_runs(created.id) == []
    finally:
        stop_group(serve)
        async with get_client() as client:
            for name in ("harvest/lifeline-serve", "recrawl/lifeline-serve"):
                await client.delete_deployment((await client.read_deployment_by_name(name)).id)
