"""A deadlock between two writers on PostgreSQL costs a retry, not the run.

Before: with discovery and extraction writing at once (per-host pipelining), PostgreSQL broke a deadlock between
their inserts of the same new URLs by failing one of them, and the whole harvest failed with a StoreError. Now the
victim's unit of work (rolled back whole) is a ``WriteConflict``, and ``runtime.db`` asks it again.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from harvester.errors import WriteConflict
from harvester.frontier import FrontierStore
from harvester.runtime import db
from harvester.settings import Settings


class Meeting:
    """Both writers hold their first row before either asks for its second (only on their first attempt)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2)
        self.met = False

    def wait(self) -> None:
        if not self.met:
            self.barrier.wait(timeout=10)
            self.met = True


def crossing_updates(store: FrontierStore, first: str, second: str, meeting: Meeting) -> None:
    """One transaction that locks ``first``'s row, waits for the other, then wants ``second``'s: a deadlock."""
    with store.db.tx() as tx:
        tx.conn.exec_driver_sql("UPDATE hosts SET failures = failures + 1 WHERE origin = %s", (first,))
        meeting.wait()
        tx.conn.exec_driver_sql("UPDATE hosts SET failures = failures + 1 WHERE origin = %s", (second,))


@pytest.mark.postgres
async def test_a_deadlock_victim_is_a_write_conflict_and_is_asked_again(pg_url):
    settings = Settings.load(database_url=pg_url)
    with FrontierStore.open(settings, upgrade=True) as a, FrontierStore.open(settings) as b:
        a.ensure_hosts(["http://a.test", "http://b.test"])

        # Without the retry: one side is the victim, and it is told so precisely.
        meeting = Meeting()
        outcomes: list[BaseException | None] = []

        def run(store: FrontierStore, first: str, second: str) -> None:
            try:
                crossing_updates(store, first, second, meeting)
                outcomes.append(None)
            except BaseException as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=run, args=(a, "http://a.test", "http://b.test")),
                   threading.Thread(target=run, args=(b, "http://b.test", "http://a.test"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "WriteConflict"], outcomes
        assert any(isinstance(o, WriteConflict) for o in outcomes)

        # Through runtime.db: the victim is asked again and both units of work are written.
        meeting = Meeting()
        await asyncio.gather(db(crossing_updates, a, "http://a.test", "http://b.test", meeting),
                             db(crossing_updates, b, "http://b.test", "http://a.test", meeting))
        with a.db.tx(write=False) as tx:
            failures = dict(tx.conn.exec_driver_sql("SELECT origin, failures FROM hosts").all())
    # First round: one writer's two updates (the victim's rolled back); second: both, the victim's asked again.
    assert failures == {"http://a.test": 3, "http://b.test": 3}, failures
