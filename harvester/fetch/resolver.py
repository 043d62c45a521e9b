"""Where the address policy meets the transports: one resolution, filtered, and the connect made to what is left.

aiohttp gets ``GuardedResolver`` (its connector connects to exactly the addresses the resolver returns); httpcore
gets ``GuardedBackend`` (a network backend that resolves, filters and connects to an address, never to a name,
so nothing resolves the name again after the check). Both resolve with aiohttp's ``ThreadedResolver``
(getaddrinfo), as ``seed_addresses`` does. IP-literal hosts, which aiohttp connects to without asking any
resolver, are checked by ``http.py`` before each request. Never imports httpx.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import httpcore
from aiohttp.abc import ResolveResult
from aiohttp.resolver import ThreadedResolver

from harvester.fetch.addresses import AddressPolicy, AddressRefused, SeedOrigin, parse_address

if TYPE_CHECKING:
    from httpcore import AsyncNetworkStream

logger = logging.getLogger(__name__)


class GuardedResolver(ThreadedResolver):
    """getaddrinfo, then only the addresses the policy allows: aiohttp's connector (and its DNS cache) only ever
    sees those, so the address checked is the address connected. None allowed: ``AddressRefused``."""

    def __init__(self, policy: AddressPolicy) -> None:
        super().__init__()
        self.policy = policy

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        literal = parse_address(host)
        if literal is not None:
            self.policy.check_literal(host, port)
            return [_result(host, str(literal), port)]
        answers = await super().resolve(host, port, family)
        kept: list[ResolveResult] = []
        reasons: list[str] = []
        for answer in answers:
            address = parse_address(answer["host"])
            reason = (self.policy.refusal(address, port) if address is not None
                      else f"{answer['host']!r} is not an address")
            if reason is None:
                kept.append(answer)
            else:
                reasons.append(reason)
        if not kept:
            raise AddressRefused(host, reasons)
        if reasons:
            logger.info("%s: dropped %s", host, "; ".join(reasons), extra={"error_class": "address_refused"})
        return kept


def _result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with the policy between resolving and connecting: the name is resolved once,
    refused addresses dropped, and the connection opened to an address (TLS still names the host: httpcore passes
    the origin's name as ``server_hostname``). Addresses are tried in the resolver's order."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = httpcore.AnyIOBackend()
        self._resolver: GuardedResolver | None = None

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109 -- httpcore's API
                          local_address: str | None = None,
                          socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> AsyncNetworkStream:
        if self._resolver is None:
            self._resolver = GuardedResolver(self.policy)
        answers = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        failure: Exception | None = None
        for answer in answers:
            try:
                return await self._inner.connect_tcp(answer["host"], port, timeout=timeout,
                                                     local_address=local_address, socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # GuardedResolver returns at least one address or raises
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109 -- httpcore's API
                                  socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None) -> AsyncNetworkStream:
        raise AddressRefused(path, ["unix sockets are never fetched"])

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


DEFAULT_PORTS = (80, 443)


async def seed_addresses(seeds: Iterable[str], *, timeout_s: float) -> set[SeedOrigin]:
    """The exact (address, port) origins the seeds' hosts resolve to now (what the policy lets through beside its
    networks). A seed on its scheme's default port covers both default ports (``http://intranet/`` that moves to
    ``https://intranet/`` is the same site); one with an explicit port covers that port only. A seed that does
    not resolve adds nothing (its own fetch then fails as a connect error)."""
    hosts = {host for host in map(_host_and_port, seeds) if host is not None}
    found: set[SeedOrigin] = set()
    if not hosts:
        return found
    resolver = ThreadedResolver()

    async def one(host: str, port: int) -> None:
        ports = DEFAULT_PORTS if port in DEFAULT_PORTS else (port,)
        literal = parse_address(host)
        if literal is not None:
            found.update((literal, each) for each in ports)
            return
        try:
            async with asyncio.timeout(timeout_s):
                answers = await resolver.resolve(host, port, socket.AF_UNSPEC)
        except (OSError, TimeoutError, ValueError) as exc:  # UnicodeError (an over-long IDNA label) is a ValueError
            logger.warning("seed host %s does not resolve: %s", host, exc,
                           extra={"host": host, "error_class": "connect"})
            return
        for answer in answers:
            address = parse_address(answer["host"])
            if address is not None:
                found.update((address, each) for each in ports)

    await asyncio.gather(*(one(host, port) for host, port in hosts))
    return found


def _host_and_port(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)
