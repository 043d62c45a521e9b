"""Which owners are alive, on a PostgreSQL frontier shared by machines (issue 32): judged by the server (each
process's liveness session), not by this machine's PIDs, for the three questions that hang on it: a run to
resume, a cycle to close, a dead holder's hosts to take back.

The other machine is a second process whose host name says another machine's (its PID means nothing here):
alive while its session is there, dead the moment it ends, however long its leases would still run. A frozen one
(SIGSTOP) keeps its session: its leases lapse by time only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest

from harvester.frontier import FrontierStore
from harvester.frontier.liveness import session_name
from harvester.owners import SESSION_MARK, make_owner, owner_process, retire_owner
from harvester.phases.leases import HostHolds, lease_clock
from harvester.phases.runs import recover_leases, release_dead_holders
from harvester.records import DiscoveredUrl, UrlKind
from harvester.runtime import utcnow
from harvester.settings import Settings

pytestmark = pytest.mark.postgres

ORIGIN = "https://a.test"
PROFILE = {"name": "shared"}
UA = "harvester-test"

OTHER_MACHINE = """
import socket, sys
socket.gethostname = lambda: "another-machine"  # what a worker of another machine writes as its owner
from harvester.frontier import FrontierStore
from harvester.owners import make_owner
from harvester.settings import Settings

