"""Runs on a process work pool end in a true state (issue 33, items 1 and 2), on the session's started server.

Before: a worker stopped with SIGTERM (``systemctl stop``, a rolling deploy) killed its run's process without the
graceful stop: the run stayed Running about 85 s until the heartbeat automation marked it, a page was fetched twice
and a task run was left Running for ever; a worker without ``HARVESTER_HOME`` left its message on its own stdout
only, never in the run's logs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, free_a_dead_runs_site_slot, prepared, stop_group

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import duplicates

WAIT_S = 120.0
FINAL_WITHIN_S = 10.0


async def open_runs_for(pool: dict[str, Any]) -> list[str]:
    """The runs this test's workers may pick now (on its queue, due within a minute) that have not ended: its own
    alone, or none. (The deployments' schedules put next week's runs on the default queue; no worker picks those.)"""
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        WorkPoolFilter,
        WorkPoolFilterName,
        WorkQueueFilter,
        WorkQueueFilterName,
    )
    from prefect.client.schemas.objects import StateType

    open_ = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING]
    due = datetime.now(UTC) + timedelta(minutes=1)
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=open_))),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool["name"]])),
            work_queue_filter=WorkQueueFilter(name=WorkQueueFilterName(any_=[pool["queue"]])))
    return [str(run.id) for run in runs
            if run.state_type != StateType.SCHEDULED or (run.expected_start_time or due) <= due]


IGNORING_SIGINT = ["sh", "-c", 'trap "" INT; exec "$@"', "sh"]
"""What a script's background job (``prefect worker start ... &``, ``nohup ... &``) is started under: a shell
without job control sets SIGINT (and SIGQUIT) ignored for it, and an ignored signal stays ignored across exec."""


def start_worker(pool: dict[str, Any], log: Path, *, sigint_ignored: bool = False, **env: str,
                 ) -> subprocess.Popen[bytes]:
    """A worker of the pool that takes the runs of this test's queue alone; ``sigint_ignored``: started as a
    script's background job is."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [*(IGNORING_SIGINT if sigint_ignored else []),
             str(VENV_BIN / "prefect"), "worker", "start", "--pool", pool["name"], "--work-queue", pool["queue"]],
            env={**pool["env"], "PREFECT_WORKER_QUERY_SECONDS": "1", **env}, cwd=pool["home"], stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )


async def harvest_on_pool(web: TestWeb, deployment: str = "harvest/stop", *, queue: str | None = None,
                          **profile: Any) -> Any:
    """A run of the deployment created for this web's seeds (2 requests per host at most, and ``profile``'s
    fields), for its worker (or serve) to pick: on ``queue``, else on the deployment's."""
    from prefect import get_client

    async with get_client() as client:
        harvest = await client.read_deployment_by_name(deployment)
        fields = {**harvest.parameters["profile"], "seeds": web.seeds, "per_host_limit": 2, **profile}
        return await client.create_flow_run_from_deployment(harvest.id, parameters={"profile": fields},
                                                            work_queue_name=queue)


async def under_way(web: TestWeb, pages: int, runner: subprocess.Popen[bytes], log: Path) -> None:
    """Wait until the extraction has asked for this many detail pages, while its runner (worker or serve) lives."""
    details = {url for name in web.names for url in web.truth[name].detail_urls()}
    deadline = time.monotonic() + WAIT_S
    while sum(1 for r in web.records() if r.url in details) < pages:
        assert runner.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        await asyncio.sleep(0.1)


