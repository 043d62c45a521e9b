"""Turns at a database file's write lock among the writers of one process (``WriteLock``, one per file:
``writer_lock``), and the writes no request waits for, which go last (``deferred_writes``) in threads of their own
(``off_loop``). A harvest opens several stores on one SQLite file; seed4's slow host (issue 31) showed what first
come, first served costs there: its discovery's records waited behind the fast hosts' completion batches."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import ParamSpec, Self, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_DEFERRED: ContextVar[bool] = ContextVar("harvester_deferred_writes", default=False)


@contextlib.contextmanager
def deferred_writes() -> Iterator[None]:
    """The store calls made in this block (by this task, in the threads ``db`` runs them in, which copy its
    context) write behind every other writer of their database file (``WriteLock``): extraction's
    completion batches, which no request waits for, behind discovery's records and the claims that hosts' next
    requests wait for."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def writes_deferred() -> bool:
    """Whether this thread's or task's writes are deferred (``deferred_writes``)."""
    return _DEFERRED.get()


DEFERRED_THREADS = 2
"""Threads that run deferred store calls (``deferred_writes``): their own, so a batch waiting for its turn at the
write lock never holds one of the threads discovery's records and reads run in."""

_deferred_pool: ThreadPoolExecutor | None = None
_DEFERRED_POOL_LOCK = threading.Lock()


async def off_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn`` in a thread (``runtime.db``): the loop's default pool, or the deferred calls' own
    (``DEFERRED_THREADS``). Held by deferred batches waiting for the write lock, the default pool's six threads
    (two cores) made every other store call and parse wait 20-60 ms for a thread in seed4 (issue 31)."""
    if not _DEFERRED.get():
        return await asyncio.to_thread(fn, *args, **kwargs)
    global _deferred_pool
    with _DEFERRED_POOL_LOCK:
        if _deferred_pool is None:
            _deferred_pool = ThreadPoolExecutor(DEFERRED_THREADS, thread_name_prefix="deferred-writes")
        pool = _deferred_pool
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(pool, call)


DEFER_AT_MOST_S = 0.35
"""How long a deferred write (``deferred_writes``) lets other writers of its file go first, at most. In seed4 the
lock is busy for the first seconds: the records of the slow host's discovery got it in time only when the fast
hosts' batches could wait this long (ratio 1.095 at 0.1 s, 1.055-1.072 at 0.35-0.4 s); with
``completions.FLUSH_EVERY_S`` before it, a completion is written within about 0.4 s, what a kill -9 may ask again
(the kill test allows 0.5 s)."""


class WriteLock:
    """The one writer of a database file in this process at a time (re-entrant), the next one taking it the moment
    the last lets it go; a deferred writer lets the others waiting go first, for ``DEFER_AT_MOST_S`` at most.

    Each store had its own lock: a harvest's discovery, extraction, cycle and client stores then met only at
    SQLite's own lock, whose busy handler sleeps in steps of up to 100 ms. And first come was not first served:
    seed4's slow host waited 0.1-0.5 s for each record its discovery writes before its next document (robots.txt
    saved 137 ms after its answer, its sitemaps' URLs 200-280 ms), behind the fast hosts' completion batches that
    kept the lock busy, which delayed its first page by ~1.4 s: most of the run's excess over its politeness limit
    (issue 31). The batches go last now (``deferred_writes``); the bound keeps them from starving."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._owner: int | None = None
        self._depth = 0
        self._prompt = 0  # writers waiting that are not deferred

    def __enter__(self) -> Self:
        me = threading.get_ident()
        with self._turn:
            if self._owner == me:
                self._depth += 1
                return self
            if _DEFERRED.get():
                until = time.monotonic() + DEFER_AT_MOST_S
                while self._owner is not None or (self._prompt and time.monotonic() < until):
                    self._turn.wait(None if self._owner is not None else until - time.monotonic())
            else:
                self._prompt += 1
                try:
                    while self._owner is not None:
                        self._turn.wait()
                finally:
                    self._prompt -= 1
            self._owner, self._depth = me, 1
        return self

    def __exit__(self, *_exc: object) -> None:
        with self._turn:
            self._depth -= 1
            if not self._depth:
                self._owner = None
                self._turn.notify_all()


_WRITERS: dict[str, WriteLock] = {}
"""Database file (its real path) -> the write lock of this process's stores on it (``writer_lock``)."""
_WRITERS_LOCK = threading.Lock()


def writer_lock(path: str) -> WriteLock:
    """This process's one write lock of the database file at ``path`` (a real path: one file, one lock)."""
    with _WRITERS_LOCK:
        return _WRITERS.setdefault(path, WriteLock())


def _forget_in_child() -> None:
    """A forked child starts with no lock held and no threads: a lock copied while a parent's thread held it would
    never be let go, and the parent's pool has no threads here."""
    global _deferred_pool, _WRITERS_LOCK, _DEFERRED_POOL_LOCK
    _WRITERS.clear()
    _WRITERS_LOCK, _DEFERRED_POOL_LOCK = threading.Lock(), threading.Lock()
    _deferred_pool = None


os.register_at_fork(after_in_child=_forget_in_child)
