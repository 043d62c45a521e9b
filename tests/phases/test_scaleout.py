"""Scale-out (issue 22): several extraction processes on one PostgreSQL frontier, one of them killed mid-run.

Before: a worker that found every host with work leased by others ended its run, so once the killed worker's
hosts were the only ones left, the survivors had already exited and those hosts waited for the next run. Now a
worker waits while hosts with work due or in flight are held by others; the dead worker's hosts come back (its
leases released as its process is gone, or run out) and are finished, politely and without fetching twice
anything the dead worker had written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from harvester import FrontierStore, phases
from harvester.frontier.dialect_postgres import EXTRACTION_NAME
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import max_in_flight

HOSTS = 30
LIMIT = 2
SPECS = [HostSpec(f"s{n:02d}", pages=12, latency_s=0.08) for n in range(HOSTS)]
"""30 hosts, more than the three workers take at once (4 each): the killed worker's are not the last. A dozen pages
each keep a host in hand over a few rounds at two requests at a time; the pages are the run's CPU."""
AGENTS = [f"harvester-scale-{n}/1.0 (+http://127.0.0.1/contact)" for n in range(3)]
WAIT_S = 120.0
KILL_AT = 0.8
"""Share of the pages fetched when worker 0 is killed: late, so the others are out of hosts of their own soon."""


def extractor(n: int, db_url: str, seeds: list[str], tmp_path: Path, *, lease_s: float = 60.0,
              max_active_hosts: int = 4) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    env.update({
        "HARVESTER_HTTP__USER_AGENT": AGENTS[n], "HARVESTER_STORE__LEASE_S": str(lease_s),
        "HARVESTER_POLITENESS__MAX_ACTIVE_HOSTS": str(max_active_hosts), "PREFECT_HOME": str(tmp_path / "prefect"),
    })
    bin_ = Path(sys.executable).parent / "harvester"
    with (tmp_path / f"extract-{n}.log").open("wb") as out:
        return subprocess.Popen(  # our own console script, no shell
            [str(bin_), "extract", *seeds, "--db", db_url, "--per-host", str(LIMIT)],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )


async def discovered(web: TestWeb, db_url: str) -> tuple[TestWeb, Settings, set[str]]:
    """The web discovered into a migrated database, its records cleared: the frontier the extractors share, with
    the detail URLs they must finish."""
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
    web.clear_records()
    return web, settings, {url for name in web.names for url in web.truth[name].allowed_detail_urls()}


@contextlib.contextmanager
def extractors(db_url: str, seeds: list[str], tmp_path: Path, *, lease_s: float = 60.0,
               max_active_hosts: int = 4) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Three extraction processes, each with its own user agent; any still alive at the end (a failed test) is
    continued (it may be frozen) and killed."""
    workers = [extractor(n, db_url, seeds, tmp_path, lease_s=lease_s, max_active_hosts=max_active_hosts)
               for n in range(len(AGENTS))]
    try:
        yield workers
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait()


def finish(workers: list[subprocess.Popen[bytes]], tmp_path: Path, which: tuple[int, ...] = (0, 1, 2)) -> None:
    """Each of these workers ends by itself with exit 0 (its log's tail otherwise)."""
    for n in which:
        assert workers[n].wait(timeout=WAIT_S) == 0, (tmp_path / f"extract-{n}.log").read_text()[-3000:]


@pytest.mark.postgres
async def test_three_extraction_processes_finish_a_30_host_harvest_though_one_is_killed(make_web, pg_url, tmp_path):
    web, settings, details = await discovered(make_web(SPECS, seed=53), pg_url)
    with extractors(pg_url, web.seeds, tmp_path) as workers:
        deadline = time.monotonic() + WAIT_S
        while sum(1 for r in web.records() if r.url in details) < KILL_AT * len(details):
            assert time.monotonic() < deadline and workers[0].poll() is None, "worker 0 ended early"
            time.sleep(0.05)
        workers[0].send_signal(signal.SIGKILL)  # late in the run, holding hosts with work left
        workers[0].wait()
        killed_at = time.monotonic()
        finish(workers, tmp_path, (1, 2))

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


async def test_a_worker_finishes_the_hosts_of_a_holder_that_died_during_its_round(make_web, db_url):
    """The losing order of the kill test, in one process and without timing: the round looks for hosts while the
    other holder lives (its lease is live: the round gets none of its hosts), the holder dies during the round
    (killed from the extractor hook at the first page), the round ends, this worker hands the dead holder's leases
    back, then asks what is left. The hosts it had just freed were held by nobody: the run ended, their URLs
    queued ("748 done, 92 queued")."""
    specs = [HostSpec("alive", pages=6), HostSpec("dead", pages=6)]
    web = make_web(specs, seed=7)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the other worker
    try:
        owner = f"{socket.gethostname()}:{holder.pid}:extract-9:deadbeef"

        def kill_the_holder(page: object) -> None:
            if holder.poll() is None:
                holder.kill()
                holder.wait()  # reaped: its pid is gone, as the kill test's worker 0 is

        with FrontierStore.open(settings, upgrade=True) as store:
            await phases.discover(store, settings, profile)
            web.clear_records()
            held = web.origin("dead")
            assert store.claim_hosts(owner, limit=1, lease_s=600, hosts=[held]) == [held]
            assert store.claim(owner, hosts=[held], per_host=2, lease_s=600)  # in flight when it dies
            await phases.extract(store, settings, profile, extractor=kill_the_holder)
            states = store.url_states()
    finally:
        holder.kill()
        holder.wait()
    details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}
    assert holder.returncode is not None
    assert {url for url in details if states[url][0] != "done"} == set()
    assert {r.url for r in web.records() if r.url.startswith(held)} & details  # this worker fetched them