async def harvesting_on_a_worker(
    pool: dict[str, Any], web: TestWeb, db_url: str, tmp_path: Path, *, pages: int,
) -> tuple[subprocess.Popen[bytes], Any, Path, dict[str, str]]:
    """The healing automations made, a worker of the pool started on a migrated database, a harvest of ``web``
    created for it and under way (``pages`` detail pages asked). Returns the worker, the run, the worker's log
    and the worker's own environment (for a second worker)."""
    from harvester.flows.healing import ensure_healing

    await ensure_healing()
    prepared(db_url)
    log = tmp_path / "worker.log"
    mine = {"HARVESTER_HOME": str(pool["home"]), "HARVESTER_DATABASE_URL": db_url}
    worker = start_worker(pool, log, **mine)
    try:
        created = await harvest_on_pool(web, queue=pool["queue"])
        await under_way(web, pages, worker, log)
    except BaseException:
        stop_group(worker)
        raise
    return worker, created, log, mine


async def read_run(flow_run_id: Any) -> Any:
    from prefect import get_client

    async with get_client() as client:
        return await client.read_flow_run(flow_run_id)


async def wait_for(flow_run_id: Any, predicate: Any, what: str, log: Path, within_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        run = await read_run(flow_run_id)
        if run.state is not None and predicate(run.state):
            return run
        assert time.monotonic() < deadline, f"never {what} (still {run.state}):\n{log.read_text()[-4000:]}"
        await asyncio.sleep(0.25)


async def running_task_runs(flow_run_id: Any) -> list[str]:
    """Task runs still Running in the run and in its subflow runs (of every attempt)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, FlowRunFilterParentFlowRunId

    async with get_client() as client:
        subflows = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id])))
        ids = [flow_run_id, *(subflow.id for subflow in subflows)]
        tasks = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
    return [f"{task.id} {task.name}" for task in tasks if task.state is not None and task.state.is_running()]


TASK_STATES_LAG_S = 15.0
"""A task run's final state reaches the server as an event, behind its flow run's state, which is set directly:
under load (two test workers) it was still Running when the flow run had already ended."""


async def settled_running_task_runs(flow_run_id: Any) -> list[str]:
    """Task runs still Running once the task states sent before the flow ended have arrived: [] when none is left."""
    deadline = time.monotonic() + TASK_STATES_LAG_S
    while (left := await running_task_runs(flow_run_id)) and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    return left


async def run_logs(flow_run_id: Any) -> str:
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(log.message for log in logs)


async def test_a_worker_stopped_with_sigterm_ends_its_run_at_once_and_cleanly(
    pool, prefect_api, make_web, sqlite_url, tmp_path
):
    web = make_web([HostSpec("p", pages=60, latency_s=0.15), HostSpec("q", pages=50, latency_s=0.15)], seed=33)
    worker, created, log, mine = await harvesting_on_a_worker(pool, web, sqlite_url, tmp_path, pages=10)
    try:
        os.killpg(worker.pid, signal.SIGTERM)  # as systemctl stop does (KillMode=mixed): the worker alone
        ended = await wait_for(created.id, lambda s: s.is_final() or s.is_scheduled(), "ended", log,
                               within_s=FINAL_WITHIN_S)
        worker.wait(timeout=30)
        said = await run_logs(created.id)
        # The SIGTERM passed on by the worker's command, or that command gone: the worker SIGKILLs it as it stops,
        # and under load that came before the command ran its handler (seen in a run at a load of 10 on 2 cores).
        # Both start the same graceful stop; the run's logs say which it heard first.
        assert "stopping (no new request" in said, said
        assert "was sent SIGTERM" in said or "that started this run (pid" in said, said
        assert ended.state.is_crashed() or ended.state.name == "AwaitingRetry", ended.state
        left = await settled_running_task_runs(created.id)
        assert left == [], left

        # The retry automation schedules it again; a new worker completes it from the frontier.
        await wait_for(created.id, lambda s: s.is_scheduled(), "scheduled again", log)
        worker = start_worker(pool, log, **mine)
        done = await wait_for(created.id, lambda s: s.is_final(), "finished", log)
        assert done.state.is_completed(), done.state
    finally:
        stop_group(worker)
    assert duplicates(web.records()) == {}
    assert await settled_running_task_runs(created.id) == []
    with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
        states = store.url_states()
    for name in ("p", "q"):
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls())


async def test_a_worker_started_as_a_scripts_background_job_stops_on_its_first_sigterm(pool, tmp_path):
    """``prefect worker start --pool harvester &`` in a script (docs/operations.md), or under ``nohup ... &``, starts
    with SIGINT ignored. Prefect's worker turns SIGTERM into a SIGINT to itself, after putting back the handler
    Python started with, which was that ignore: the SIGTERM did nothing. The worker lived on (its run, told by the
    same group-wide SIGTERM, ended Crashed; the worker then took the run's retry) until a second SIGTERM killed it
    with SIGKILL (tests of this file failed so when pytest ran as a background job). Now harvester's Prefect
    collection gives SIGINT back its default in such a process, and the first SIGTERM stops the worker."""
    log = tmp_path / "worker.log"
    worker = start_worker(pool, log, sigint_ignored=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not catches_sigterm(worker.pid):  # Prefect's handlers are installed: the SIGTERM meets them
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGTERM)  # as systemctl stop does: once
        try:
            worker.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker outlived its SIGTERM:\n{log.read_text()[-3000:]}")
    finally:
        stop_group(worker)


def test_prefect_loads_harvesters_collection_which_gives_an_ignored_sigint_its_default_back():
    """What the test above relies on, without a server: Prefect's collection loading (``prefect worker start`` does
    it before installing its handlers) imports ``harvester.flows.collection`` through the entry point."""
    probe = ("import signal\n"
             "from prefect.plugins import load_prefect_collections\n"
             "before = signal.getsignal(signal.SIGINT)\n"
             "loaded = load_prefect_collections()\n"
             "print(before == signal.SIG_IGN, signal.getsignal(signal.SIGINT) is signal.default_int_handler,\n"
             "      'harvester' in loaded)")
    done = subprocess.run([*IGNORING_SIGINT, str(VENV_BIN / "python"), "-c", probe], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    # Ignored as it started (the control), Python's handler once the collections are loaded, ours among them.
    assert done.stdout.split()[-3:] == ["True", "True", "True"], done.stdout + done.stderr[-3000:]


async def test_a_worker_without_home_says_so_in_the_runs_logs(pool, tmp_path):
    """The worker's own stdout is not where an operator looks: the run's logs in the UI (read here from the API)
    carry the project's message, and the run's state says it."""
    from prefect import get_client

    log = tmp_path / "worker.log"
    worker = start_worker(pool, log)  # no HARVESTER_HOME
    try:
        async with get_client() as client:
            harvest = await client.read_deployment_by_name("harvest/stop")
            created = await client.create_flow_run_from_deployment(harvest.id, work_queue_name=pool["queue"])
        ended = await wait_for(created.id, lambda s: s.is_final(), "ended", log)
    finally:
        stop_group(worker)
    said = await run_logs(created.id)
    assert "HARVESTER_HOME is not set on this worker" in said, (ended.state, said)
    assert "HARVESTER_HOME" in (ended.state.message or ""), ended.state


async def test_a_stopped_runs_logs_say_why_before_its_state_ends(prefect_api, monkeypatch):
    """The run's final state is set directly; its log lines went in 2 s batches, after it or (a batch the server
    refused) never: a run stopped at its first instant ended Crashed with its logs still empty. Its stop message
    is now in its logs before its state ends. Here the lifeline runs in a flow of this process whose parent (as
    the engine's command names it) is gone, and the batches are held for a minute, so the logs are read while a
    late message would still be held."""
    from prefect import flow
    from prefect.logging.handlers import APILogWorker

    from harvester.errors import Interrupted
    from harvester.flows import lifeline
    from harvester.flows.engine import PARENT_PID
    from harvester.runtime import check_stop, clear_stop

    gone = subprocess.Popen(["true"])  # a process that has ended: its pid names no parent of ours
    gone.wait()
    monkeypatch.setenv(PARENT_PID, str(gone.pid))
    monkeypatch.setattr(lifeline, "started_by_runner", lambda: True)
    await APILogWorker.drain_all(timeout=10)  # type: ignore[misc]
    monkeypatch.setattr(APILogWorker, "min_interval", property(lambda _self: 60.0))
    ran: list[Any] = []

    @flow(name="stopped-at-once")
    async def stopped_at_once() -> None:
        from prefect.runtime import flow_run

        ran.append(flow_run.id)
        async with lifeline.parent_lifeline():
            while True:
                check_stop()
                await asyncio.sleep(0.05)

    try:
        with pytest.raises(Interrupted):
            await stopped_at_once()
        ended = await read_run(ran[0])
        said = await run_logs(ran[0])
    finally:
        clear_stop()
        monkeypatch.undo()
        await APILogWorker.drain_all(timeout=10)  # type: ignore[misc]
    assert ended.state.is_crashed() and "is gone" in (ended.state.message or ""), ended.state
    assert f"the process that started this run (pid {gone.pid}) is gone: stopping (no new request" in said, said
    said = await run_logs(ran[0])  # what Prefect's handler held is sent now: the message is there once, not twice
    assert said.count("stopping (no new request") == 1, said


def kill_run_processes(flow_run_id: Any) -> int:
    """SIGKILL every process of one flow run (the worker's command and Prefect's engine), as a lost machine does."""
    mark = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    killed = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except (OSError, ValueError):
            continue
    return killed


async def test_after_a_machine_loss_no_task_run_is_left_running(pool, prefect_api, make_web, sqlite_url, tmp_path):
    """Worker and run processes all killed at once: nothing reports. The run is marked Crashed (here as the
    heartbeat automation does it after 90 s of silence, with its message), retried by the retry automation, and
    the closing automation's run (on the pool's worker) or the rerun's start closes what the lost attempt left
    Running (before: task runs of its subflows, Running for ever). The rerun, stopped by SIGTERM, leaves nothing
    Running either."""
    from prefect import get_client
    from prefect.states import Crashed

    web = make_web([HostSpec("m", pages=30, latency_s=0.15)], seed=34)
    worker, created, log, mine = await harvesting_on_a_worker(pool, web, sqlite_url, tmp_path, pages=6)
    try:
        os.killpg(worker.pid, signal.SIGKILL)
        assert kill_run_processes(created.id) >= 1
        worker.wait(timeout=30)
        await free_a_dead_runs_site_slot("stop")  # else the rerun waits out the dead run's 60 s lease
        left = await running_task_runs(created.id)
        assert left != []  # control: the lost attempt's leftovers are there
        async with get_client() as client:
            await client.set_flow_run_state(created.id, Crashed(message="no heartbeat: its process is gone"))
        await wait_for(created.id, lambda s: s.is_scheduled(), "scheduled again", log)
        worker = start_worker(pool, log, **mine)
        deadline = time.monotonic() + WAIT_S
        while set(left) & set(await running_task_runs(created.id)):  # the rerun's own may be running: not those
            assert time.monotonic() < deadline, (left, log.read_text()[-3000:])
            await asyncio.sleep(0.5)
        # Closed by the closing automation's run on this worker, or by the rerun's start: whichever came first.
        # Then the rerun is waited for: running (the SIGTERM below meets its crawl) or already ended. Not a task run
        # of its own seen Running: task states reach the server as events, and a quiet machine's rerun of the 24
        # pages left could end between two looks (CI, stop 43: the wait ran out with the rerun done).
        while True:
            run = await read_run(created.id)
            if run.run_count == 2 and run.state is not None and (run.state.is_running() or run.state.is_final()):
                break
            assert time.monotonic() < deadline, (run.state, log.read_text()[-3000:])
            await asyncio.sleep(0.2)
        assert run.run_count == 2, run
    finally:
        stop_group(worker)  # SIGTERM: the rerun stops gracefully, and leaves nothing Running either
    await wait_for(created.id, lambda s: s.is_final() or s.is_scheduled(), "ended", log, within_s=FINAL_WITHIN_S)
    assert await settled_running_task_runs(created.id) == []



def run_processes(flow_run_id: Any) -> list[int]:
    """The processes of one flow run (the worker's command and the engine it starts), by their environment."""
    mark = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return found


def catches_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.parametrize("whom", ["the worker's group", "the worker"])
async def test_a_sigterm_at_a_runs_first_instant_ends_it_at_once_and_says_so(
    pool, prefect_api, make_web, sqlite_url, tmp_path, whom
):
    """The worker is stopped the moment the run's first process can hear a signal: before Prefect is loaded in it,
    before the flow began, before any page. Before: that process imported Prefect for 1-2 s first, died of the
    SIGTERM without a word and the run stayed Pending (Submitting) for ever; a signal passed on to an engine still
    starting killed it the same way. ``the worker``: systemd's KillMode=mixed (the worker alone, which then stops
    its run's process); ``the worker's group``: every process of the group at once."""
    from prefect import get_client

    web = make_web([HostSpec("f", pages=30, latency_s=0.15)], seed=35)
    prepared(sqlite_url)
    log = tmp_path / "worker.log"
    mine = {"HARVESTER_HOME": str(pool["home"]), "HARVESTER_DATABASE_URL": sqlite_url}
    worker = start_worker(pool, log, **mine)
    try:
        async with get_client() as client:
            harvest = await client.read_deployment_by_name("harvest/stop")
            profile = {**harvest.parameters["profile"], "seeds": web.seeds, "per_host_limit": 2}
            created = await client.create_flow_run_from_deployment(harvest.id, parameters={"profile": profile},
                                                                   work_queue_name=pool["queue"])
        deadline = time.monotonic() + WAIT_S
        while not any(catches_sigterm(pid) for pid in run_processes(created.id)):  # its first line has run
            assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            # Not a busy loop: on 2 cores it took a core from the very process it waits for, whose imports
            # after its first line (1-2 s idle, more under load) leave the signal ample time to land first.
            time.sleep(0.005)
        if whom == "the worker":
            os.kill(worker.pid, signal.SIGTERM)
        else:
            os.killpg(worker.pid, signal.SIGTERM)
        assert web.records() == []  # control: nothing fetched yet, the stop came first
        # The worker started this run alone: an earlier test's run put back to Scheduled is not on its queue.
        assert await open_runs_for(pool) == [str(created.id)]
        stopped = time.monotonic()
        # Its end is waited for, not timed: it reports once Prefect and the flow are loaded in it, 3-5 s idle, 15-20 s
        # at a load of 12-22 on 2 cores. That it stopped at once is what it did meanwhile: not one request.
        ended = await wait_for(created.id, lambda s: s.is_final() or s.is_scheduled(), "ended", log)
        print(f"final state {time.monotonic() - stopped:.1f} s after the SIGTERM ({whom})")
        worker.wait(timeout=30)
    finally:
        stop_group(worker)
    assert web.records() == []  # the stop came before the crawl: the run ended without sending a request
    said = await run_logs(created.id)
    # Which it heard first depends on the worker: the SIGTERM passed on, or its worker's process gone (the worker
    # kills it); both start the same graceful stop, and the run's logs say which.
    assert "stopping (no new request" in said, (ended.state, said)
    assert "was sent SIGTERM as it started" in said or "that started this run (pid" in said, said
    assert ended.state.is_crashed() or ended.state.name == "AwaitingRetry", ended.state
    assert await settled_running_task_runs(created.id) == []
    deadline = time.monotonic() + WAIT_S
    while run_processes(created.id):  # nothing of it is left running either: it ends once it has reported
        assert time.monotonic() < deadline, run_processes(created.id)
        await asyncio.sleep(0.2)
