"""extract_flow's workers as one: a worker that fails cancels its siblings, which wind down as a stopped run does
(what was recorded written, every lease handed back), and the flow fails with that first error. Before, the flow
gathered them without cancelling: it failed while its other workers went on fetching and holding their hosts.

Counted from the test web's request record (thread mode, so the record lives in this process)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from conftest import prepared
from test_flow_crash import done_details
from test_shutdown import settled_running_task_runs
from typer.testing import CliRunner

from harvester import phases
from harvester.errors import ConfigError
from harvester.fetch.workers import SETTLING_PER_WORKER
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

# Slow enough that worker 0 is mid-way through its hosts when worker 1 fails.
SPECS = [HostSpec("w", pages=150, latency_s=0.06), HostSpec("x", pages=150, latency_s=0.06)]
WAIT_S = 120.0


def leases(path: Any) -> tuple[int, int]:
    """(URL leases, host leases) held in the SQLite frontier at ``path``."""
    with sqlite3.connect(path, timeout=30) as conn:
        urls = conn.execute("SELECT count(*) FROM leases").fetchone()[0]
        hosts = conn.execute("SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL").fetchone()[0]
    return int(urls), int(hosts)


async def test_a_failing_worker_cancels_the_others_cleanly_and_the_rerun_repeats_only_what_was_in_flight(
    prefect_api, make_web, tmp_path, monkeypatch
):
    from harvester.flows.extract import extract_flow

    web = make_web(SPECS, seed=38)
    path = tmp_path / "workers.db"
    db_url = f"sqlite:///{path}"
    overrides = prepared(db_url)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="workers")
    details = {url for spec in SPECS for url in web.truth[spec.name].allowed_detail_urls()}
    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, profile)
    web.clear_records()

    real = phases.extract

    async def extract(*args: Any, worker: int = 0, **kwargs: Any) -> Any:
        """Worker 1 breaks (a ConfigError: no retry) once worker 0 has answered a share of the pages."""
        if worker != 1:
            return await real(*args, worker=worker, **kwargs)
        deadline = time.monotonic() + WAIT_S
        while len([r for r in web.records() if r.url in details and r.status == 200]) < len(details) // 5:
            assert time.monotonic() < deadline, "worker 0 never got going"
            await asyncio.sleep(0.02)
        raise ConfigError("worker 1 broke on purpose")

    monkeypatch.setattr(phases, "extract", extract)
    state = await asyncio.wait_for(extract_flow(profile, workers=2, overrides=overrides, return_state=True), WAIT_S)
    ended_at = time.monotonic()
    assert state.is_failed(), state
    assert "worker 1 broke on purpose" in (state.message or ""), state.message
    # Worker 0 was cancelled and wound down before the flow failed: nothing held, its task run not left Running.
    assert leases(path) == (0, 0)
    assert await settled_running_task_runs(state.state_details.flow_run_id) == []
    snapshot = await asyncio.to_thread(done_details, db_url, details)
    assert 0 < len(snapshot) < len(details), "control: the failure landed mid-extraction"
    assert not [r for r in web.records() if r.start >= ended_at], "a cancelled worker went on fetching"
    # Its run row is finished as failed, saying why (``harvester status`` shows the last finished extraction):
    # before, it stayed "running" and status showed the run before it.
    with FrontierStore.open(settings) as store:
        last = store.last_run("extract")
    assert last is not None and last["status"] == "failed", last
    assert "worker 1 broke on purpose" in last["counters"]["error"], last
    assert sum(host["fetched"] for host in last["counters"]["hosts"].values()) >= len(snapshot), last
    from harvester.cli import app  # what `harvester status` shows of it: the run failed, and why
    shown = CliRunner().invoke(app, ["status", "--db", db_url], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert f"Last extraction (run {last['id']}) failed" in shown.output, shown.output
    assert "worker 1 broke on purpose" in shown.output, shown.output

    monkeypatch.setattr(phases, "extract", real)
    again = await asyncio.wait_for(extract_flow(profile, workers=2, overrides=overrides, return_state=True), WAIT_S)
    assert again.is_completed(), again
    lost = sorted(details - await asyncio.to_thread(done_details, db_url, details))
    assert lost == [], lost[:5]
    # Only what was in flight when worker 0 was cancelled is asked again, never a page written before: its requests
    # out, and the answers not yet turned into records (``run_hosts`` defers at most SETTLING_PER_WORKER per worker).
    repeated = duplicates([r for r in web.records() if r.url in details])
    assert all(web.origin(host) + where not in snapshot for host, where in repeated), repeated
    in_flight_cap = (1 + SETTLING_PER_WORKER) * settings.politeness.max_per_host_limit * len(SPECS)
    assert len(repeated) <= in_flight_cap, repeated
