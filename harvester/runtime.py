"""Small process-level helpers shared by the phases: the clock, store calls off the loop, task groups, and the process
state (see its section): what a process, not a call, owns. Lease owner ids and whether they live are ``owners``'."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from harvester.errors import ConfigError, DatabaseUnavailable, Interrupted, WriteConflict

logger = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")


CLOCK_ENV = "HARVESTER_NOW"
"""An ISO 8601 instant: the process's clock starts there and runs at real speed (tests of a daily schedule)."""


class Clock:
    """The library's one source of wall time: ``now()`` is real time plus an offset a test sets.

    Every decision that depends on the date (what is due, revisit intervals, robots.txt lifetimes, leases, run
    times) reads this clock, so a test can run a harvest, move the test web a day on, and start the re-crawl
    exactly 24 h after the harvest started, or a few minutes either side, without sleeping. The offset comes
    from ``HARVESTER_NOW`` at import (so CLI and flow subprocesses share the test's clock) or ``travel_to``.
    Monotonic time (politeness gaps, timeouts) is untouched: only the calendar moves.
    """

    def __init__(self) -> None:
        self.offset = timedelta(0)
        self.invalid: str | None = None
        """Why ``HARVESTER_NOW`` could not be read: every ``now()`` then raises a ConfigError saying it (the
        command's one clear line), rather than a traceback at import or a harvest run on the real date."""
        start = os.environ.get(CLOCK_ENV)
        if start:
            try:
                self.travel_to(parse_instant(start, source=CLOCK_ENV))
            except ValueError as exc:
                self.invalid = str(exc)

    def now(self) -> datetime:
        if self.invalid is not None:
            raise ConfigError(self.invalid)
        return datetime.now(UTC) + self.offset

    def travel_to(self, moment: datetime) -> None:
        """From now on the clock reads ``moment`` plus the real time elapsed since this call."""
        self.offset = aware(moment) - datetime.now(UTC)

    def reset(self) -> None:
        self.offset = timedelta(0)