store = FrontierStore.open(Settings.load(database_url=sys.argv[1]))
owner = make_owner("extract-0")
assert store.claim_hosts(owner, limit=1, lease_s=600, hosts=[sys.argv[2]]) == [sys.argv[2]]
run = store.resume_or_start_run("extract", profile={"name": "shared"}, owner=owner, user_agent="harvester-test")
print(owner, run, flush=True)
sys.stdin.read()  # until the test ends it
"""


def dsn(pg_url: str) -> str:
    return pg_url.replace("postgresql+psycopg://", "postgresql://")


def session_there(pg_url: str, owner: str) -> bool:
    where = owner_process(owner)
    assert where is not None
    with psycopg.connect(dsn(pg_url), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (session_name(*where),)).fetchone()
    return bool(row and row[0])


def wait_for(condition: object, what: str) -> None:
    """Until ``condition()`` holds: an event the test needs, bounded generously (a loaded machine), not timed."""
    for _ in range(1200):
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


@contextmanager
def other_machine(pg_url: str) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """A worker of "another machine" holding the host's lease (600 s) and an extraction run: (process, owner,
    run id)."""
    process = subprocess.Popen([sys.executable, "-c", OTHER_MACHINE, pg_url, ORIGIN], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        owner, run = process.stdout.readline().split()
        assert owner.startswith("another-machine:"), owner
        yield process, owner, int(run)
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
        process.wait(60)


def holder(store: FrontierStore) -> str | None:
    with store.db.engine.connect() as conn:
        value = conn.exec_driver_sql("SELECT lease_owner FROM hosts WHERE origin = %s", (ORIGIN,)).scalar_one()
    return None if value is None else str(value)


@pytest.fixture
def store(pg_url: str) -> Iterator[FrontierStore]:
    with FrontierStore.open(Settings.load(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{ORIGIN}/p{n}", UrlKind.DETAIL, "seed") for n in range(5)])
        yield store


def test_another_machines_worker_is_alive_while_its_session_is_and_dead_the_moment_it_ends(
        pg_url: str, store: FrontierStore) -> None:
    me = make_owner("extract-1")
    try:
        with other_machine(pg_url) as (process, theirs, their_run):
            # Alive: its run is its own, its host stays its own (no PID of it here says anything).
            assert store.liveness.is_live(theirs) and not store.liveness.is_dead(theirs)
            mine = store.resume_or_start_run("extract", profile=PROFILE, owner=me, user_agent=UA)
            assert mine != their_run
            store.finish_run(mine, status="completed", counters={})
            assert store.last_cycle()["status"] == "running"  # type: ignore[index] # theirs still works in it
            asyncio.run(release_dead_holders(store, me, [ORIGIN]))
            assert holder(store) == theirs
            process.kill()  # its session ends with it
            wait_for(lambda: not session_there(pg_url, theirs), "the killed worker's session ended")
            # Dead at once: its host comes back though its lease had 600 s to run; its run is resumed.
            assert store.liveness.is_dead(theirs)
            asyncio.run(release_dead_holders(store, me, [ORIGIN]))
            assert holder(store) is None
            assert store.claim_hosts(me, limit=1, lease_s=60, hosts=[ORIGIN]) == [ORIGIN]
            other = make_owner("extract-2")
            assert store.resume_or_start_run("extract", profile=PROFILE, owner=other, user_agent=UA) == their_run
            retire_owner(other)
    finally:
        retire_owner(me)


def test_a_cycle_closes_when_the_other_machines_worker_beside_it_is_dead(pg_url: str, store: FrontierStore) -> None:
    me = make_owner("extract-1")
    try:
        with other_machine(pg_url) as (process, theirs, their_run):
            mine = store.start_run("extract", profile=PROFILE, owner=me, user_agent=UA)
            assert store.get_run(mine)["cycle_id"] == store.get_run(their_run)["cycle_id"]  # type: ignore[index]
            first = store.start_run("extract", profile=PROFILE, owner=me, user_agent=UA)
            store.finish_run(first, status="completed", counters={})
            assert store.last_cycle()["status"] == "running"  # type: ignore[index] # the other one still works
            process.kill()
            wait_for(lambda: not session_there(pg_url, theirs), "the killed worker's session ended")
            store.finish_run(mine, status="completed", counters={})
            assert store.last_cycle()["status"] == "completed"  # type: ignore[index]
    finally:
        retire_owner(me)


def test_a_frozen_worker_keeps_its_session_and_its_leases_until_they_lapse(pg_url: str, store: FrontierStore) -> None:
    me = make_owner("extract-1")
    try:
        with other_machine(pg_url) as (process, theirs, _run):
            os.kill(process.pid, signal.SIGSTOP)
            assert session_there(pg_url, theirs) and store.liveness.is_live(theirs)
            asyncio.run(release_dead_holders(store, me, [ORIGIN]))
            assert holder(store) == theirs
            assert store.claim_hosts(me, limit=1, lease_s=60, hosts=[ORIGIN]) == []
            # Its lease lapses by time: then the host is another's, frozen holder or not.
            later = utcnow() + timedelta(seconds=601)
            assert store.claim_hosts(me, limit=1, lease_s=60, hosts=[ORIGIN], now=later) == [ORIGIN]
    finally:
        retire_owner(me)


def test_a_session_the_server_ends_voids_this_process_lease_deadlines_until_renewed(
        pg_url: str, store: FrontierStore, caplog: pytest.LogCaptureFixture) -> None:
    """Others judge this process dead the moment its session ends (and may take its hosts): its local deadlines
    stop counting then, until a renewal says the hosts are still its own; the session is opened again."""
    me = make_owner("extract-1")
    try:
        holds = HostHolds(store, me, lease_s=60)
        session = store.liveness.session  # type: ignore[attr-defined]
        assert session is not None
        asked_at, losses = lease_clock(), store.liveness.losses
        holds.grant(store.claim_hosts(me, limit=1, lease_s=60, hosts=[ORIGIN]), asked_at, losses)
        assert holds.holds(ORIGIN)
        with psycopg.connect(dsn(pg_url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                          (session.name,))
        wait_for(lambda: store.liveness.losses > losses, "the lost session noticed")
        assert not holds.holds(ORIGIN)
        wait_for(lambda: session_there(pg_url, me) and store.liveness.present, "the session opened again")
        assert not holds.holds(ORIGIN)  # still void: others may have taken the host meanwhile
        with caplog.at_level(logging.WARNING, logger="harvester.phases.leases"):
            assert asyncio.run(holds.renew([ORIGIN])) == []  # it is still ours
        # The renewal says why it comes late: the session was lost, not 60 s past a deadline that was not.
        assert "liveness session was lost" in caplog.text and "after their local deadline" not in caplog.text
        assert holds.holds(ORIGIN)
        assert session.lost == 1
    finally:
        retire_owner(me)


def test_a_host_being_handed_back_is_neither_renewed_nor_said_lost(
        store: FrontierStore, caplog: pytest.LogCaptureFixture) -> None:
    """The window of a hand-back: the local deadline is dropped, then the lease goes back in a statement of its
    own, and only then does the host leave the worker's held set. The lease keeper ticking in that window read
    the host as 300 s past its deadline, renewed it, found it released and logged it lost to another worker
    (CI, ``test_sharing``'s late worker on PostgreSQL)."""
    me = make_owner("extract-1")
    other = "https://b.test"
    store.add_discovered([DiscoveredUrl(f"{other}/p", UrlKind.DETAIL, "seed")])
    try:
        holds = HostHolds(store, me, lease_s=60)
        asked_at, losses = lease_clock(), store.liveness.losses
        held = store.claim_hosts(me, limit=2, lease_s=60, hosts=[ORIGIN, other])
        assert sorted(held) == [ORIGIN, other]
        holds.grant(held, asked_at, losses)
        holds.drop(other)
        store.release_hosts(me, [other])  # the hand-back's statement; the host is still in the held set
        assert not holds.due_for_renewal(held)  # the other host's lease is fresh; the dropped one needs nothing
        with caplog.at_level(logging.WARNING, logger="harvester.phases.leases"):
            assert asyncio.run(holds.renew(held)) == []
        assert caplog.text == "" and holds.lost == set()
        assert holds.holds(ORIGIN) and not holds.holds(other)
    finally:
        retire_owner(me)


def a_pid() -> int:
    """A PID for an owner of "another machine" the test writes itself: its session name must be no other test's
    (``pg_stat_activity`` is the whole server's)."""
    return random.randrange(10_000_000, 2_000_000_000)


def test_an_older_harvesters_worker_without_a_session_keeps_its_hosts_until_its_lease_lapses(
        store: FrontierStore) -> None:
    """A rolling deploy: another machine still runs a harvester that keeps no liveness session (its owner id has
    no ``SESSION_MARK``) and sends until its own lease deadline. It is not judged dead for the session it never
    had: taking its hosts put two processes on one host. Its leases lapse by time, as before."""
    me = make_owner("extract-1")
    older = f"another-machine:{a_pid()}:extract-0:0123abcd"
    try:
        assert store.claim_hosts(older, limit=1, lease_s=600, hosts=[ORIGIN]) == [ORIGIN]
        assert not store.liveness.is_dead(older) and not store.liveness.is_live(older)  # not known either way
        assert store.liveness.dead_of([older]) == []
        asyncio.run(release_dead_holders(store, me, [ORIGIN]))
        asyncio.run(recover_leases(store))
        assert holder(store) == older
        later = utcnow() + timedelta(seconds=601)
        assert store.claim_hosts(me, limit=1, lease_s=60, hosts=[ORIGIN], now=later) == [ORIGIN]
    finally:
        retire_owner(me)


def test_the_pid_rule_still_judges_this_machines_older_owners_and_a_marked_owner_is_judged_by_its_session(
        store: FrontierStore) -> None:
    me = make_owner("extract-1")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(60)
    older_here = f"{owner_process(me)[0]}:{gone.pid}:extract-0:0123abcd"  # type: ignore[index]
    marked_there = f"another-machine:{a_pid()}:extract-0:0123abcd{SESSION_MARK}"  # no session: dead
    try:
        assert store.liveness.dead_of([older_here, marked_there]) == [older_here, marked_there]
        assert store.claim_hosts(marked_there, limit=1, lease_s=600, hosts=[ORIGIN]) == [ORIGIN]
        asyncio.run(release_dead_holders(store, me, [ORIGIN]))
        assert holder(store) is None
    finally:
        retire_owner(me)


def test_a_holder_whose_session_came_back_after_the_verdict_keeps_the_hosts_it_renewed(
        pg_url: str, store: FrontierStore) -> None:
    """``dead_of`` and the release are two transactions: a holder whose session the server ended may open it again
    (its watcher thread) and renew in between. The release asks again, in its own transaction."""
    pid = a_pid()
    theirs = f"another-machine:{pid}:extract-0:0123abcd{SESSION_MARK}"
    assert store.claim_hosts(theirs, limit=1, lease_s=600, hosts=[ORIGIN]) == [ORIGIN]
    assert store.liveness.dead_of([theirs]) == [theirs]  # its session is away: the verdict
    with psycopg.connect(dsn(pg_url), autocommit=True, application_name=session_name("another-machine", pid)):
        assert store.renew_hosts(theirs, [ORIGIN], lease_s=600) == [ORIGIN]  # back, and confirmed its hosts
        assert store.release_owner(theirs) == 0
        assert holder(store) == theirs
    wait_for(lambda: not session_there(pg_url, theirs), "the session ended again")
    store.release_owner(theirs)
    assert holder(store) is None


STATUS = """
import sys, threading
from harvester.cli_tables import print_problems, status_of
from harvester.frontier import liveness
from harvester.settings import Settings

settings = Settings.load(database_url=sys.argv[1])
status_of(settings)
print_problems(settings)
print(len(liveness._SESSIONS), sum(t.name == "harvester-liveness" for t in threading.enumerate()))
"""


def test_status_opens_no_liveness_session(pg_url: str, store: FrontierStore) -> None:
    """A reader holds no lease and runs nothing: no session of its own (a connection and a thread per status)."""
    done = subprocess.run([sys.executable, "-c", STATUS, pg_url], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "0"]


def test_a_host_handed_back_while_its_renewal_is_under_way_is_not_said_lost(
        pg_url: str, store: FrontierStore, caplog: pytest.LogCaptureFixture) -> None:
    """The rest of the hand-back window: the keeper's renewal already counted the host among those it renews (its
    local deadline was still there), and the hand-back's drop and release ran while the renewal statement was on
    its way (``db`` runs both in threads of their own). The renewal found the host released, not kept, and the
    keeper logged 'lease on ... lost to another worker' for a host this worker gave back itself. Made certain
    here: the renewal statement waits on the row lock another session holds on the first host's row, the
    hand-back of the second runs meanwhile, then the lock goes."""
    me = make_owner("extract-1")
    other = "https://b.test"
    store.add_discovered([DiscoveredUrl(f"{other}/p", UrlKind.DETAIL, "seed")])

    async def scenario(holds: HostHolds, held: list[str]) -> list[str]:
        with psycopg.connect(dsn(pg_url)) as blocker:
            blocker.execute("SELECT id FROM hosts WHERE origin = %s FOR UPDATE", (ORIGIN,))
            renewal = asyncio.create_task(holds.renew(held))
            for _ in range(200):  # until the renewal statement waits on the lock
                await asyncio.sleep(0.02)
                waiting = blocker.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()").fetchone()
                if waiting and waiting[0]:
                    break
            holds.drop(other)  # the hand-back (ExtractWork._release): the deadline, then the frontier's lease
            await asyncio.to_thread(store.release_hosts, me, [other])
            blocker.commit()
        return await renewal

    try:
        holds = HostHolds(store, me, lease_s=60)
        asked_at, losses = lease_clock(), store.liveness.losses
        held = store.claim_hosts(me, limit=2, lease_s=60, hosts=[ORIGIN, other])
        assert sorted(held) == [ORIGIN, other]
        holds.grant(held, asked_at, losses)
        with caplog.at_level(logging.WARNING, logger="harvester.phases.leases"):
            assert asyncio.run(scenario(holds, held)) == []
        assert holds.lost == set()
        assert holds.holds(ORIGIN) and not holds.holds(other)
    finally:
        retire_owner(me)
