"""The polite fetch: ``PoliteClient``, the one fetch of both phases, with per-host gates and robots.txt checks.

All awaiting for politeness happens here (``politeness.py`` only decides). A host's requests never exceed its
limit, never start before its next-allowed time, and a slow or failing host only slows itself. The per-host
queues and workers that drive it are in ``workers.py``. Never touches storage.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from harvester.errors import LeaseLost
from harvester.fetch.http import NO_VALIDATORS, Fetcher, close_clients
from harvester.fetch.politeness import GateConfig, HostGate, Signal, classify
from harvester.fetch.robots import ROBOTS_PATH, ROBOTS_READ_PAST, RobotsCache, RobotsPersistence, RobotsRules
from harvester.fetch.slots import HostSlots, _Host
from harvester.fetch.transport import LAST_CHECK
from harvester.records import OWN_REFUSAL, ErrorClass, FetchResult, HostDiagnostics, HostPolicy, Validators, http_origin
from harvester.runtime import aware, check_stop, utcnow
from harvester.settings import Settings

logger = logging.getLogger(__name__)


def refused(url: str, error_class: ErrorClass, error: str) -> FetchResult:
    """A fetch that sent no request (robots, scope, parked host): a value, like every outcome."""
    return FetchResult(url=url, final_url=url, status=None, started_at=time.time(), elapsed_s=0.0,
                       error_class=error_class, error=error)


def _robots_refusal(url: str, rules: RobotsRules) -> FetchResult:
    """A URL robots.txt does not let through. When robots.txt itself was refused (by the address policy, or by the
    HTTP client as written), nothing was read: say what was refused, where (the origin, or the address its
    robots.txt redirected to), rather than blame a robots.txt that was never read."""
    state = rules.state
    if state.error_class in (ErrorClass.ADDRESS_REFUSED, ErrorClass.INVALID_URL):
        where = state.refused or rules.origin
        if http_origin(where) != rules.origin:
            where = f"{where} (where {rules.origin}/robots.txt redirects)"
        why = "the address policy refused" if state.error_class is ErrorClass.ADDRESS_REFUSED else \
            "the HTTP client refuses the URL"
        return refused(url, state.error_class, f"{why} {where}")
    unavailable = robots_unavailable(rules)
    if unavailable is not None:
        return refused(url, ErrorClass.PARKED, unavailable)
    return refused(url, ErrorClass.ROBOTS_DISALLOWED, OWN_REFUSAL)


def robots_unavailable(rules: RobotsRules) -> str | None:
    """Why the host is left alone while its robots.txt is unavailable (5xx, 429, unreachable), or None.

    RFC 9309 §2.3.1.4's "complete disallow" is a rule for the crawl (send the host nothing), not a verdict on its
    pages: they are deferred, like a parked host's, keeping their state and last good version, never refused. A
    robots.txt the address policy or the HTTP client refused is not this: nothing there will ever answer."""
    state = rules.state
    if rules.mode != "disallow" or state.error_class in (ErrorClass.ADDRESS_REFUSED, ErrorClass.INVALID_URL):
        return None
    why = state.error_class.value if state.error_class is not None else f"http_{state.status}"
    return f"robots.txt unavailable ({why}): nothing is requested until it answers"




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
        self._slots = HostSlots(self.gate_config, self._policy_changed)
        self._fetcher = Fetcher(settings.http, user_agent=self.user_agent,
                                connections_for=lambda _origin: self.gate_config.max_limit, seeds=seeds,
                                allow_addresses=allow_addresses)
        self._robots = RobotsCache(settings.robots, user_agent=self.user_agent, fetch=self._fetch_robots,
                                   persistence=robots_store)
        self.on_policy_change: Callable[[str], None] | None = None
        """Called with an origin whenever its persistable politeness state changed (a back-off was set or
        extended, the host was parked, AIMD moved its limit): the caller writes ``host_policy(origin)`` back,
        so a rerun, or the next phase's client, honours it even if this process dies right after. Never awaited;
        set by ``harvester.phases.host_policy.PolicyKeeper``."""

    def _policy_changed(self, origin: str) -> None:
        if self.on_policy_change is not None:
            self.on_policy_change(origin)

    def set_queue_depth(self, origin: str, depth: int) -> None:
        """How many claimed URLs of ``origin`` wait for a slot (its diagnostics' ``queue_depth``)."""
        self._slots.set_queue_depth(origin, depth)

    def set_scope(self, in_scope: Callable[[str], bool]) -> None:
        """Judge redirect hops by ``in_scope`` from now on (a client shared by phases whose scopes can grow)."""
        self._in_scope = in_scope

    async def __aenter__(self) -> PoliteClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        try:
            await self._robots.aclose()  # first: a robots.txt fetch left running must not meet its connection closed
        finally:
            self._slots.cancel_timers()
            await self._fetcher.aclose()

    # --- public ---------------------------------------------------------------------------------------------

    @property
    def robots_fetches(self) -> int:
        """robots.txt fetches made by this client (tests prove 'once per host' with it and the server log)."""
        return self._robots.fetches

    async def robots(self, origin: str, *, fresh_since: datetime | None = None) -> RobotsRules:
        """The origin's robots.txt rules (fetched once, shared by concurrent callers); applies its pacing.
        ``fresh_since``: a copy fetched before then is asked again, conditionally (``RobotsCache.rules``)."""
        host = self._slots.host(origin)
        rules = await self._robots.rules(origin, fresh_since=fresh_since) if fresh_since else (
            self._robots.peek(origin) or await self._robots.rules(origin))
        if host.robots_applied is not rules:
            host.robots_applied = rules
            was_parked = host.gate.parked
            host.gate.set_robots(time.monotonic(), rules.crawl_delay_s, rules.request_rate_s)
            unavailable = robots_unavailable(rules)
            if unavailable is not None:  # until robots.txt is asked again (``robots.error_cache_s``)
                host.gate.park(unavailable, until=rules.expires_at)
            self._slots.note_parked(host)
            if host.gate.parked is not was_parked:
                self._policy_changed(origin)
        return rules

    def parked(self, origin: str) -> str | None:
        host = self._slots.known(origin)
        return host.gate.parked if host is not None else None

    def diagnostics(self) -> dict[str, HostDiagnostics]:
        """A snapshot per origin (copies: the live counters keep changing)."""
        out: dict[str, HostDiagnostics] = {}
        for origin, host in self._slots.items():
            diag = host.diag
            out[origin] = replace(diag, limit=host.gate.limit, in_flight=host.gate.in_flight,
                                  errors=dict(diag.errors), parked_reason=host.gate.parked)
        return out

    def gate(self, origin: str) -> HostGate:
        """The live politeness state of one origin (read it; the engine is the one that changes it)."""
        return self._slots.host(origin).gate

    def host_policy(self, origin: str) -> HostPolicy:
        """The origin's politeness state to persist (``FrontierStore.save_host_policy``), so a rerun keeps
        honouring a Retry-After, a back-off or a park and starts from the learned limit. Monotonic times become
        UTC; ``blocked_until`` of a parked host is when its park ends (``HostGate.parked_until``)."""
        gate = self._slots.host(origin).gate
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
        host = self._slots.host(policy.origin)
        gate = host.gate
        now_mono, now_wall = time.monotonic(), utcnow()

        def mono(when: datetime | None) -> float:
            if when is None:
                return 0.0
            return now_mono + (aware(when) - now_wall).total_seconds()

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
        if policy.concurrency_limit is not None and not gate.config.fixed:  # a fixed limit is the site's own
            gate.limit = max(1, min(policy.concurrency_limit, gate.config.max_limit))
            if gate.limit < gate.config.start_limit:
                # Learned under trouble (429s, slow answers): probe above it only as slowly as after a 429 here.
                gate.safe_limit = min(gate.safe_limit, gate.limit)
        gate.failures = max(gate.failures, policy.failures)

    async def fetch(self, url: str, *, validators: Validators = NO_VALIDATORS, accept: Sequence[str] | None = None,
                    max_bytes: int | None = None, check_robots: bool = True,
                    in_scope: Callable[[str], bool] | None = None, hold: Callable[[], bool] | None = None,
                    stop_at: Callable[[str], Awaitable[bool]] | None = None,
                    validators_url: str | None = None, timeout_s: float | None = None) -> FetchResult:
        """One polite, bounded fetch (``timeout_s``: its whole deadline, ``http.timeout_s`` when None). Never raises
        for network problems; refusals send no request.

        Waits for the host's slot and next-allowed time; a robots-disallowed URL comes back as
        ROBOTS_DISALLOWED without a request (while robots.txt is unavailable the host is parked instead: PARKED, the
        URL deferred, not refused: ``robots_unavailable``); redirect hops re-enter scope (``in_scope`` when given, for a
        document the crawl reads outside its scope, such as a sitemap on a CDN; else the client's), robots and the
        hop host's gate. A 429/503 backs the host off and is returned (the caller decides whether to requeue).
        ``hold`` is asked at the last moment before the request, after every wait: False raises ``LeaseLost`` and
        nothing is sent (the caller's lease on the host has lapsed, say after the process was frozen).
        ``stop_at`` says whether a URL (a hop's target, as this client requests it) is the caller's to ask on its own
        (read already in this run, or a URL of its frontier): a permanent redirect to one in scope is answered with
        the redirect itself, unfollowed (``FetchResult.unfollowed``), since following it would download that URL a
        second time, or in full where its own request is conditional; no gate is passed for a hop never requested.
        ``validators_url``: the URL ``validators`` were issued by, sent on the hop that asks it alone (a remembered
        redirect asked again carries its target's validators to the target); ``url`` when None.
        """
        origin = http_origin(url)
        if origin is None:
            return refused(url, ErrorClass.OUT_OF_SCOPE, "only absolute http(s) URLs are fetched")
        host = self._slots.host(origin)
        if host.gate.parked is not None:
            return self._slots.count_refusal(host, refused(url, ErrorClass.PARKED, host.gate.parked))
        if check_robots:
            rules = self._robots.peek(origin)
            if rules is None or host.robots_applied is not rules:
                rules = await self.robots(origin)
            if not rules.allowed(url):
                return self._slots.count_refusal(host, _robots_refusal(url, rules))
        return await self._gated(url, host, validators=validators, accept=accept,
                                 max_bytes=self.settings.http.max_body_bytes if max_bytes is None else max_bytes,
                                 check_robots=check_robots, robots_fetch=False,
                                 in_scope=self._in_scope if in_scope is None else in_scope, hold=hold,
                                 stop_at=stop_at, validators_url=validators_url, timeout_s=timeout_s)

    # --- the gated fetch --------------------------------------------------------------------------------------

    async def _gated(self, url: str, host: _Host, *, validators: Validators, accept: Sequence[str] | None,
                     max_bytes: int, check_robots: bool, robots_fetch: bool, validators_url: str | None = None,
                     in_scope: Callable[[str], bool] | None = None, hold: Callable[[], bool] | None = None,
                     stop_at: Callable[[str], Awaitable[bool]] | None = None,
                     timeout_s: float | None = None) -> FetchResult:
        if not await self._slots.acquire(host):
            check_stop()  # refused because the process is stopping: no request, as below
            return self._slots.count_refusal(host, refused(url, ErrorClass.PARKED, host.gate.parked or "parked"))
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
                self._slots.release(current, started[0], Signal.NEUTRAL, None)
            hop = self._slots.host(hop_origin)
            if check_robots and not robots_fetch:
                rules = await self.robots(hop_origin)
                if not rules.allowed(target):
                    return _robots_refusal(target, rules).error_class
            if not await self._slots.acquire(hop):
                check_stop()
                return ErrorClass.PARKED
            held[0] = hop
            started[0] = time.monotonic()
            return target

        async def read(target: str) -> str | None:
            """The hop as it would be requested, when ``stop_at`` says the caller asks it on its own (and it is in
            scope: an out-of-scope hop is refused by ``follow`` as ever)."""
            assert stop_at is not None
            if self._canonicalize is not None:
                target = self._canonicalize(target)
            if in_scope is not None and not in_scope(target):
                return None
            return target if await stop_at(target) else None

        result: FetchResult | None = None
        try:
            check_stop()  # the last moment before a request: a stopped process sends none
            if hold is not None and not hold():  # ... nor one whose lease on the host has lapsed
                raise LeaseLost(f"the lease on {host.diag.host} lapsed before {url} was requested; nothing was sent")
            last_check = LAST_CHECK.set(hold)  # asked again once the connection is in hand (``LAST_CHECK``)
            try:
                if robots_fetch:
                    result = await self._fetcher.fetch(
                        url, validators=validators, max_bytes=max_bytes, follow=follow, truncate=True,
                        max_redirects=self.settings.robots.max_redirects, validators_url=validators_url)
                else:
                    result = await self._fetcher.fetch(url, validators=validators, accept=accept,
                                                       max_bytes=max_bytes, follow=follow,
                                                       stop_at=read if stop_at is not None else None,
                                                       validators_url=validators_url, timeout_s=timeout_s)
            finally:
                LAST_CHECK.reset(last_check)
            return result
        finally:
            last = held[0]
            if last is not None:
                signal = classify(result, self.gate_config.slow_response_s) if result is not None else Signal.NEUTRAL
                self._slots.release(last, started[0], signal, result.retry_after_s if result is not None else None,
                                    key=result.url if result is not None else None)
            if result is not None:
                self._slots.count(last or host, result)

    async def _fetch_robots(self, origin: str, validators: Validators, issuer: str) -> FetchResult:
        """robots.txt, tried again (``robots.connect_attempts``, ``robots.connect_retry_s`` apart, doubling) while
        no answer comes (CONNECT: refused, reset, dropped before a status line). One failed connection is not yet
        RFC 9309 §2.3.1.4's "unreachable": taken as such, it parked a host whose robots.txt answers the next moment
        for ``robots.error_cache_s``, its work deferred to the next run. An answer (5xx, 429) or a timeout is final:
        the server spoke, or asking again would wait as long. The wait is the host's next-allowed time, so a stop
        ends it like any politeness wait."""
        host = self._slots.host(origin)
        robots = self.settings.robots
        attempt = 1
        while True:
            result = await self._gated(origin + ROBOTS_PATH, host, validators=validators, validators_url=issuer,
                                       accept=None, max_bytes=robots.max_bytes + ROBOTS_READ_PAST, check_robots=False,
                                       robots_fetch=True)
            if result.error_class is not ErrorClass.CONNECT or result.status is not None \
                    or attempt >= robots.connect_attempts:
                return result
            wait = robots.connect_retry_s * 2 ** (attempt - 1)
            attempt += 1
            logger.info("robots.txt of %s: no answer (%s); try %d of %d in %.1fs", origin, result.error, attempt,
                        robots.connect_attempts, wait, extra={"host": origin, "error_class": ErrorClass.CONNECT.value})
            host.gate.next_allowed_at = max(host.gate.next_allowed_at, time.monotonic() + wait)

    def retire(self, origin: str) -> asyncio.Task[None] | None:
        """A host whose run ended keeps no sockets and, when they are persisted, no robots.txt rules in memory
        (reloaded from the store on its next request, and applied to its gate again); its gate and diagnostics
        stay, so its limit, back-off and next allowed time hold whatever comes next. The pool is detached now and
        closed in the background, so the next host does not wait for the close."""
        host = self._slots.known(origin)
        if host is None or host.gate.in_flight or host.waiters:
            return None
        if self._robots.forget(origin):
            host.robots_applied = None
        detached = self._fetcher.detach(origin)
        if detached is None:
            return None
        return asyncio.get_running_loop().create_task(close_clients([detached]), name=f"close {origin}")
