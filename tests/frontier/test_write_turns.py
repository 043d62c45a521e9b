"""The SQLite writers of one process take turns on one lock per file, and extraction's completion batches go last.

A harvest opens several stores on one file (the cycle's, discovery's, extraction's, the client's). With a lock per
store they met only at SQLite's busy handler (sleeps of up to 100 ms, then "database is locked"), and with first come
first served the slow host's discovery records waited behind the fast hosts' completion batches: seed4's slow host
started its pages ~1.4 s late (issue 31). Real SQLite files and threads; no timing is asserted, only order.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

from harvester.frontier import FrontierStore
from harvester.runtime import db
from harvester.settings import Settings
from harvester.write_turns import WriteLock, deferred_writes, writer_lock, writes_deferred


def _settings(path: Path, **overrides: object) -> Settings:
    return Settings().with_overrides(database_url=f"sqlite:///{path}", **overrides)


def _wait_until(check: object, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def test_two_stores_on_one_file_take_turns_instead_of_failing_at_the_busy_timeout(tmp_path: Path):
    """Store B writes while store A holds a write transaction longer than SQLite's busy timeout: B waits its turn on
    the process's lock for the file and writes. With a lock per store, B met SQLite's lock and failed with
    "database is locked" after the busy timeout."""
    path = tmp_path / "f.db"
    settings = _settings(path, **{"store.sqlite_busy_timeout_s": 0.05})
    FrontierStore.open(settings).close()  # the schema exists before the two meet
    other_spelling = _settings(tmp_path / "." / "f.db", **{"store.sqlite_busy_timeout_s": 0.05})
    held, release, errors, written = threading.Event(), threading.Event(), [], threading.Event()

    with FrontierStore.open(settings) as a, FrontierStore.open(other_spelling) as b:
        lock = a.db._sqlite_writer

        def hold_a_write() -> None:
            with a.db.tx() as tx:
                tx.conn.exec_driver_sql("CREATE TABLE probe (x INTEGER)")
                held.set()
                release.wait(30)

        def write_beside() -> None:
            try:
                with b.db.tx() as tx:
                    tx.conn.exec_driver_sql("CREATE TABLE probe2 (x INTEGER)")
                written.set()
            except Exception as exc:  # the failure without a shared lock: "database is locked"
                errors.append(exc)

        holder = threading.Thread(target=hold_a_write)
        holder.start()
        assert held.wait(30)
        writer = threading.Thread(target=write_beside)
        writer.start()
        # B either waits its turn on the process's lock, or (a lock of its own) has met SQLite's and failed.
        _wait_until(lambda: errors or lock._turn._waiters, "store B waits or fails")
        release.set()
        holder.join(30)
        writer.join(30)
    assert errors == []
    assert written.is_set()


def test_a_deferred_writer_lets_a_waiting_writer_go_first():
    lock = WriteLock()
    order: list[str] = []

    def write(name: str, *, deferred: bool) -> None:
        def run() -> None:
            with lock:
                order.append(name)
        if deferred:
            with deferred_writes():
                run()
        else:
            run()

    with lock:  # the current writer
        batch = threading.Thread(target=write, args=("completions",), kwargs={"deferred": True})
        batch.start()
        _wait_until(lambda: batch.is_alive() and lock._turn._waiters, "the batch waits")  # type: ignore[attr-defined]
        record = threading.Thread(target=write, args=("discovery record",), kwargs={"deferred": False})
        record.start()
        _wait_until(lambda: lock._prompt == 1, "the record waits")
    batch.join(30)
    record.join(30)
    assert order == ["discovery record", "completions"]


def test_a_deferred_writer_is_not_starved(monkeypatch):
    """A writer that never lets go of its place in line (a record waiting for ever) holds a batch back
    ``DEFER_AT_MOST_S`` at most."""
    import harvester.write_turns as write_turns

    monkeypatch.setattr(write_turns, "DEFER_AT_MOST_S", 0.05)
    lock = WriteLock()
    lock._prompt = 1  # a record waiting that never takes its turn
    done = threading.Event()

    def batch() -> None:
        with deferred_writes(), lock:
            done.set()

    thread = threading.Thread(target=batch)
    thread.start()
    assert done.wait(30)
    thread.join(30)


def test_the_lock_is_reentrant_in_its_thread():
    lock = WriteLock()
    with lock, lock:
        pass
    taken = threading.Event()

    def other() -> None:
        with lock:
            taken.set()

    thread = threading.Thread(target=other)
    thread.start()
    assert taken.wait(30)
    thread.join(30)


def test_deferred_store_calls_run_in_their_own_threads_with_the_mark():
    """A batch waiting for its turn holds none of the threads discovery's records and reads run in."""

    def where() -> tuple[str, bool]:
        return threading.current_thread().name, writes_deferred()

    async def main() -> tuple[tuple[str, bool], tuple[str, bool]]:
        plain = await db(where)
        with deferred_writes():
            deferred = await db(where)
        return plain, deferred

    (plain_thread, plain_mark), (deferred_thread, deferred_mark) = asyncio.run(main())
    assert not plain_mark and deferred_mark
    assert deferred_thread.startswith("deferred-writes") and not plain_thread.startswith("deferred-writes")


def test_a_forked_child_starts_with_the_lock_free(tmp_path: Path):
    """A child forked while a parent's thread writes gets a lock of its own: the copy would never be let go."""
    path = str(tmp_path / "f.db")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with writer_lock(path):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    try:
        pid = os.fork()
        if pid == 0:  # the child: take the lock and leave
            code = 1
            try:
                with writer_lock(path):
                    code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the child never got the lock"
    finally:
        release.set()
        holder.join(30)
