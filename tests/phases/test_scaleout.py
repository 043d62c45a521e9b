"""Scale-out (issue 22): several extraction processes on one PostgreSQL frontier, one of them killed mid-run.

Before: a worker that found every host with work leased by others ended its run, so once the killed worker's
hosts were the only ones left, the survivors had already exited and those hosts waited for the next run. Now a
worker waits while hosts with work due or in flight are held by others; the dead worker's hosts come back (its
leases released as its process is gone, or run out) and are finished, politely and without fetching twice
anything the dead worker had written.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from harvester import FrontierStore, phases
from harvester.settings import Settings, SiteProfile
from harvester.testing.record import max_in_flight
from harvester.testing.sites import HostSpec

HOSTS = 30
LIMIT = 2
SPECS = [HostSpec(f"s{n:02d}", pages=24, latency_s=0.08) for n in range(HOSTS)]
AGENTS = [f"harvester-scale-{n}/1.0 (+http://127.0.0.1/contact)" for n in range(3)]
WAIT_S = 120.0
KILL_AT = 0.8
"""Share of the pages fetched when worker 0 is killed: late, so the others are out of hosts of their own soon."""


def extractor(n: int, db_url: str, seeds: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    env.update({
        "HARVESTER_HTTP__USER_AGENT": AGENTS[n], "HARVESTER_STORE__LEASE_S": "60",
        "HARVESTER_POLITENESS__MAX_ACTIVE_HOSTS": "4", "PREFECT_HOME": str(tmp_path / "prefect"),
    })
    bin_ = Path(sys.executable).parent / "harvester"
    with (tmp_path / f"extract-{n}.log").open("wb") as out:
        return subprocess.Popen(  # our own console script, no shell
            [str(bin_), "extract", *seeds, "--db", db_url, "--per-host", str(LIMIT)],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )


@pytest.mark.postgres
async def test_three_extraction_processes_finish_a_30_host_harvest_though_one_is_killed(make_web, pg_url, tmp_path):
    web = make_web(SPECS, seed=53)
    settings = Settings.load(database_url=pg_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
    web.clear_records()
    details = {url for spec in SPECS for url in web.truth[spec.name].allowed_detail_urls()}

    workers = [extractor(n, pg_url, web.seeds, tmp_path) for n in range(3)]
    try:
        deadline = time.monotonic() + WAIT_S
        while sum(1 for r in web.records() if r.url in details) < KILL_AT * len(details):
            assert time.monotonic() < deadline and workers[0].poll() is None, "worker 0 ended early"
            time.sleep(0.05)
        workers[0].send_signal(signal.SIGKILL)  # late in the run, holding hosts with work left
        workers[0].wait()
        killed_at = time.monotonic()
        for n in (1, 2):
            assert workers[n].wait(timeout=WAIT_S) == 0, (tmp_path / f"extract-{n}.log").read_text()[-3000:]
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    records = web.records()
    by_agent = Counter(r.user_agent for r in records if r.url in details)
    assert all(by_agent[agent] > 0 for agent in AGENTS), by_agent  # all three worked
    # The survivors took over the dead worker's hosts after it died.
    assert any(r.start > killed_at and r.user_agent != AGENTS[0] for r in records if r.url in details)
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    missing = [url for url in details if states[url][0] != "done"]
    assert not missing, f"{len(missing)} left undone, e.g. {missing[:3]}"
    assert all(max_in_flight(records, spec.name) <= LIMIT for spec in SPECS)
    # Fetched twice: only what the dead worker had asked and not yet written.
    asked = Counter(r.url for r in records if r.url in details and r.status == 200)
    twice = {url for url, count in asked.items() if count > 1}
    first_by = {url: min((r for r in records if r.url == url), key=lambda r: r.start).user_agent for url in twice}
    assert all(agent == AGENTS[0] for agent in first_by.values()), first_by
