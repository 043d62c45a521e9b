"""A worker killed outright before its run's flow began (ops48 item 3): the run ends Crashed saying so, and is
retried like any crash.

Before: ``kill -9 -- -<worker's group>`` about 5 s after the worker picked a run up left the run's engine (its own
session) alive; it ran the deployment's pull step, then ended without a word, and the run stayed Pending
(Submitting) for ever: no process of it was left to report, no worker picks up a Pending run, and the
heartbeat automation watches Running runs only.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from conftest import prepared, stop_group
from test_shutdown import WAIT_S, catches_sigterm, run_logs, run_processes, start_worker, wait_for
from test_worker_loss import processes_gone

from harvester.testing import HostSpec


def engine_of(flow_run_id: object) -> int | None:
    """The run's engine process (``harvester.flows.engine --engine``), once its first line has run."""
    for pid in run_processes(flow_run_id):
        try:
            if b"--engine" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") and catches_sigterm(pid):
                return pid
        except OSError:
            continue
    return None


async def test_a_worker_killed_before_its_runs_flow_began_leaves_the_run_crashed_and_retried(
    pool, prefect_api, make_web, sqlite_url, tmp_path
):
    from prefect import get_client

    from harvester.flows.healing import ensure_healing

    await ensure_healing()
    web = make_web([HostSpec("e", pages=10, latency_s=0.05)], seed=48)
    prepared(sqlite_url)
    log = tmp_path / "worker.log"
    # INFO, as a worker started without PREFECT_LOGGING_LEVEL logs: the engine writes its pull step line on the
    # console, the dead worker's pipe (the test server's WARNING wrote nothing there, and the run ended well).
    mine = {"HARVESTER_HOME": str(pool["home"]), "HARVESTER_DATABASE_URL": sqlite_url, "PREFECT_LOGGING_LEVEL": "INFO"}
    worker = start_worker(pool, log, **mine)
    try:
        async with get_client() as client:
            harvest = await client.read_deployment_by_name("harvest/stop")
            profile = {**harvest.parameters["profile"], "seeds": web.seeds, "per_host_limit": 2}
            created = await client.create_flow_run_from_deployment(harvest.id, parameters={"profile": profile},
                                                                   work_queue_name=pool["queue"])
        deadline = time.monotonic() + WAIT_S
        while engine_of(created.id) is None:  # the engine is there, still loading Prefect: its flow not begun
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its command; the engine, in its own session, lives
        worker.wait(timeout=30)
        assert web.records() == []  # control: killed before the flow began
        ended = await wait_for(created.id, lambda s: s.is_final() or s.is_scheduled(), "ended", log)
        await processes_gone(created.id)
        async with get_client() as client:
            states = await client.read_flow_run_states(created.id)
        crashed = [state for state in states if state.is_crashed()]
        assert crashed, (ended.state, [f"{state.name}: {state.message}" for state in states])
        said = await run_logs(created.id)
        assert "the worker that started this run" in (crashed[0].message or ""), (crashed[0], said)

        await wait_for(created.id, lambda s: s.is_scheduled(), "scheduled again by the retry automation", log)
        worker = start_worker(pool, log, **mine)
        done = await wait_for(created.id, lambda s: s.is_final(), "finished", log)
        assert done.state.is_completed(), done.state
    finally:
        stop_group(worker)