async def test_a_dead_holders_hosts_are_taken_while_the_survivor_still_serves_its_own(make_web, db_url):
    """A stranger's kill -9 of one of three workers: the dead worker's hosts got no request for 36-43 s, until
    the survivors had finished their own hosts (their round ended, and only then were the dead holder's leases
    handed back). Now each look for hosts hands back the hosts of a dead process of this machine. Here the
    worker's own host is held (its first page's hook waits) until the dead holder's host has been asked: that
    happens while its own host is still being served, not after."""
    specs = [HostSpec("alive", pages=8), HostSpec("dead", pages=6)]
    web = make_web(specs, seed=7)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the other worker
    gave_up: list[bool] = []
    try:
        owner = f"{socket.gethostname()}:{holder.pid}:extract-9:deadbeef"
        held = ""

        def hold_until_taken(page: object) -> None:
            if holder.poll() is None:
                holder.kill()
                holder.wait()  # reaped: its pid is gone
            deadline = time.monotonic() + 30  # without the fix: never, until this host is done (it can't be)
            while not gave_up and not any(r.url.startswith(held) for r in web.records()):
                if time.monotonic() > deadline:
                    gave_up.append(True)
                time.sleep(0.05)

        with FrontierStore.open(settings, upgrade=True) as store:
            await phases.discover(store, settings, profile)
            web.clear_records()
            held = web.origin("dead")
            assert store.claim_hosts(owner, limit=1, lease_s=600, hosts=[held]) == [held]
            assert store.claim(owner, hosts=[held], per_host=2, lease_s=600)
            await phases.extract(store, settings, profile, extractor=hold_until_taken)
            states = store.url_states()
    finally:
        holder.kill()
        holder.wait()
    assert not gave_up, "the dead holder's host was not taken while this worker served its own"
    details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}
    assert {url for url in details if states[url][0] != "done"} == set()


FROZEN_LEASE_S = 6.0