def parse_instant(text: str, *, source: str) -> datetime:
    """An ISO 8601 instant (a trailing Z allowed; naive means UTC), or a ValueError naming ``source``."""
    try:
        return aware(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        raise ValueError(f"{source}={text!r} is not an ISO 8601 instant (example: 2026-01-06T06:00:00Z)") from None


@overload
def aware(moment: datetime) -> datetime: ...


@overload
def aware(moment: None) -> None: ...


def aware(moment: datetime | None) -> datetime | None:
    """``moment`` as an aware UTC instant; a naive one is taken to be UTC (SQLite hands back naive times, and
    sitemaps often omit the offset). The one time-zone helper of the library."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@contextlib.asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    """``asyncio.TaskGroup`` (a failed task cancels its siblings and the body; none outlives the block) whose
    failure surfaces as the first error itself, not an ``ExceptionGroup``: callers, and Prefect's retries, see the
    ``StoreError`` or the bug that ended the run, as they would from one coroutine."""
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as failed:
        first = failed.exceptions[0]
        raise first from (first.__cause__ or first.__context__)


async def siblings(coros: Mapping[str, Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``coros`` as sibling tasks, each named by its key (a phase's hosts or workers), and return their results
    in order. As ``task_group``, the first failure cancels the others (none outlives the call) and is raised itself.
    The process's stop (``Interrupted``) cancels none: each sibling meets it at its own next request, having recorded
    what it read and had on the wire, so all are waited for and then the stop is raised (a failure meanwhile is
    logged: the run is left to be resumed). Cancelled at the first one's stop, a sibling lost the answers it had in
    flight and its rerun asked them again. A cancel of the caller (the stop's grace spent) cancels them all."""
    tasks = [asyncio.create_task(coro, name=name) for name, coro in coros.items()]
    try:
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                failure = None if task.cancelled() else task.exception()
                if failure is not None and not isinstance(failure, Interrupted) and stop_requested() is None:
                    raise failure
    except BaseException:
        await settle(tasks, cancel=True)
        raise
    ended = [(task, None if task.cancelled() else task.exception()) for task in tasks]
    stop = next((failure for _, failure in ended if isinstance(failure, Interrupted)), None)
    if stop is not None:
        for task, failure in ended:
            if failure is not None and failure is not stop and not isinstance(failure, Interrupted):
                logger.warning("%s failed as the process stopped: %s", task.get_name(), failure)
        raise stop
    return [task.result() for task in tasks]


CLOCK = Clock()


async def settle(tasks: list[asyncio.Task[Any]], *, cancel: bool) -> None:
    """Wait for ``tasks`` to end (cancelled first when ``cancel``), their errors retrieved and dropped: for work
    asked ahead that nothing took, which must not outlive the step that asked it."""
    if cancel:
        for task in tasks:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def utcnow() -> datetime:
    """The library's wall clock (see ``Clock``)."""
    return CLOCK.now()


OUTAGE_WAIT_S = 180.0
"""How long a store call waits, in all, for a database server that is away (restarting, failing over)."""


def _outage_delays() -> Iterator[float]:
    """Waits between asks of a store call whose database is away: 0.25 s doubling to 5 s, ``OUTAGE_WAIT_S`` in all."""
    waited, delay = 0.0, 0.25
    while waited < OUTAGE_WAIT_S:
        yield delay
        waited += delay
        delay = min(delay * 2, 5.0)


CONFLICT_RETRIES = 5
"""How often a store call PostgreSQL rolled back to break a deadlock is asked again (after 0-50, 0-100, ... ms)."""


async def db(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one store call off the event loop: the store is synchronous, the fetch loop must not block.

    A database server that is away (``DatabaseUnavailable``: the unit of work was rolled back) is waited for,
    the call asked again every few seconds for up to ``OUTAGE_WAIT_S``: a restart or a failover costs the
    run that long, not the run. A call chosen as a deadlock's victim (``WriteConflict``: two transactions, say
    discovery's and extraction's, inserting the same new URLs in another order) is asked again at once, after a
    random pause that grows, a few times. Each store call is one transaction, so asking it again writes it once."""
    conflicts = 0
    for delay in _outage_delays():
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except DatabaseUnavailable as exc:
            if delay == 0.25:
                logger.warning("database unavailable, waiting up to %.0f s for it: %s", OUTAGE_WAIT_S, exc,
                               extra={"error_class": "storage"})
            await asyncio.sleep(delay)
        except WriteConflict:
            conflicts += 1
            if conflicts > CONFLICT_RETRIES:
                raise
            await asyncio.sleep(random.uniform(0, 0.05 * 2**conflicts))  # jitter: the two retry apart
    return await asyncio.to_thread(fn, *args, **kwargs)


def db_sync(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``db`` for the synchronous edges (the CLI's closing report): the same bounded wait for the server."""
    for delay in _outage_delays():
        try:
            return fn(*args, **kwargs)
        except DatabaseUnavailable:
            time.sleep(delay)
    return fn(*args, **kwargs)


# --- process state -------------------------------------------------------------------------------------------
# The only module-level state of live things in the library (with ``owners``' owners at work), each here because it
# belongs to the process, not to a call: why the process was asked to stop (``_STOP``: a signal or a dead parent
# asks the whole process), objects flows in its threads find by a string (``_SHARED``: a Prefect parameter carries
# strings, not objects), the advisory file locks it holds (``_LOCKS``: flock is per open file, so a second
# descriptor in the same process would lock itself out) and which of its lease owners extract one site from one
# database now (``_PEERS``: fair sharing counts workers a database cannot see). Everything else is passed: a
# cycle's shared state is ``phases.cycle_state.CycleState``, handed to the phases in their signatures.

_SHARED: dict[str, list[Any]] = {}
"""Key -> [object, blocks holding it]: ``shared_as``."""

_SHARED_LOCK = threading.Lock()


@contextlib.contextmanager
def shared_as(key: str, item: object) -> Iterator[str]:
    """Let code in this process's threads find ``item`` by ``key`` (``find_shared``) for the body; yields ``key``.
    Re-entrant: two blocks may share one key (a cycle's two phases), and the key is forgotten with the last."""
    with _SHARED_LOCK:
        entry = _SHARED.setdefault(key, [item, 0])
        if entry[0] is not item:
            raise ValueError(f"key {key!r} is already shared for another object")
        entry[1] += 1
    try:
        yield key
    finally:
        with _SHARED_LOCK:
            entry[1] -= 1
            if entry[1] == 0:
                del _SHARED[key]


def find_shared(key: str | None) -> object | None:
    """What ``shared_as`` holds under ``key`` in this process; None for None, or a key held elsewhere or no more."""
    if key is None:
        return None
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
    return entry[0] if entry is not None else None


_LOCKS: dict[str, list[int]] = {}
"""Lock file path -> [file descriptor, blocks holding it in this process]: ``exclusive_file``."""


@contextlib.contextmanager
def exclusive_file(path: str, busy: Callable[[str], Exception]) -> Iterator[None]:
    """Hold an exclusive advisory lock (``flock``) on ``path`` for the body; re-entrant within this process. Another
    process holding it raises ``busy(holder)`` (the pid it wrote in the file). The kernel releases the lock when the
    holder dies, however it dies: a crash never leaves a stale one."""
    held = _LOCKS.get(path)
    if held is None:
        held = _LOCKS[path] = [_take_lock(path, busy), 0]
    held[1] += 1
    try:
        yield
    finally:
        held[1] -= 1
        if held[1] == 0:
            del _LOCKS[path]
            os.close(held[0])  # closing the descriptor releases the flock


def _take_lock(path: str, busy: Callable[[str], Exception]) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        raise busy(holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
    return fd


_PEERS: dict[tuple[str, str], set[str]] = {}
_PEERS_LOCK = threading.Lock()
"""(Database URL, site) -> extraction owners of this process at work on that site there (another site's workers
never take this site's hosts, so they are no one to share with). A worker that holds no host yet shows in no
lease, and workers of one process share its one PostgreSQL session name (``Dialect.extraction_processes``): a
holder counts these too, so a worker started late in the same process (a Prefect task, a library caller; on
SQLite, where one process extracts at a time, the only other workers there are) gets its share."""


def join_peers(database_url: str, site: str, owner: str) -> None:
    with _PEERS_LOCK:
        _PEERS.setdefault((database_url, site), set()).add(owner)


def leave_peers(database_url: str, site: str, owner: str) -> None:
    with _PEERS_LOCK:
        peers = _PEERS.get((database_url, site))
        if peers is not None:
            peers.discard(owner)
            if not peers:
                del _PEERS[(database_url, site)]


def local_peers(database_url: str, site: str, owner: str) -> int:
    """Other extraction owners of this process at work on ``site`` in ``database_url`` now."""
    with _PEERS_LOCK:
        return len(_PEERS.get((database_url, site), set()) - {owner})


_ANSWERED: dict[str, int] = {}
_ANSWERED_LOCK = threading.Lock()
"""Requests this process's completions recorded, by outcome (``frontier.rows.outcome``; ``unsent`` left out):
what the CLI's progress line counts, read from memory at each tick instead of counting the fetch log's rows since
the command began (0.3-0.8 s per tick at 1,000,000 rows, and every process's requests on a shared frontier)."""


def count_answered(outcomes: Iterable[str]) -> None:
    """Count completions just committed (``Outcomes.complete_many``)."""
    with _ANSWERED_LOCK:
        for outcome in outcomes:
            if outcome != "unsent":
                _ANSWERED[outcome] = _ANSWERED.get(outcome, 0) + 1


def answered() -> dict[str, int]:
    """Requests this process has recorded so far, by outcome; subtract an earlier reading for those since."""
    with _ANSWERED_LOCK:
        return dict(_ANSWERED)


_STOP: list[str] = []
"""Why this process was asked to stop (empty: it was not). A list, so that setting it needs no ``global``."""


_STOP_WAKERS: weakref.WeakSet[StopWaker] = weakref.WeakSet()
"""What waits for a slot and must hear of a stop at once (``fetch.slots.HostSlots``), held weakly: a waiter for a
host's Crawl-delay or back-off would otherwise sleep it out after the stop, only to send nothing."""


class StopWaker(Protocol):
    def stop_requested(self) -> None:
        """Called in the thread that asked for the stop (a signal handler, the lifeline's thread): thread-safe."""


def wake_on_stop(waker: StopWaker) -> None:
    """``waker.stop_requested()`` when this process is asked to stop (at once if it already was)."""
    _STOP_WAKERS.add(waker)
    if _STOP:
        waker.stop_requested()


def request_stop(reason: str) -> None:
    """Ask every phase of this process to stop soon and cleanly: no new request is sent, requests in flight end and
    are written, leases go back, then the phase raises ``Interrupted``. For an orchestrator's process whose
    parent is gone (``harvester.flows.lifeline``); a rerun resumes from the frontier. Waits for a host's slot end
    at once (``wake_on_stop``)."""
    if not _STOP:
        _STOP.append(reason)
        for waker in list(_STOP_WAKERS):
            waker.stop_requested()


def stop_requested() -> str | None:
    return _STOP[0] if _STOP else None


def check_stop() -> None:
    """Raise ``Interrupted`` once a stop was requested: called before a request is sent."""
    if _STOP:
        raise Interrupted(_STOP[0])


def clear_stop() -> None:
    """For tests and long-lived callers that ran a stopped phase and go on."""
    _STOP.clear()


# --- native memory -----------------------------------------------------------------------------------------------

MALLOC_ARENAS = 2
"""glibc malloc arenas a harvester process uses (``MALLOC_ARENA_MAX`` overrides). glibc gives every thread that
allocates under contention an arena of its own, up to 8 per core, and never hands their free pages back; the store
calls run on the event loop's executor threads (``db``), so each kept its own SQLite page cache and statement
memory in its own arena: 6 arenas of 9-15 MB on a 2-core machine (issue 22). Two keep the loop's allocations apart
from the threads' at no measured cost."""


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process, before its threads start; True when it was applied. A
    ``MALLOC_ARENA_MAX`` the user set wins; another C library (musl, macOS) is left alone."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, arenas))


_M_ARENA_MAX = -8  # glibc malloc.h


TRIM_EVERY_S = 10.0
"""Least time between two ``trim_native_memory`` passes that do work."""

_TRIMMED = [0.0]


def trim_native_memory(every_s: float = TRIM_EVERY_S) -> bool:
    """Hand glibc's free heap pages back to the OS (``malloc_trim(0)``), at most once per ``every_s``; True when it
    ran. Page bodies, parsers' buffers and SQLite's statements come and go by the thousand and leave free chunks all
    over the heap, which glibc keeps (only the top of the heap is ever trimmed by itself): at 2,000 hosts a third of
    the heap was free (issue 22). malloc_trim also releases whole free pages inside it (``MADV_DONTNEED``); a pass
    over a 100 MB heap takes milliseconds. Another C library: nothing happens."""
    now = time.monotonic()
    if now - _TRIMMED[0] < every_s:
        return False
    _TRIMMED[0] = now
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim(0)
    return True
