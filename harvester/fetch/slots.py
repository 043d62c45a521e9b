"""Per-host slots of the polite client: FIFO waiters per host, granted as the host's gate allows (its limit in
flight, its next-allowed time), a timer armed for the next allowed moment, and each host's counters. Every wait
for politeness happens here; ``politeness.HostGate`` only decides."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, ItemsView

from harvester.fetch.politeness import GateConfig, HostGate, Signal
from harvester.fetch.robots import RobotsRules
from harvester.records import ErrorClass, FetchResult, HostDiagnostics
from harvester.runtime import stop_requested, wake_on_stop

logger = logging.getLogger(__name__)


MIN_TIMER_S = 0.001
"""Shortest timer armed while waiting for a next-allowed time (a timer can only make a start later, never earlier)."""


class _Host:
    """One origin's gate, diagnostics and FIFO of waiters for a slot."""

    __slots__ = ("diag", "gate", "robots_applied", "timer", "timer_at", "waiters")

    def __init__(self, origin: str, gate: HostGate) -> None:
        self.gate = gate
        self.diag = HostDiagnostics(host=origin, limit=gate.limit)
        self.waiters: deque[asyncio.Future[bool]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.robots_applied: RobotsRules | None = None


class HostSlots:
    """The slots ``PoliteClient`` fetches through (it has one): one ``_Host`` (gate, waiters, timer, diagnostics) per
    origin, all of them built from ``gate_config``; ``on_change`` hears of every park, limit or back-off change."""

    def __init__(self, gate_config: GateConfig, on_change: Callable[[str], None]) -> None:
        self.gate_config = gate_config
        self._on_change = on_change
        self._hosts: dict[str, _Host] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def host(self, origin: str) -> _Host:
        host = self._hosts.get(origin)
        if host is None:
            host = _Host(origin, HostGate(self.gate_config))
            self._hosts[origin] = host
        return host

    def known(self, origin: str) -> _Host | None:
        """The origin's slots if it was ever asked for, without making them."""
        return self._hosts.get(origin)

    def items(self) -> ItemsView[str, _Host]:
        return self._hosts.items()

    def cancel_timers(self) -> None:
        for host in self._hosts.values():
            if host.timer is not None:
                host.timer.cancel()
                host.timer = None

    def stop_requested(self) -> None:
        """The process was asked to stop (``runtime.request_stop``, from any thread): every wait for a slot ends now
        with False, instead of sleeping out a Crawl-delay or a back-off before sending nothing (the caller then
        raises ``Interrupted``)."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(self._refuse_waiters)

    def _refuse_waiters(self) -> None:
        for host in self._hosts.values():
            while host.waiters:
                waiter = host.waiters.popleft()
                if not waiter.done():
                    waiter.set_result(False)

    async def acquire(self, host: _Host) -> bool:
        """Wait for a slot and the next-allowed time, FIFO per host. False: the host is parked, or the process was
        asked to stop (``stop_requested``)."""
        gate = host.gate
        if gate.parked is not None:
            return False
        now = time.monotonic()
        if not host.waiters and gate.wait_s(now) == 0.0:
            gate.start(now)
            self._note_start(host)
            return True
        if stop_requested():
            return False  # a stopped process sends nothing more: no wait for a slot it would not use
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
            wake_on_stop(self)
        waiter: asyncio.Future[bool] = loop.create_future()
        host.waiters.append(waiter)
        self._dispatch(host)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                gate.cancel()  # granted, but the request will never be sent
                self._dispatch(host)
            raise

    def _dispatch(self, host: _Host) -> None:
        """Grant waiting requests whatever the gate allows now; arm a timer for the next allowed time."""
        gate = host.gate
        waiters = host.waiters
        now = time.monotonic()
        while waiters:
            waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            if gate.parked is not None:
                waiters.popleft()
                waiter.set_result(False)
                continue
            wait = gate.wait_s(now)
            if wait is None:
                return  # at the limit: the next release dispatches
            if wait > 0.0:
                self._arm(host, now, wait)
                return
            waiters.popleft()
            gate.start(now)
            self._note_start(host)
            waiter.set_result(True)

    def _arm(self, host: _Host, now: float, wait: float) -> None:
        at = now + wait
        if host.timer is not None:
            if host.timer_at <= at:
                return
            host.timer.cancel()
        loop = self._loop or asyncio.get_running_loop()
        host.timer_at = at
        host.timer = loop.call_later(max(wait, MIN_TIMER_S), self._on_timer, host)

    def _on_timer(self, host: _Host) -> None:
        host.timer = None
        self._dispatch(host)

    def release(self, host: _Host, started: float, signal: Signal, retry_after_s: float | None,
                key: str | None = None) -> None:
        gate = host.gate
        was_parked, was_limit, was_blocked = gate.parked, gate.limit, gate.blocked_until
        gate.finish(time.monotonic(), started, signal, retry_after_s=retry_after_s, key=key)
        if gate.parked is not None and was_parked is None:
            self.note_parked(host)
        if host.waiters:
            self._dispatch(host)
        if gate.parked is not was_parked or gate.limit != was_limit or gate.blocked_until != was_blocked:
            self._on_change(host.diag.host)

    def _note_start(self, host: _Host) -> None:
        if host.diag.first_sent_at is None:
            host.diag.first_sent_at = time.monotonic()
        in_flight = host.gate.in_flight
        if in_flight > host.diag.peak_in_flight:
            host.diag.peak_in_flight = in_flight

    def note_parked(self, host: _Host) -> None:
        if host.gate.parked is not None:
            host.diag.parked_reason = host.gate.parked
            logger.warning("host %s parked: %s", host.diag.host, host.gate.parked,
                           extra={"host": host.diag.host, "error_class": ErrorClass.PARKED.value})
            for waiter in host.waiters:
                if not waiter.done():
                    waiter.set_result(False)
            host.waiters.clear()

    def count(self, host: _Host, result: FetchResult) -> None:
        diag = host.diag
        now = time.monotonic()
        diag.fetched += 1
        diag.bytes += result.bytes_read
        if result.status == 304:
            diag.not_modified += 1
        if result.gone:
            diag.gone += 1
        elif result.error_class is not None:
            key = result.error_class.value
            diag.errors[key] = diag.errors.get(key, 0) + 1
        if diag.first_fetch_at is None:
            diag.first_fetch_at = now
        diag.last_fetch_at = now

    def count_refusal(self, host: _Host, result: FetchResult) -> FetchResult:
        assert result.error_class is not None
        key = result.error_class.value
        host.diag.errors[key] = host.diag.errors.get(key, 0) + 1
        return result

    def set_queue_depth(self, origin: str, depth: int) -> None:
        self.host(origin).diag.queue_depth = depth
