"""Crash and fault recovery of the flows: SIGKILL of ``harvester harvest`` halfway, and a store fault mid-task.

Counted from the test web's request record (thread mode, so the record lives in this process).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import threading
import time

from conftest import VENV_BIN, free_a_dead_runs_site_slot, prepared, stop_group

from harvester.frontier import FrontierStore
from harvester.phases.completions import FLUSH_ITEMS
from harvester.settings import Settings
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

CRASH_SPECS = [HostSpec("a", pages=120, latency_s=0.03), HostSpec("b", pages=120, latency_s=0.03)]


def harvest_cmd(seeds: list[str], db_url: str) -> list[str]:
    return [str(VENV_BIN / "harvester"), "harvest", *seeds, "--db", db_url, "--name", "crash"]


def done_details(db_url: str, details: set[str]) -> set[str]:
    # The test's own look waits for a writer as long as it must: the store-fault test gives the environment a
    # 0.2 s busy timeout (meant for the worker), which failed this look now and then on a loaded machine.
    settings = Settings.load(database_url=db_url).with_overrides(**{"store.sqlite_busy_timeout_s": 30.0})
    with FrontierStore.open(settings) as store:
        return {url for url, state in store.url_states().items() if url in details and state[0] == "done"}


def test_sigkill_halfway_then_rerun_repeats_nothing_and_loses_nothing(prefect_api, make_web, sqlite_url, tmp_path):
    web = make_web(CRASH_SPECS, seed=21)
    details = {url for name in ("a", "b") for url in web.truth[name].allowed_detail_urls()}
    prepared(sqlite_url)
    env = {**prefect_api, "HARVESTER_DATABASE_URL": sqlite_url}
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(  # our own console script, no shell
            harvest_cmd(web.seeds, sqlite_url), env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 120
        done: set[str] = set()
        while len(done) < len(details) // 2:
            assert first.poll() is None, f"finished before the kill:\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"never got halfway ({len(done)}):\n{log.read_text()[-2000:]}"
            time.sleep(0.2)
            done = done_details(sqlite_url, details)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        killed_at = time.monotonic()
    finally:
        stop_group(first, signal.SIGKILL)
    snapshot = done_details(sqlite_url, details)
    assert len(details) // 2 <= len(snapshot) < len(details), "the kill must land halfway"
    asyncio.run(free_a_dead_runs_site_slot("crash"))  # else the rerun waits out the dead run's 60 s lease

    second = subprocess.run(  # our own console script, no shell
        harvest_cmd(web.seeds, sqlite_url), env=env, capture_output=True, timeout=180, cwd=tmp_path, check=False,
    )
    assert second.returncode == 0, second.stdout.decode()[-3000:] + second.stderr.decode()[-3000:]

    records = web.records()
    after = [r for r in records if r.start >= killed_at]
    assert after, "the rerun fetched nothing: the control that the kill left work to do"
    refetched = sorted({r.url for r in after if r.url in snapshot and r.method == "GET"})
    assert refetched == [], refetched[:5]
    lost = sorted(details - done_details(sqlite_url, details))
    assert lost == [], lost[:5]
    # Only fetches not yet committed at the kill may have been repeated: those in flight, and completions
    # still in the writer's batch (at most FLUSH_ITEMS, held at most FLUSH_EVERY_S).
    repeated = duplicates(records)
    assert all(web.origin(host) + path not in snapshot for host, path in repeated), repeated
    in_flight_cap = Settings.load(database_url=sqlite_url).politeness.max_per_host_limit * len(CRASH_SPECS)
    assert len(repeated) <= in_flight_cap + FLUSH_ITEMS, repeated


# Slow enough (about 2-4 s per host at the default limits) that the lock lands mid-extraction, not after it:
# at 20 ms the whole extraction could finish between two polls of the done count.
FAULT_SPECS = [HostSpec("f", pages=150, latency_s=0.06), HostSpec("g", pages=150, latency_s=0.06)]


async def test_a_store_fault_mid_extraction_is_retried_and_repeats_no_fetch(
    prefect_api, make_web, tmp_path, monkeypatch
):
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from harvester import phases
    from harvester.flows import tasks
    from harvester.flows.extract import extract_flow
    from harvester.site_profile import SiteProfile

    web = make_web(FAULT_SPECS, seed=22)
    path = tmp_path / "fault.db"
    db_url = f"sqlite:///{path}"
    overrides = prepared(db_url)
    monkeypatch.setenv("HARVESTER_STORE__SQLITE_BUSY_TIMEOUT_S", "0.2")  # a worker's setting, not a run's
    settings = Settings.load(database_url=db_url)
    assert settings.store.sqlite_busy_timeout_s == 0.2
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="fault")
    details = {url for name in ("f", "g") for url in web.truth[name].allowed_detail_urls()}
    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, profile)
    web.clear_records()

    locked, failed_once = threading.Event(), threading.Event()

    class FirstFailure(logging.Handler):
        """Sees the task's first failure (Prefect logs the retry it schedules)."""

        def emit(self, record: logging.LogRecord) -> None:
            if "Retry 1/" in record.getMessage():
                failed_once.set()

    def lock_until_failed(at_most_s: float) -> bool:
        """Another connection takes the write lock, so the worker's store writes fail with StoreError, and holds
        it until the task has failed once: its retry then finds the store free (a fixed hold raced the retries)."""
        conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        try:
            conn.execute("BEGIN EXCLUSIVE")
            locked.set()
            seen = failed_once.wait(at_most_s)
            conn.execute("COMMIT")
            return seen
        finally:
            conn.close()

    saved = list(tasks.RETRY_DELAYS_S)
    tasks.RETRY_DELAYS_S[:] = [1.0, 2.0, 4.0]  # the decorator holds this list: shorter waits, same behaviour
    watcher = FirstFailure()
    task_logger = logging.getLogger("prefect.task_runs")
    task_logger.addHandler(watcher)
    try:
        run = asyncio.create_task(extract_flow(profile, overrides=overrides, return_state=True))
        while len(await asyncio.to_thread(done_details, db_url, details)) < len(details) // 4:
            assert not run.done(), "extraction finished before the fault"
            await asyncio.sleep(0.1)
        # The fault outlasts the writer's own waits (the lease keeper's flush waits them out first, then a
        # worker's) and fails the task once.
        holder = asyncio.create_task(asyncio.to_thread(lock_until_failed, 60.0))
        await asyncio.to_thread(locked.wait, 10)
        assert not run.done(), "the control: the lock must be taken while extraction still runs"
        assert await holder, "the store fault never failed the task"
        state = await asyncio.wait_for(run, timeout=120)
    finally:
        task_logger.removeHandler(watcher)
        tasks.RETRY_DELAYS_S[:] = saved
    assert state.is_completed(), state

    attempts: dict[str, int] = {}
    deadline = time.monotonic() + 15  # the server records task-run states from events, a moment later
    async with get_client() as client:
        while attempts.get("extract-0", 0) < 2 and time.monotonic() < deadline:
            flow_filter = FlowRunFilter(id=FlowRunFilterId(any_=[state.state_details.flow_run_id]))
            attempts = {run.name: run.run_count for run in await client.read_task_runs(flow_run_filter=flow_filter)}
            if attempts.get("extract-0", 0) < 2:
                await asyncio.sleep(0.5)
    assert attempts.get("extract-0", 0) >= 2, f"the fault must have failed the task once: {attempts}"
    assert duplicates(web.records()) == {}
    lost = sorted(details - await asyncio.to_thread(done_details, db_url, details))
    assert lost == [], lost[:5]
