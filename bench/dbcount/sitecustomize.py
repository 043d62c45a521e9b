"""Counts a process's PostgreSQL traffic for bench/scaleout.py ``--count``: loaded by Python at start (this directory
is put on PYTHONPATH), it wraps psycopg's cursor and connection and, at exit, writes what it saw to
``$BENCH_DBCOUNT_DIR/<pid>.json``. Load-independent evidence: statements and round trips per page do not change with
what else the machine runs, where walls do.

Counted: each statement (by its first words), the wall time spent in it (the server's work, a lock wait, the
scheduling of both sides), commits and rollbacks that ended a transaction (psycopg sends BEGIN before a transaction's
first statement: one more round trip each), pipelines (one round trip for all their statements), and the process's
CPU at exit. Only for the bench: it patches a driver.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import resource
import threading
import time
from collections import Counter, defaultdict

_DIR = os.environ.get("BENCH_DBCOUNT_DIR")


def _install(directory: str) -> None:
    import psycopg
    from psycopg import pq

    lock = threading.Lock()
    statements: Counter[str] = Counter()
    seconds: dict[str, float] = defaultdict(float)
    ends: Counter[str] = Counter()
    state = {"pipelines": 0, "piped": 0}
    local = threading.local()
    started = time.monotonic()

    def kind(query: object) -> str:
        text = query.decode() if isinstance(query, bytes) else str(query)
        text = re.sub(r"\s+", " ", text).strip()
        words = text.split(" ")
        head = " ".join(words[:2]).upper()
        for marker in (" FROM ", " INTO ", "UPDATE "):
            at = text.upper().find(marker)
            if at >= 0:
                rest = text[at + len(marker):].split(" ")
                return f"{head} .. {marker.strip()} {rest[0]}"[:60]
        return text[:60]

    def wrap_execute(cls: type, name: str) -> None:
        original = getattr(cls, name)

        def execute(self, query, *args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.monotonic()
            try:
                return original(self, query, *args, **kwargs)
            finally:
                elapsed = time.monotonic() - t0
                key = kind(query)
                with lock:
                    statements[key] += 1
                    seconds[key] += elapsed
                    if getattr(local, "piped", 0):
                        state["piped"] += 1

        setattr(cls, name, execute)

    wrap_execute(psycopg.Cursor, "execute")
    wrap_execute(psycopg.Cursor, "executemany")

    def wrap_end(name: str) -> None:
        original = getattr(psycopg.Connection, name)

        def end(self):  # type: ignore[no-untyped-def]
            real = self.pgconn.transaction_status != pq.TransactionStatus.IDLE
            t0 = time.monotonic()
            try:
                return original(self)
            finally:
                if real:
                    with lock:
                        ends[name] += 1
                        seconds[name.upper()] += time.monotonic() - t0

        setattr(psycopg.Connection, name, end)

    wrap_end("commit")
    wrap_end("rollback")

    original_connect = psycopg.Connection.connect.__func__  # type: ignore[attr-defined]

    def connect(cls, /, conninfo="", **kwargs):  # type: ignore[no-untyped-def]
        # Named by pid, so the bench's sampler of pg_stat_activity tells the processes' sessions apart (the one an
        # extraction process renames keeps the pid at the end of its name).
        kwargs.setdefault("application_name", f"bench:{os.getpid()}")
        return original_connect(cls, conninfo, **kwargs)

    psycopg.Connection.connect = classmethod(connect)  # type: ignore[method-assign,assignment]

    original_pipeline = psycopg.Connection.pipeline

    @contextlib.contextmanager
    def pipeline(self):  # type: ignore[no-untyped-def]
        with original_pipeline(self) as p:
            local.piped = getattr(local, "piped", 0) + 1
            try:
                yield p
            finally:
                local.piped -= 1
                with lock:
                    state["pipelines"] += 1

    psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign]

    def dump() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        out = {
            "pid": os.getpid(), "wall_s": time.monotonic() - started,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "statements": dict(statements), "seconds": dict(seconds), "ends": dict(ends), **state,
        }
        with open(os.path.join(directory, f"{os.getpid()}.json"), "w") as fh:
            json.dump(out, fh)

    atexit.register(dump)


if _DIR:
    with contextlib.suppress(ImportError):  # a process without psycopg (the test web): nothing to count
        _install(_DIR)
