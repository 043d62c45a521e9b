"""The SQLite writers of one process take turns on one lock per file, handed on in the order they came.

A harvest opens several stores on one file (the cycle's, discovery's, extraction's, the client's). With a lock per
store they met only at SQLite's busy handler (sleeps of up to 100 ms, then "database is locked"). Real SQLite files
and threads; no timing is asserted, only order.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.write_turns import WriteLock, writer_lock


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


def _queued(lock: WriteLock, n: int) -> bool:
    return len(lock._waiting) == n


def _writer(lock: WriteLock, order: list[str], name: str) -> threading.Thread:
    def run() -> None:
        with lock:
            order.append(name)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_writer_letting_go_hands_the_lock_to_the_one_waiting():
    """A thread writing transaction after transaction (``rejudge_urls``' batches) took a lock merely let go
    straight back, before the waiter it woke could run: every other writer waited for its whole loop."""
    lock = WriteLock()
    order: list[str] = []
    other: list[threading.Thread] = []
    with lock:
        order.append("loop 1")
        other.append(_writer(lock, order, "record"))
        _wait_until(lambda: _queued(lock, 1), "the record waits")
    with lock:  # at once, in the same thread: the record was handed the lock first
        order.append("loop 2")
    other[0].join(30)
    assert order == ["loop 1", "record", "loop 2"]


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
