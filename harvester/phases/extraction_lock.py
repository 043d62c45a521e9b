"""One extraction at a time on a SQLite frontier: a second process is refused, never interleaved.

SQLite serializes writers but not workers: two extraction processes on one file would each lease hosts and
politeness would be kept per process, not per host (a killed runner's orphan and its restarted rerun did exactly
that). An extraction holds an exclusive advisory lock (``flock``) on ``<database>.extract.lock`` for its whole
run; the kernel releases it when the holder dies, however it dies, so a crash never leaves a stale lock. Several
workers inside one process share it. PostgreSQL needs none of this: there host leases are taken with
``FOR UPDATE SKIP LOCKED`` and any number of processes may extract at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from harvester.errors import FrontierBusy
from harvester.frontier.base import sqlite_file
from harvester.runtime import exclusive_file
from harvester.settings import Settings


def lock_path(settings: Settings) -> str | None:
    """The lock file of a SQLite frontier on disk (None: another database, or SQLite in memory)."""
    database = sqlite_file(settings.database_url)  # the frontier reads its URL: phases speak no SQL
    if database is None or str(database).startswith("file::memory:"):
        return None
    return os.path.abspath(database) + ".extract.lock"


@contextmanager
def one_extraction(settings: Settings) -> Iterator[None]:
    """Hold the frontier's extraction lock for the body (re-entrant within this process: ``runtime.exclusive_file``)."""
    path = lock_path(settings)
    if path is None:
        yield
        return
    database = path.removesuffix(".extract.lock")

    def busy(holder: str) -> FrontierBusy:
        return FrontierBusy(
            f"another extraction (pid {holder}) is running on the SQLite frontier {database}: wait for it to end, "
            f"or stop it, then rerun (the rerun resumes). SQLite takes one extraction at a time; for several at once, "
            f"use PostgreSQL (HARVESTER_DATABASE_URL=postgresql+psycopg://...)"
        )

    with exclusive_file(path, busy):
        yield
