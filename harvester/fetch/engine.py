"""The polite fetch engine: per-host gates, robots.txt checks, and per-host queues with their own workers.

All awaiting for politeness happens here (``politeness.py`` only decides). A host's requests never exceed its
limit, never start before its next-allowed time, and a slow or failing host only slows itself. Never touches
storage: ``HostWork`` (implemented over the frontier by the caller) claims jobs and takes their results.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from harvester.errors import LeaseLost
from harvester.fetch.http import NO_VALIDATORS, Fetcher, close_clients
from harvester.fetch.politeness import GateConfig, HostGate, Signal, classify
from harvester.fetch.robots import ROBOTS_PATH, RobotsCache, RobotsPersistence, RobotsRules
from harvester.records import ErrorClass, FetchResult, HostDiagnostics, HostPolicy, Validators, http_origin
from harvester.runtime import task_group, utcnow
from harvester.settings import Settings

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
"""How often ``run_hosts`` hands diagnostics to ``on_progress``."""

MIN_TIMER_S = 0.001
"""Shortest timer armed while waiting for a next-allowed time (a timer can only make a start later, never earlier)."""


def refused(url: str, error_class: ErrorClass, error: str) -> FetchResult:
    """A fetch that sent no request (robots, scope, parked host): a value, like every outcome."""
    return FetchResult(url=url, final_url=url, status=None, started_at=time.time(), elapsed_s=0.0,
                       error_class=error_class, error=error)


def _robots_refusal(url: str, rules: RobotsRules) -> FetchResult:
    """A URL robots.txt does not let through. When robots.txt itself was refused by the address policy, the
    host is at an address never fetched: say so, rather than blame a robots.txt that was never read."""
    if rules.state.error_class is ErrorClass.ADDRESS_REFUSED:
        return refused(url, ErrorClass.ADDRESS_REFUSED, f"the address policy refused {rules.origin}")
    return refused(url, ErrorClass.ROBOTS_DISALLOWED, "disallowed by robots.txt")



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


class PoliteClient:
    """The one polite fetch used by discovery and extraction alike. Use as ``async with PoliteClient(...)``.

    ``per_host_limit`` / ``min_delay_s`` (a site profile's overrides) replace the settings for every host;
    an explicit per-host limit is also the ceiling. ``in_scope`` and ``canonicalize`` are applied to redirect
    hops (the first URL is the caller's decision). Every connection, robots.txt's included, obeys the address
    policy: ``settings.http.allow_addresses`` and ``allow_addresses`` (a profile's) are networks allowed beyond
    the global internet, and the addresses the ``seeds``' hosts resolve to are allowed exactly.
    """

    def __init__(self, settings: Settings, *, user_agent: str | None = None, per_host_limit: int | None = None,
                 min_delay_s: float | None = None, robots_store: RobotsPersistence | None = None,
                 in_scope: Callable[[str], bool] | None = None,
                 canonicalize: Callable[[str], str] | None = None, seeds: Sequence[str] = (),
                 allow_addresses: Sequence[str] = ()) -> None:
        self.settings = settings
        self.user_agent = user_agent or settings.http.user_agent
        self.gate_config = GateConfig.from_settings(settings.politeness, per_host_limit=per_host_limit,
                                                    min_delay_s=min_delay_s)
        self._in_scope = in_scope
        self._canonicalize = canonicalize
        self._hosts: dict[str, _Host] = {}
        self._fetcher = Fetcher(settings.http, user_agent=self.user_agent,
                                connections_for=lambda _origin: self.gate_config.max_limit, seeds=seeds,
                                allow_addresses=allow_addresses)
        self._robots = RobotsCache(settings.robots, user_agent=self.user_agent, fetch=self._fetch_robots,
                                   persistence=robots_store)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.on_policy_change: Callable[[str], None] | None = None
        """Called with an origin whenever its persistable politeness state changed (a back-off was set or
        extended, the host was parked, AIMD moved its limit): the caller writes ``host_policy(origin)`` back,
        so a rerun, or the next phase's client, honours it even if this process dies right after. Never awaited;
        set by ``harvester.phases.host_policy.PolicyKeeper``."""

    async def __aenter__(self) -> PoliteClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for host in self._hosts.values():
            if host.timer is not None:
                host.timer.cancel()
                host.timer = None
        await self._fetcher.aclose()

    # --- public ---------------------------------------------------------------------------------------------

    @property
    def robots_fetches(self) -> int:
        """robots.txt fetches made by this client (tests prove 'once per host' with it and the server log)."""
        return self._robots.fetches

    async def robots(self, origin: str, *, fresh_since: datetime | None = None) -> RobotsRules:
        """The origin's robots.txt rules (fetched once, shared by concurrent callers); applies its pacing.
        ``fresh_since``: a copy fetched before then is asked again, conditionally (``RobotsCache.rules``)."""
        host = self._host(origin)
        rules = await self._robots.rules(origin, fresh_since=fresh_since) if fresh_since else (
            self._robots.peek(origin) or await self._robots.rules(origin))
        if host.robots_applied is not rules:
            host.robots_applied = rules
            was_parked = host.gate.parked
            host.gate.set_robots(time.monotonic(), rules.crawl_delay_s, rules.request_rate_s)
            self._note_parked(host)
            if host.gate.parked is not was_parked and self.on_policy_change is not None:
                self.on_policy_change(origin)
        return rules

    def parked(self, origin: str) -> str | None:
        host = self._hosts.get(origin)
        return host.gate.parked if host is not None else None

    def diagnostics(self) -> dict[str, HostDiagnostics]:
        """A snapshot per origin (copies: the live counters keep changing)."""
        out: dict[str, HostDiagnostics] = {}
        for origin, host in self._hosts.items():
            diag = host.diag
            out[origin] = replace(diag, limit=host.gate.limit, in_flight=host.gate.in_flight,
                                  errors=dict(diag.errors), parked_reason=host.gate.parked)
        return out

    def gate(self, origin: str) -> HostGate:
        """The live politeness state of one origin (read it; the engine is the one that changes it)."""
        return self._host(origin).gate

    def host_policy(self, origin: str) -> HostPolicy:
        """The origin's politeness state to persist (``FrontierStore.save_host_policy``), so a rerun keeps
        honouring a Retry-After, a back-off or a park and starts from the learned limit. Monotonic times become
        UTC; ``blocked_until`` of a parked host is when its park ends (``HostGate.parked_until``)."""
        gate = self._host(origin).gate
        now_mono, now_wall = time.monotonic(), utcnow()

        def wall(mono: float) -> datetime | None:
            return now_wall + timedelta(seconds=mono - now_mono) if mono > now_mono else None

        blocked = max(gate.blocked_until, gate.parked_until) if gate.parked is not None else gate.blocked_until
        return HostPolicy(origin=origin, crawl_delay_s=gate.crawl_delay_s, request_rate_s=gate.request_rate_s,
                          concurrency_limit=gate.limit, blocked_until=wall(blocked), parked_reason=gate.parked,
                          failures=gate.failures, next_allowed_at=wall(gate.next_allowed_at))

    def apply_policy(self, policy: HostPolicy) -> None:
        """Restore persisted state before the host's first request of this client.

        A future ``blocked_until`` is honoured (no request before it); a parked reason whose ``blocked_until``
        is still ahead parks the host again, with that reason, until then; a park that has run out (or carries
        no end) is lifted, and the host gets another chance. The learned limit (within this client's ceiling)
        is the starting point (one below the start limit is also the probing ceiling, as after a 429 in this
        run), and the consecutive-failure count carries over, so a host parked for failing
        is parked again by its first failure after the park ran out (and cleared by its first success).
        robots.txt pacing is not taken from here: it comes with the robots rules themselves.
        """
        host = self._host(policy.origin)
        gate = host.gate
        now_mono, now_wall = time.monotonic(), utcnow()

        def mono(when: datetime | None) -> float:
            if when is None:
                return 0.0
            aware = when if when.tzinfo else when.replace(tzinfo=UTC)
            return now_mono + (aware - now_wall).total_seconds()

        until = mono(policy.blocked_until)
        if until > now_mono:
            gate.blocked_until = max(gate.blocked_until, until)
            if policy.parked_reason is not None:
                gate.park(policy.parked_reason, until=until)
                host.diag.parked_reason = gate.parked
                logger.info("host %s still parked until %s: %s", policy.origin, policy.blocked_until,
                            policy.parked_reason, extra={"host": policy.origin, "error_class": ErrorClass.PARKED.value})
        next_allowed = mono(policy.next_allowed_at)
        if next_allowed > now_mono:
            gate.next_allowed_at = max(gate.next_allowed_at, next_allowed)
        if policy.concurrency_limit is not None:
            gate.limit = max(1, min(policy.concurrency_limit, gate.config.max_limit))
            if gate.limit < gate.config.start_limit:
                # Learned under trouble (429s, slow answers): probe above it only as slowly as after a 429 here.
                gate.safe_limit = min(gate.safe_limit, gate.limit)
        gate.failures = max(gate.failures, policy.failures)

    async def fetch(self, url: str, *, validators: Validators = NO_VALIDATORS, accept: Sequence[str] | None = None,
                    max_bytes: int | None = None, check_robots: bool = True,
                    in_scope: Callable[[str], bool] | None = None) -> FetchResult:
        """One polite, bounded fetch. Never raises for network problems; refusals send no request.

        Waits for the host's slot and next-allowed time; a robots-disallowed URL comes back as
        ROBOTS_DISALLOWED without a request; redirect hops re-enter scope (``in_scope`` when given, for a
        document the crawl reads outside its scope, such as a sitemap on a CDN; else the client's), robots and the
        hop host's gate. A 429/503 backs the host off and is returned (the caller decides whether to requeue).
        """
        origin = http_origin(url)
        if origin is None:
            return refused(url, ErrorClass.OUT_OF_SCOPE, "only absolute http(s) URLs are fetched")
        host = self._host(origin)
        if host.gate.parked is not None:
            return self._count_refusal(host, refused(url, ErrorClass.PARKED, host.gate.parked))
        if check_robots:
            rules = self._robots.peek(origin)
            if rules is None or host.robots_applied is not rules:
                rules = await self.robots(origin)
            if not rules.allowed(url):
                return self._count_refusal(host, _robots_refusal(url, rules))
        return await self._gated(url, host, validators=validators, accept=accept,
                                 max_bytes=self.settings.http.max_body_bytes if max_bytes is None else max_bytes,
                                 check_robots=check_robots, robots_fetch=False,
                                 in_scope=self._in_scope if in_scope is None else in_scope)

    # --- the gated fetch --------------------------------------------------------------------------------------

    async def _gated(self, url: str, host: _Host, *, validators: Validators, accept: Sequence[str] | None,
                     max_bytes: int, check_robots: bool, robots_fetch: bool,
                     in_scope: Callable[[str], bool] | None = None) -> FetchResult:
        if not await self._acquire(host):
            return self._count_refusal(host, refused(url, ErrorClass.PARKED, host.gate.parked or "parked"))
        held: list[_Host | None] = [host]
        started = [time.monotonic()]

        async def follow(target: str) -> str | ErrorClass | None:
            if not robots_fetch:
                if self._canonicalize is not None:
                    target = self._canonicalize(target)
                if in_scope is not None and not in_scope(target):
                    return ErrorClass.OUT_OF_SCOPE
            hop_origin = http_origin(target)
            if hop_origin is None:
                return ErrorClass.OUT_OF_SCOPE
            # The hop is a new request: give back this slot first (never hold one slot while waiting for
            # another), then pass the hop host's robots check and gate like any first request.
            current = held[0]
            held[0] = None
            if current is not None:
                self._release(current, started[0], Signal.NEUTRAL, None)
            hop = self._host(hop_origin)
            if check_robots and not robots_fetch:
                rules = await self.robots(hop_origin)
                if not rules.allowed(target):
                    return _robots_refusal(target, rules).error_class
            if not await self._acquire(hop):
                return ErrorClass.PARKED
            held[0] = hop
            started[0] = time.monotonic()
            return target

        result: FetchResult | None = None
        try:
            if robots_fetch:
                result = await self._fetcher.fetch(
                    url, validators=validators, max_bytes=max_bytes, follow=follow, truncate=True,
                    max_redirects=self.settings.robots.max_redirects)
            else:
                result = await self._fetcher.fetch(url, validators=validators, accept=accept, max_bytes=max_bytes,
                                                   follow=follow)
            return result
        finally:
            last = held[0]
            if last is not None:
                signal = classify(result, self.gate_config.slow_response_s) if result is not None else Signal.NEUTRAL
                self._release(last, started[0], signal, result.retry_after_s if result is not None else None)
            if result is not None:
                self._count(last or host, result)

    async def _fetch_robots(self, origin: str, validators: Validators) -> FetchResult:
        host = self._host(origin)
        return await self._gated(origin + ROBOTS_PATH, host, validators=validators, accept=None,
                                 max_bytes=self.settings.robots.max_bytes, check_robots=False, robots_fetch=True)

    # --- slots ------------------------------------------------------------------------------------------------

    def _host(self, origin: str) -> _Host:
        host = self._hosts.get(origin)
        if host is None:
            host = _Host(origin, HostGate(self.gate_config))
            self._hosts[origin] = host
        return host

    async def _acquire(self, host: _Host) -> bool:
        """Wait for a slot and the next-allowed time, FIFO per host. False: the host is parked."""
        gate = host.gate
        if gate.parked is not None:
            return False
        now = time.monotonic()
        if not host.waiters and gate.wait_s(now) == 0.0:
            gate.start(now)
            self._note_start(host)
            return True
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
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

    def _release(self, host: _Host, started: float, signal: Signal, retry_after_s: float | None) -> None:
        gate = host.gate
        was_parked, was_limit, was_blocked = gate.parked, gate.limit, gate.blocked_until
        gate.finish(time.monotonic(), started, signal, retry_after_s=retry_after_s)
        if gate.parked is not None and was_parked is None:
            self._note_parked(host)
        if host.waiters:
            self._dispatch(host)
        if self.on_policy_change is not None and (
            gate.parked is not was_parked or gate.limit != was_limit or gate.blocked_until != was_blocked
        ):
            self.on_policy_change(host.diag.host)

    # --- diagnostics -----------------------------------------------------------------------------------------

    def _note_start(self, host: _Host) -> None:
        in_flight = host.gate.in_flight
        if in_flight > host.diag.peak_in_flight:
            host.diag.peak_in_flight = in_flight

    def _note_parked(self, host: _Host) -> None:
        if host.gate.parked is not None:
            host.diag.parked_reason = host.gate.parked
            logger.warning("host %s parked: %s", host.diag.host, host.gate.parked,
                           extra={"host": host.diag.host, "error_class": ErrorClass.PARKED.value})
            for waiter in host.waiters:
                if not waiter.done():
                    waiter.set_result(False)
            host.waiters.clear()

    def _count(self, host: _Host, result: FetchResult) -> None:
        diag = host.diag
        now = time.monotonic()
        diag.fetched += 1
        diag.bytes += result.bytes_read
        if result.status == 304:
            diag.not_modified += 1
        if result.error_class is not None:
            key = result.error_class.value
            diag.errors[key] = diag.errors.get(key, 0) + 1
        if diag.first_fetch_at is None:
            diag.first_fetch_at = now
        diag.last_fetch_at = now

    def _count_refusal(self, host: _Host, result: FetchResult) -> FetchResult:
        assert result.error_class is not None
        key = result.error_class.value
        host.diag.errors[key] = host.diag.errors.get(key, 0) + 1
        return result

    def _set_queue_depth(self, origin: str, depth: int) -> None:
        self._host(origin).diag.queue_depth = depth

    def _retire(self, origin: str) -> asyncio.Task[None] | None:
        """A host whose run ended keeps no sockets (its gate and diagnostics stay). The pool is detached now and
        closed in the background, so the next host does not wait for the close."""
        host = self._hosts.get(origin)
        if host is None or host.gate.in_flight or host.waiters:
            return None
        detached = self._fetcher.detach(origin)
        if detached is None:
            return None
        return asyncio.get_running_loop().create_task(close_clients([detached]), name=f"close {origin}")


# --- per-host queues and workers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    """One URL handed to the engine by the caller's ``HostWork``; ``payload`` travels back to ``done()``."""

    url: str
    host: str
    validators: Validators = NO_VALIDATORS
    accept: tuple[str, ...] | None = None
    payload: Any = None
    answered: FetchResult | None = None
    """This URL's answer, already read (the target of a permanent redirect followed in this run): no request."""


class HostWork(Protocol):
    """What extraction hands the engine (implemented by phases.py over the store)."""

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        """Up to ``n`` jobs of ``host``; empty: the host has no more work now."""
        ...

    async def done(self, job: Job, result: FetchResult) -> None:
        """Record one outcome (requeue vs failed is the caller's policy). May raise LeaseLost: stop the host."""
        ...

    async def hosts(self) -> Sequence[str]:
        """Hosts with work, in the order they should get turns."""
        ...


@dataclass
class EngineStats:
    """What one ``run_hosts`` did, for counters and artifacts."""

    hosts_served: int = 0
    fetched: int = 0
    results: Counter[str] = field(default_factory=Counter)
    parked: dict[str, str] = field(default_factory=dict)
    lease_lost: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"hosts_served": self.hosts_served, "fetched": self.fetched, "results": dict(self.results),
                "parked": dict(self.parked), "lease_lost": list(self.lease_lost),
                "elapsed_s": round(self.elapsed_s, 3)}


class _HostRun:
    """One host's turn: its own queue, refilled by one claim at a time, drained by its own workers."""

    def __init__(self, client: PoliteClient, work: HostWork, host: str, stats: EngineStats) -> None:
        self.client = client
        self.work = work
        self.host = host
        self.stats = stats
        self.queue: deque[Job] = deque()
        self.claiming: asyncio.Future[None] | None = None
        self.busy = 0  # jobs taken from the queue and not yet done()
        self.stopped = False
        self.exhausted = False
        self.batch = client.settings.store.claim_batch

    async def run(self) -> None:
        workers = max(1, self.client.gate_config.max_limit)
        try:
            async with task_group() as tasks:
                for i in range(workers):
                    tasks.create_task(self._worker(), name=f"worker {self.host} #{i}")
        finally:
            self.client._set_queue_depth(self.host, 0)

    async def _next(self) -> Job | None:
        while not self.stopped:
            if self.queue:
                job = self.queue.popleft()
                self.busy += 1
                return job
            if self.exhausted:
                return None
            if self.claiming is not None:
                await asyncio.shield(self.claiming)
                continue
            loop = asyncio.get_running_loop()
            self.claiming = loop.create_future()
            try:
                jobs = await self.work.claim(self.host, self.batch)
            finally:
                claiming, self.claiming = self.claiming, None
                claiming.set_result(None)
            if jobs:
                self.queue.extend(jobs)
                self.client._set_queue_depth(self.host, len(self.queue))
                continue
            # HostWork's contract: empty means no more work now. Requeued jobs wait for the next run_hosts call.
            self.exhausted = True
            return None
        return None

    async def _worker(self) -> None:
        client = self.client
        origin_parked = client.parked
        while True:
            job = await self._next()
            if job is None:
                return
            try:
                reason = origin_parked(http_origin(job.url) or job.host)
                if job.answered is not None:
                    result = job.answered
                elif reason is not None:
                    result = refused(job.url, ErrorClass.PARKED, reason)
                else:
                    result = await client.fetch(job.url, validators=job.validators, accept=job.accept)
                self.stats.results[result.error_class.value if result.error_class else str(result.status)] += 1
                if result.status is not None and job.answered is None:
                    self.stats.fetched += 1
                try:
                    await self.work.done(job, result)
                except LeaseLost:
                    logger.warning("lease on %s lost: stopping this host", self.host, extra={"host": self.host})
                    if self.host not in self.stats.lease_lost:
                        self.stats.lease_lost.append(self.host)
                    self.stopped = True
                    self.queue.clear()
                    return
            finally:
                self.busy -= 1
            if self.queue:
                self.client._set_queue_depth(self.host, len(self.queue))
            reason = origin_parked(http_origin(job.url) or job.host)
            if reason is not None and not self.stopped:
                await self._hand_back(reason)

    async def _hand_back(self, reason: str) -> None:
        """A parked host: every claimed job goes back through done() with a PARKED result (no request)."""
        self.stats.parked[self.host] = reason
        while self.queue:
            job = self.queue.popleft()
            result = refused(job.url, ErrorClass.PARKED, reason)
            self.stats.results[ErrorClass.PARKED.value] += 1
            try:
                await self.work.done(job, result)
            except LeaseLost:
                self.stats.lease_lost.append(self.host)
                break
        self.stopped = True


async def run_hosts(client: PoliteClient, work: HostWork, *, max_active_hosts: int,
                    on_progress: Callable[[dict[str, HostDiagnostics]], None] | None = None) -> EngineStats:
    """Fetch every host's work through its own queue and workers, at most ``max_active_hosts`` at once.

    Hosts are served in the order ``work.hosts()`` gives; a host that runs out of work, is parked or loses its
    lease is retired and the next one starts. Each host is served once per call (call again for more rounds).
    Results go to ``work.done()``; retry policy is the caller's. Exceptions other than LeaseLost propagate.
    """
    stats = EngineStats()
    started = time.monotonic()
    served: set[str] = set()
    closing: set[asyncio.Task[None]] = set()
    try:
        async with task_group() as tasks:
            progress = tasks.create_task(_progress(client, on_progress)) if on_progress is not None else None
            await _serve_hosts(client, work, tasks, max_active_hosts, stats, served, closing)
            if progress is not None:
                progress.cancel()
    finally:
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)
    for origin, diag in client.diagnostics().items():
        if diag.parked_reason is not None and origin in served:
            stats.parked.setdefault(origin, diag.parked_reason)
    stats.elapsed_s = time.monotonic() - started
    if on_progress is not None:
        on_progress(client.diagnostics())
    return stats


async def _serve_hosts(client: PoliteClient, work: HostWork, tasks: asyncio.TaskGroup, max_active_hosts: int,
                       stats: EngineStats, served: set[str], closing: set[asyncio.Task[None]]) -> None:
    """Start hosts' turns (in ``tasks``) as slots free up, until no host is left with work; retire each, its
    pool closing in the background (``closing``)."""
    pending: deque[str] = deque()
    active: dict[asyncio.Task[None], str] = {}
    while True:
        while len(active) < max_active_hosts:
            if not pending:
                pending.extend(h for h in await work.hosts() if h not in served)
                if not pending:
                    break
            host = pending.popleft()
            if host in served:
                continue
            served.add(host)
            stats.hosts_served += 1
            run = _HostRun(client, work, host, stats)
            active[tasks.create_task(run.run(), name=f"host {host}")] = host
        if not active:
            break
        done, _ = await asyncio.wait(active, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            host = active.pop(task)
            task.result()  # a bug in done()/claim() surfaces here
            closer = client._retire(host)
            if closer is not None:
                closing.add(closer)
                closer.add_done_callback(closing.discard)


async def _progress(client: PoliteClient, on_progress: Callable[[dict[str, HostDiagnostics]], None]) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        on_progress(client.diagnostics())
