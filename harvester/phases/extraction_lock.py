"""One extraction at a time on a SQLite frontier: a second process is refused, never interleaved.

SQLite serializes writers but not workers: two extraction processes on one file would each lease hosts and
politeness would be kept per process, not per host (a killed runner's orphan and its restarted rerun did exactly
that). An extraction holds an exclusive advisory lock (``flock``) on ``<database>.extract.lock`` for its whole
run; the kernel releases it when the holder dies, however it dies, so a crash never leaves a stale lock. Several
workers inside one process share it. PostgreSQL needs none of this: there host leases are taken with
``FOR UPDATE SKIP LOCKED`` and any number of processes may extract at once.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from harvester.errors import FrontierBusy
from harvester.frontier.base import sqlite_file
from harvester.settings import Settings

_HELD: dict[str, list[int]] = {}
"""Lock path -> [file descriptor, holders in this process]."""


def lock_path(settings: Settings) -> str | None:
    """The lock file of a SQLite frontier on disk (None: another database, or SQLite in memory)."""
    database = sqlite_file(settings.database_url)  # the frontier reads its URL: phases speak no SQL
    if database is None or str(database).startswith("file::memory:"):
        return None
    return os.path.abspath(database) + ".extract.lock"


@contextmanager
def one_extraction(settings: Settings) -> Iterator[None]:
    """Hold the frontier's extraction lock for the body (re-entrant within this process)."""
    path = lock_path(settings)
    if path is None:
        yield
        return
    held = _HELD.get(path)
    if held is None:
        held = _HELD[path] = [_take(path, settings), 0]
    held[1] += 1
    try:
        yield
    finally:
        held[1] -= 1
        if held[1] == 0:
            del _HELD[path]
            os.close(held[0])  # closing the descriptor releases the flock


def _take(path: str, settings: Settings) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        database = path.removesuffix(".extract.lock")
        raise FrontierBusy(
            f"another extraction (pid {holder}) is running on the SQLite frontier {database}: wait for it to end, "
            f"or stop it, then rerun (the rerun resumes). SQLite takes one extraction at a time; for several at once, "
            f"use PostgreSQL (HARVESTER_DATABASE_URL=postgresql+psycopg://...)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
    return fd
