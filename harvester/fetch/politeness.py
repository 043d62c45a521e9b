"""Per-host politeness decisions: concurrency limit (AIMD), pacing, Retry-After, back-off and parking.

Pure: every method takes an explicit ``now`` (monotonic seconds) and returns a decision; nothing here sleeps,
awaits or does I/O. ``harvester/engine.py`` asks a ``HostGate`` and does the waiting.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from enum import StrEnum

from harvester.records import ErrorClass, FetchResult
from harvester.settings import PolitenessSettings

logger = logging.getLogger(__name__)

INCREASE_AFTER_MIN = 8
"""Fast successes in a row (at least, and at least 4 × the limit) before the limit grows by one."""

PROBE_AFTER_START = 100
"""Successes before probing one above the limit that last drew a 429/503; doubles after each failed probe."""

PROBE_AFTER_MAX = 10_000

BACKOFF_AFTER_FAILURES = 3
"""Consecutive connect/protocol/timeout/5xx failures before the host is also backed off (not only counted)."""

RETRY_AFTER_PARK = "Retry-After"
"""How the reason of a park the server named the end of begins: such a park lasts until that time, across cycles;
every other park (failures, a Crawl-delay too long, a back-off grown past ``backoff_max_s``) is the crawler's own
judgement and ends with its cycle (``host_policy.end_cycle_parks``): the next scheduled run asks the host again."""

JITTER = 0.5
"""Back-off delays are multiplied by a factor drawn from [1, 1 + JITTER)."""


class Signal(StrEnum):
    """What one finished request says about the host."""

    FAST = "fast"  # a usable answer in good time: counts towards a limit increase
    NEUTRAL = "neutral"  # an answer that says nothing about load (4xx, redirect hop, refusal)
    SLOW = "slow"  # an answer slower than slow_response_s: halve the limit
    OVERLOADED = "overloaded"  # 429: halve, and back off (Retry-After or exponential)
    UNAVAILABLE = "unavailable"  # 503: as OVERLOADED, and counted towards parking like any other 5xx
    FAILED = "failed"  # connect or protocol error, timeout, other 5xx: counted towards parking


def classify(result: FetchResult, slow_response_s: float) -> Signal:
    """The politeness signal of one fetch outcome."""
    status = result.status
    if result.error_class is ErrorClass.HTTP_429:
        return Signal.OVERLOADED
    if status == 503:
        return Signal.UNAVAILABLE
    if result.error_class in (ErrorClass.CONNECT, ErrorClass.PROTOCOL, ErrorClass.TIMEOUT, ErrorClass.HTTP_5XX):
        return Signal.FAILED
    if status is None:
        return Signal.NEUTRAL  # refused before any request (robots, scope)
    if result.elapsed_s > slow_response_s:
        return Signal.SLOW
    if status < 400:
        return Signal.FAST
    return Signal.NEUTRAL


@dataclass(frozen=True, slots=True)
class GateConfig:
    """The static rules of one host: settings, the site profile's overrides and what robots.txt said. No field
    has a default of its own: the defaults are ``PolitenessSettings``' (one home per knob), through
    ``from_settings``."""

    start_limit: int
    max_limit: int
    min_delay_s: float
    slow_response_s: float
    backoff_base_s: float
    backoff_max_s: float
    park_after_failures: int
    max_crawl_delay_s: float
    park_s: float
    fixed: bool
    """The site fixed its limit (``per_host_limit``, ``--per-host``): slow or overloaded answers never lower it, nor
    does a learned limit of an earlier run replace it. Back-off, Retry-After and parking still pause the host."""

    @classmethod
    def from_settings(cls, settings: PolitenessSettings, *, per_host_limit: int | None = None,
                      min_delay_s: float | None = None) -> GateConfig:
        """The one place a site's limits meet the settings: ``per_host_limit`` and ``min_delay_s`` are its
        profile's (``SiteProfile``; ``--per-host`` writes the first). A per-host limit fixes the limit, start and
        ceiling (a site that asked for 1 gets 1, one that asked for 2 keeps 2: ``fixed``); without one the limit
        adapts from ``per_host_start`` up to ``max_per_host_limit``."""
        start = per_host_limit if per_host_limit is not None else settings.per_host_start
        ceiling = start if per_host_limit is not None else max(start, settings.max_per_host_limit)
        return cls(
            start_limit=start, max_limit=ceiling,
            min_delay_s=settings.min_delay_s if min_delay_s is None else min_delay_s,
            slow_response_s=settings.slow_response_s, backoff_base_s=settings.backoff_base_s,
            backoff_max_s=settings.backoff_max_s, park_after_failures=settings.park_after_failures,
            max_crawl_delay_s=settings.max_crawl_delay_s, park_s=settings.park_s, fixed=per_host_limit is not None,
        )


_JITTER = random.Random()
"""The back-off jitter of every gate that is given no generator of its own: one per gate was 2.9 KB per host ever
served (what a run over thousands of hosts keeps; issue 22), and the jitter needs no stream of its own."""


class HostGate:
    """One host's live politeness state. The engine calls ``wait_s`` → ``start`` → ``finish``.

    Invariants kept: ``in_flight`` never passes ``limit`` through ``start``; on a paced host a start comes at
    least ``interval_s`` after the previous request ended; no start before ``blocked_until`` (Retry-After /
    back-off); a parked gate starts nothing.
    """

    __slots__ = ("_decrease_at", "_failing", "_fast_run", "_overloads", "_probe_after", "_rng", "blocked_until",
                 "config", "crawl_delay_s", "failures", "in_flight", "interval_s", "last_start", "limit",
                 "next_allowed_at", "parked", "parked_until", "request_rate_s", "safe_limit")

    def __init__(self, config: GateConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        self.limit = max(1, min(config.start_limit, config.max_limit))
        self.safe_limit = config.max_limit
        """The largest limit not known to draw 429/503; probing above it waits ``_probe_after`` successes."""
        self.in_flight = 0
        self.next_allowed_at = 0.0
        self.last_start: float | None = None
        self.blocked_until = 0.0
        self.interval_s = config.min_delay_s
        self.crawl_delay_s: float | None = None
        self.request_rate_s: float | None = None
        self.failures = 0
        self.parked: str | None = None
        self.parked_until = 0.0
        """When a parked host may get another chance (monotonic); what a rerun honours (``park_s``)."""
        self._failing: set[str] = set()
        """The URLs that failed since the last answer that was not a failure: ``failures`` counts each once."""
        self._fast_run = 0
        self._overloads = 0
        self._probe_after = PROBE_AFTER_START
        self._decrease_at = -1.0
        self._rng = rng or _JITTER

    # --- rules from robots.txt --------------------------------------------------------------------------

    def set_robots(self, now: float, crawl_delay_s: float | None, request_rate_s: float | None) -> None:
        """Apply robots.txt pacing; a Crawl-delay above max_crawl_delay_s parks the host instead.

        The robots.txt request itself counts: the next request waits a full interval after its answer
        arrived (``now``).
        """
        self.crawl_delay_s = crawl_delay_s
        self.request_rate_s = request_rate_s
        self.interval_s = max(self.config.min_delay_s, crawl_delay_s or 0.0, request_rate_s or 0.0)
        if self.last_start is not None and self.interval_s > 0:
            self.next_allowed_at = max(self.next_allowed_at, now + self.interval_s)
        if crawl_delay_s is not None and crawl_delay_s > self.config.max_crawl_delay_s:
            self.park(f"robots.txt crawl-delay {crawl_delay_s:g}s exceeds max_crawl_delay_s "
                      f"{self.config.max_crawl_delay_s:g}s", until=now + self.config.park_s)

    def park(self, reason: str, *, until: float) -> None:
        """Stop starting requests: this run is over for the host, and a rerun leaves it alone until ``until``
        (monotonic). The first reason is kept; a later park only extends ``until``."""
        if self.parked is None:
            self.parked = reason
        self.parked_until = max(self.parked_until, until)

    # --- admission ------------------------------------------------------------------------------------------

    def wait_s(self, now: float) -> float | None:
        """0.0: a request may start now; > 0: seconds until one may; None: at the limit (wait for a finish).

        A paced host (Crawl-delay, Request-rate or a minimum delay) gets one request at a time, and the interval
        counts from the end of the previous response: the server then sees at least the interval between two
        arrivals whatever the network and scheduling jitter (start-to-start pacing cannot promise that).
        """
        if self.in_flight >= (1 if self.interval_s > 0 else self.limit):
            return None
        ready = max(self.next_allowed_at, self.blocked_until)
        return ready - now if ready > now else 0.0

    def start(self, now: float) -> None:
        """Record a start (the caller checked ``wait_s(now) == 0``)."""
        self.in_flight += 1
        self.last_start = now
        self.next_allowed_at = now + self.interval_s

    def cancel(self) -> None:
        """A granted start that never sent its request (the waiter was cancelled)."""
        self.in_flight = max(0, self.in_flight - 1)

    # --- outcomes -------------------------------------------------------------------------------------------

    def finish(self, now: float, started_at: float, signal: Signal, *, retry_after_s: float | None = None,
               key: str | None = None) -> None:
        """Record a finished request that started at ``started_at`` (monotonic) and adapt limit and back-off.
        ``key``: the URL asked; a failure of a URL that already failed since the last good answer counts once (a
        healthy host with a few broken pages, retried, is not parked for them)."""
        self.in_flight = max(0, self.in_flight - 1)
        if signal in (Signal.FAST, Signal.NEUTRAL, Signal.SLOW):  # what resets ``failures``
            self._failing.clear()
        if self.interval_s > 0:
            self.next_allowed_at = max(self.next_allowed_at, now + self.interval_s)
        if signal is Signal.FAST:
            self.failures = 0
            self._overloads = 0
            self._fast_run += 1
            self._maybe_increase()
        elif signal is Signal.NEUTRAL:
            self.failures = 0
        elif signal is Signal.SLOW:
            self.failures = 0
            self._decrease(now, started_at)
        elif signal in (Signal.OVERLOADED, Signal.UNAVAILABLE):
            self._overloads += 1
            self._decrease(now, started_at, congested=True)
            if signal is Signal.UNAVAILABLE and self._count_failure(now, key):
                return
            self._back_off(now, retry_after_s)
        else:  # FAILED
            self._decrease(now, started_at)  # a failing or timing-out host gets fewer connections, not more
            if not self._count_failure(now, key) and self.failures >= BACKOFF_AFTER_FAILURES:
                self._back_off(now, None, exponent=self.failures - BACKOFF_AFTER_FAILURES)

    def _count_failure(self, now: float, key: str | None) -> bool:
        """Count one more consecutive failure; True when it parked the host for the rest of its run (a host that
        answers nothing but 5xx costs ``park_after_failures`` requests a run, not an hour of back-offs)."""
        if key is not None:
            if key in self._failing:
                return False
            self._failing.add(key)
        self.failures += 1
        if self.failures < self.config.park_after_failures:
            return False
        self.park(f"{self.failures} consecutive failures (connect/protocol/timeout/5xx)",
                  until=now + self.config.park_s)
        return True

    def _maybe_increase(self) -> None:
        if self.limit >= self.config.max_limit:
            return
        needed = max(INCREASE_AFTER_MIN, 4 * self.limit)
        if self.limit >= self.safe_limit:
            needed = max(needed, self._probe_after)
        if self._fast_run >= needed:
            self.safe_limit = max(self.safe_limit, self.limit)  # a probe that lasted a full run is safe
            self.limit += 1
            self._fast_run = 0

    def _decrease(self, now: float, started_at: float, *, congested: bool = False) -> None:
        self._fast_run = 0
        if self.config.fixed:
            # ``--per-host 2`` ended runs at "2 / 1" after one slow answer, though its help says the limit is fixed.
            return
        # One decrease per congestion event: answers to requests sent before the last decrease are the
        # same event (TCP's once-per-window rule), not a reason to halve again.
        if started_at <= self._decrease_at:
            return
        if congested:
            if self.limit > self.safe_limit:
                self._probe_after = min(PROBE_AFTER_MAX, self._probe_after * 2)  # a failed probe
            self.safe_limit = max(1, self.limit - 1)
        self.limit = max(1, self.limit // 2)
        self._decrease_at = now

    def _back_off(self, now: float, retry_after_s: float | None, *, exponent: int | None = None) -> None:
        if retry_after_s is not None:
            if retry_after_s > self.config.backoff_max_s:
                # The server named the time itself: the park lasts exactly that long, not park_s.
                self.park(f"{RETRY_AFTER_PARK} {retry_after_s:g}s exceeds backoff_max_s "
                          f"{self.config.backoff_max_s:g}s", until=now + retry_after_s)
                return
            delay = retry_after_s  # RFC 9110 §10.2.3: not before this; no jitter shortens it
        else:
            step = (self._overloads - 1) if exponent is None else exponent
            delay = self.config.backoff_base_s * (2.0 ** max(0, step))
            if exponent is None and delay > self.config.backoff_max_s:
                # Still overloaded after backing off as long as a run waits: the rest of the run leaves it alone
                # (the old cap kept a run waiting backoff_max_s per answer, as long as the host kept refusing).
                # Failures are not parked here: park_after_failures counts them.
                self.park(f"still overloaded after backing off {self.config.backoff_max_s:g}s (backoff_max_s)",
                          until=now + self.config.park_s)
                return
            delay = min(self.config.backoff_max_s, delay * (1.0 + JITTER * self._rng.random()))
        self.blocked_until = max(self.blocked_until, now + delay)