def _wait_for(what: str, ready, deadline: float) -> None:  # type: ignore[no-untyped-def]
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.postgres
async def test_an_extractor_frozen_past_its_lease_sends_nothing_for_the_host_taken_over(make_web, pg_url, tmp_path):
    """SIGSTOP an extraction process while it holds a host (its claimed batch queued in memory), until another
    process has taken the host over, then SIGCONT it. Before: it went on with its batch, so the host saw both
    processes at once (over its limit) and pages were fetched twice. Now it asks its local lease deadline before
    each request and stops that host at once."""
    # The frozen worker's host still has most of its pages when the lease runs out (frozen at its tenth request).
    specs = [HostSpec(f"f{n}", pages=80, latency_s=0.05) for n in range(2)]
    web, settings, details = await discovered(make_web(specs, seed=11), pg_url)

    def by(agent: str) -> list:  # type: ignore[type-arg]
        return [r for r in web.records() if r.url in details and r.user_agent == agent]

    with extractors(pg_url, web.seeds, tmp_path, lease_s=FROZEN_LEASE_S) as workers:
        deadline = time.monotonic() + WAIT_S
        _wait_for("a worker's requests", lambda: any(len(by(agent)) >= 10 for agent in AGENTS), deadline)
        victim = next(n for n, agent in enumerate(AGENTS) if len(by(agent)) >= 10)
        agent = AGENTS[victim]
        workers[victim].send_signal(signal.SIGSTOP)
        frozen_at = time.monotonic()
        host = max(by(agent), key=lambda r: r.start).host  # a host it was fetching when frozen
        _wait_for("another worker to take the frozen worker's host over",
                  lambda: sum(1 for r in web.records() if r.host == host and r.user_agent != agent
                              and r.start > frozen_at + FROZEN_LEASE_S) >= 3, deadline)
        continued_at = time.monotonic()
        workers[victim].send_signal(signal.SIGCONT)
        finish(workers, tmp_path)

    records = [r for r in web.records() if r.url in details]
    assert continued_at - frozen_at > FROZEN_LEASE_S  # control: frozen past its lease
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    assert [url for url in details if states[url][0] != "done"] == []
    assert all(max_in_flight(records, spec.name) <= LIMIT for spec in specs), [
        max_in_flight(records, spec.name) for spec in specs]
    # Twice: only what the frozen worker had in flight when it was stopped (answered while it slept).
    first = {}
    for r in sorted(records, key=lambda r: r.start):
        first.setdefault(r.url, r)
    twice = {url for url, count in Counter(r.url for r in records if r.status == 200).items() if count > 1}
    detail = sorted((url[-30:], [(r.user_agent[16:18], r.status, round(r.start - frozen_at, 2))
                                 for r in records if r.url == url]) for url in twice)
    # The server logs a request when its handler begins: one sent just before the SIGSTOP may be logged a moment
    # after it under load. A request sent after the SIGCONT would start past ``continued_at`` (over 6 s later).
    assert all(first[url].user_agent == agent and first[url].start < frozen_at + 1.0 for url in twice), (
        agent, continued_at - frozen_at, detail)
    # Nothing it asked for after it was continued was asked for by anyone else.
    late = {r.url for r in records if r.user_agent == agent and r.start > continued_at and r.status == 200}
    others = {r.url for r in records if r.user_agent != agent and r.status == 200}
    assert not late & others


@pytest.mark.postgres
async def test_three_extraction_processes_share_the_hosts_of_a_six_host_site(make_web, pg_url, tmp_path):
    """Before, the first process to look leased every host with work (up to ``max_active_hosts``, 64) and the
    other two waited idle. Now each takes its share of the hosts with work, counting the others it sees (their
    leases, and on PostgreSQL their sessions, idle ones included).

    The work starts once all three are there (the event the share needs): a gate owner, alive, holds every host
    until the three extraction processes show on the database. Started under load, one came up after the
    others had done the work and fetched nothing (a late start is ``test_sharing``'s: the holders hand hosts
    back)."""
    specs = [HostSpec(f"h{n}", pages=45, latency_s=0.08) for n in range(6)]
    web = make_web(specs, seed=5)
    settings = Settings.load(database_url=pg_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    gate = f"{socket.gethostname()}:{os.getpid()}:gate:0"  # this test's process: alive, never taken for dead
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        origins = [web.origin(spec.name) for spec in specs]
        assert sorted(store.claim_hosts(gate, limit=len(origins), lease_s=600, hosts=origins)) == sorted(origins)
    web.clear_records()
    details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}
    sessions = create_engine(pg_url, poolclass=NullPool)
    workers = [extractor(n, pg_url, web.seeds, tmp_path, max_active_hosts=64) for n in range(3)]
    try:
        deadline = time.monotonic() + WAIT_S
        _wait_for("three extraction processes on the database",
                  lambda: _extraction_sessions(sessions) == 3 and all(w.poll() is None for w in workers), deadline)
        with FrontierStore.open(settings) as store:
            store.release_owner(gate)
        for n in range(3):
            assert workers[n].wait(timeout=WAIT_S) == 0, (tmp_path / f"extract-{n}.log").read_text()[-3000:]
    finally:
        sessions.dispose()
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    records = [r for r in web.records() if r.url in details and r.status == 200]
    by_agent = Counter(r.user_agent for r in records)
    assert len({r.url for r in records}) == len(details)
    assert all(by_agent[agent] >= len(details) / 10 for agent in AGENTS), by_agent
    assert all(max_in_flight(records, spec.name) <= LIMIT for spec in specs)
    assert sum(by_agent.values()) == len(details)  # none fetched twice


def _extraction_sessions(engine: Engine) -> int:
    """Extraction processes with a session on the test's database (each names its sessions)."""
    with engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE %s", (EXTRACTION_NAME + "%",)).scalar_one())
