"""Extraction's one thread, shared by every host in turn: a page's parse and the user's hook run there, one at a
time, the hosts taking turns rather than queuing in the order their answers came.

In first-come order, a fast host answering every 10 ms filled the thread's queue, and a slow host's answer waited
behind all of it: its records piled up, and once a host has ``fetch.workers.SETTLING_PER_WORKER`` records per
worker outstanding its workers wait for them, so the slow host's next requests waited for the fast hosts' parses
(issue 31, the slow host's limit). Taken in turns, a host's answer waits for at most one parse of each other host
with work queued, whatever their backlog: the hosts that make the backlog are the ones it slows.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")

FORGET_AFTER = 256
"""Hosts with nothing queued whose last turn is remembered, at most, beyond twice the hosts with calls waiting."""

_Item = tuple[Callable[[], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop]


class HostTurns:
    """Run blocking calls in ``executor`` (one thread), one at a time, the hosts in turn: the next call is the
    oldest of the host whose last call was taken longest ago, a host new to the thread first.

    At most one call is in the executor at once: each call, when done, hands the thread on to the next host's
    oldest call, so the order is decided when the thread is free, not when a call was asked for. Callers may be in
    different event loops (each gets its answer in its own); a caller that stopped waiting (cancelled) has its call
    skipped if it has not begun.
    """

    def __init__(self, executor: Executor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self._queues: dict[str, deque[_Item]] = {}
        """Calls waiting, per host (hosts with none are not kept)."""
        self._served: dict[str, int] = {}
        """When each host last had a call taken (``_tick``): the host served longest ago goes next."""
        self._tick = 0
        self._running = False

    def waiting(self) -> int:
        """Calls asked for and not yet begun (all hosts)."""
        with self._lock:
            return sum(len(queue) for queue in self._queues.values())

    async def run(self, host: str, call: Callable[[], T]) -> T:
        """``call()`` in the thread, in ``host``'s turn; its value or exception."""
        return await self.submit(host, call)

    def submit(self, host: str, call: Callable[[], T]) -> asyncio.Future[T]:
        """``call()`` asked for in ``host``'s turn: the future of its value or exception, in the running loop.
        Cancelling the future before the call begins skips it; a caller that must not skip it shields it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queues.setdefault(host, deque()).append((call, future, loop))
            start, self._running = not self._running, True
        if start:
            self._hand_on()
        return future

    def _hand_on(self) -> None:
        """The thread takes the next call (an executor shut down at exit: the calls left run here, in order)."""
        try:
            self._executor.submit(self._step)
        except RuntimeError:
            while self._one():
                pass

    def _step(self) -> None:
        if self._one():
            self._hand_on()  # to the back of the executor's queue: another user of the thread gets its turn too

    def _take(self) -> _Item | None:
        """The next call: the oldest of the host served longest ago (never served: first)."""
        with self._lock:
            while self._queues:
                served = self._served
                host = min(self._queues, key=lambda h: served.get(h, -1))
                queue = self._queues[host]
                item = queue.popleft()
                if not queue:
                    del self._queues[host]
                self._tick += 1
                served[host] = self._tick
                if len(served) > 2 * len(self._queues) + FORGET_AFTER:
                    # Hosts with nothing queued are forgotten in bulk: at worst one gets an early turn later.
                    self._served = {h: t for h, t in served.items() if h in self._queues}
                if not item[1].cancelled():
                    return item
            self._running = False
            return None

    def _one(self) -> bool:
        """One call, in the executor's thread; True: more are waiting (the caller hands the thread on)."""
        item = self._take()
        if item is None:
            return False
        call, future, loop = item
        try:
            value = call()
        except BaseException as exc:  # the caller's to judge, in its loop
            _answer(loop, future, None, exc)
        else:
            _answer(loop, future, value, None)
        with self._lock:
            more = bool(self._queues)
            if not more:
                self._running = False
        return more


def _answer(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any,
            exc: BaseException | None) -> None:
    def settle() -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits for the answer
        loop.call_soon_threadsafe(settle)


class Parses:
    """Calls in flight per key (a URL's id) with the answer they were asked for, run through ``turns``. A cancel
    cannot stop a call in its thread (a parse running the user's hook): a caller cancelled meanwhile leaves it
    running (shielded), and the key's next caller with the same answer awaits it instead of calling again, so a hook
    never runs twice on one answer."""

    def __init__(self, turns: HostTurns) -> None:
        self._turns = turns
        self._kept: dict[int, tuple[object, asyncio.Future[Any]]] = {}

    async def run(self, key: int, answer: object, host: str, call: Callable[[], T]) -> T:
        kept = self._kept.get(key)
        if kept is not None and kept[0] is answer:
            running: asyncio.Future[T] = kept[1]
        else:
            running = self._turns.submit(host, call)
            self._kept[key] = (answer, running)
        try:
            value = await asyncio.shield(running)
        except asyncio.CancelledError:
            raise  # the call runs on, kept for the key's next caller
        except BaseException:
            self._kept.pop(key, None)
            raise
        self._kept.pop(key, None)
        return value
