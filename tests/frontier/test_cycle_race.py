"""Extraction processes started at the same instant open one cycle between them, not one each.

A stranger started three ``harvester extract`` on one PostgreSQL frontier 11 ms apart: the first opened cycle 1,
the other two (READ COMMITTED: neither saw the first's uncommitted cycle) opened cycle 2, and each cycle's
summary counted part of the harvest (1,184 of 1,200 pages; cycle 1 stayed ``running`` until a later run closed
it). Here two starts are made to interleave exactly that way: each waits, after looking for an open cycle, for the
other to have looked too, so without the serialisation both see none and both open one. With it, the second
cannot look before the first has committed, the first's wait for it gives up, and the second joins its cycle.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, event
from sqlalchemy.pool import NullPool

from harvester.frontier import FrontierStore
from harvester.frontier.cycles import Cycles
from harvester.owners import SESSION_MARK, make_owner, retire_owner
from harvester.settings import Settings

PROFILE = {"name": "shop", "seeds": ["http://127.0.0.1:1/"]}
LOOKED_WAIT_S = 3.0
"""How long a start that has looked waits for the other to look too: long enough for a loaded machine's other
thread to reach its look when nothing holds it back (without the fix), only a pause when something does."""


def test_two_extractions_started_together_share_one_cycle(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    looked = threading.Barrier(2)
    look = Cycles.open_cycle

    def look_then_wait_for_the_other(self: Cycles, conn: Connection, profile: dict[str, Any] | None) -> int | None:
        found = look(self, conn, profile)
        # Broken: the other could not look yet (it waits for this one's commit).
        with contextlib.suppress(threading.BrokenBarrierError):
            looked.wait(LOOKED_WAIT_S)
        return found

    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    monkeypatch.setattr(Cycles, "open_cycle", look_then_wait_for_the_other)
    stores = [FrontierStore.open(settings) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda store: store.start_run("extract", profile=PROFILE, owner="w"), stores))
    finally:
        for store in stores:
            store.close()
    engine = create_engine(db_url, poolclass=NullPool)
    with engine.connect() as conn:
        cycles = conn.exec_driver_sql("SELECT count(*) FROM cycles").scalar_one()
    engine.dispose()
    assert len(set(runs)) == 2
    assert cycles == 1, f"two extractions started together opened {cycles} cycles"


def test_the_cycle_extractions_share_is_closed_by_the_last_of_them(db_url: str) -> None:
    """Extractions started side by side share one cycle: the first to end closed it while the others still fetched,
    and their pages then counted in a closed cycle (a stranger's three processes)."""
    settings = Settings.load(database_url=db_url)
    owners = [make_owner("extract") for _ in range(2)]  # two live workers of this process
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            first, second = (store.start_run("extract", profile=PROFILE, owner=owner) for owner in owners)
            store.finish_run(first, status="completed", counters={})
            assert store.last_cycle()["status"] == "running"  # type: ignore[index]
            store.finish_run(second, status="completed", counters={})
            assert store.last_cycle()["status"] == "completed"  # type: ignore[index]
    finally:
        for owner in owners:
            retire_owner(owner)


def test_two_extractions_ending_together_close_the_cycle_they_share(db_url: str) -> None:
    """Each run's end saw the other still running (neither had committed) and neither closed the cycle, left
    ``running`` for the next extraction's pages (review). Each end here waits, before its COMMIT, for the other's."""
    settings = Settings.load(database_url=db_url)
    owners = [make_owner("extract") for _ in range(2)]
    both = threading.Barrier(2)

    def before_commit(conn: object) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):  # broken: the other waits for this one's commit
            both.wait(LOOKED_WAIT_S)

    with FrontierStore.open(settings, upgrade=True) as store:
        runs = [store.start_run("extract", profile=PROFILE, owner=owner) for owner in owners]
    stores = [FrontierStore.open(settings) for _ in range(2)]
    try:
        for store in stores:
            event.listen(store.db.engine, "commit", before_commit)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda pair: pair[0].finish_run(pair[1], status="completed", counters={}),
                          zip(stores, runs, strict=True)))
        for store in stores:
            event.remove(store.db.engine, "commit", before_commit)
        cycle = stores[0].last_cycle()
    finally:
        for store in stores:
            store.close()
        for owner in owners:
            retire_owner(owner)
    assert cycle is not None and cycle["status"] == "completed", cycle


def _dead_owner() -> str:
    """An owner id of a process of this machine that has ended (``make_owner``'s form)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}:extract:0000dead{SESSION_MARK}"


@pytest.mark.parametrize("stopped", [True, False], ids=["sigterm", "kill-9"])
def test_the_last_extraction_closes_the_runs_its_cycle_left_behind(db_url: str, stopped: bool) -> None:
    """Three workers, one stopped by SIGTERM (its row kept ``running`` for its rerun, with why) or killed: the others
    finished the cycle, and the stopped one's row stayed ``running`` for good (no rerun resumes a run of a closed
    cycle) while ``status`` said "the next run resumes it" (stranger 45). Closing the cycle closes it, saying why."""
    settings = Settings.load(database_url=db_url)
    live = make_owner("extract")
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            gone = store.start_run("extract", profile=PROFILE, owner=_dead_owner())
            last = store.start_run("extract", profile=PROFILE, owner=live)
            if stopped:
                store.stop_run(gone, counters={"stopped": "SIGTERM received", "hosts": {}})
            store.finish_run(last, status="completed", counters={})
            assert store.last_cycle()["status"] == "completed"  # type: ignore[index]
            row = store.get_run(gone)
            assert row is not None and row["status"] == "abandoned" and row["finished_at"] is not None
            reason = (row["counters"] or {})["reason"]
            assert f"run {last} finished its cycle" in reason
            assert ("SIGTERM received" in reason) is stopped
            shown = store.last_run("extract", stopped=True)
            assert shown is not None and shown["id"] == last
    finally:
        retire_owner(live)
