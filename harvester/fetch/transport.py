"""The transports under httpx, each with a pool of exactly the host's limit and the address policy where it resolves
and connects: aiohttp (the default, cheapest per request), httpcore and HTTP/2; one TLS context shared."""

from __future__ import annotations

import functools
import ssl
from typing import Literal

import aiohttp
import httpcore
import httpx

from harvester.fetch.addresses import AddressPolicy
from harvester.fetch.resolver import GuardedBackend, GuardedResolver

Transport = Literal["aiohttp", "httpcore", "http2"]


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every https host: building one loads the CA bundle (~20-25 ms of CPU)."""
    return httpx.create_ssl_context(trust_env=False)


@functools.cache
def _no_tls_context() -> ssl.SSLContext:
    """The context handed to a plain-http origin's transport, which never opens TLS (an https URL always gets
    its own https origin's transport). It fails closed all the same: verification on, no CA loaded, so a
    handshake through it could never succeed unverified. Building it costs microseconds, not the CA bundle's
    ~25 ms, which was a visible share of a short crawl's start-up."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def make_transport(kind: Transport, connections: int, *, addresses: AddressPolicy,
                   tls: bool = True) -> httpx.AsyncBaseTransport:
    """A transport with a pool of exactly ``connections`` (the host's limit: pool cost grows with its size),
    connecting only where ``addresses`` allows (the resolver or network backend filters what it resolved and
    connects to what is left). ``tls`` False: the origin is plain http, so the CA bundle is not loaded for it."""
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=30.0)
    verify = shared_ssl_context() if tls else _no_tls_context()
    if kind == "aiohttp":
        from httpx_aiohttp import AiohttpTransport

        def session() -> aiohttp.ClientSession:
            # What httpx-aiohttp builds itself, with the policy's resolver (made inside the running loop).
            connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=limits.keepalive_expiry,
                                             ssl=verify, resolver=GuardedResolver(addresses))
            return aiohttp.ClientSession(connector=connector)

        # Older httpx-aiohttp gave an Any here, 0.2.0 a typed transport: the ignore holds for both.
        return AiohttpTransport(verify=verify, limits=limits, trust_env=False, client=session)  # type: ignore[no-any-return, unused-ignore]
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits, http2=(kind == "http2"), trust_env=False)
    # httpx takes no network backend, so its pool is rebuilt with the same settings and the guarded backend.
    # Fail closed if httpx ever stops keeping its pool there: no unguarded transport is handed out.
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        raise RuntimeError("httpx.AsyncHTTPTransport has no httpcore pool to guard; use the aiohttp transport")
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=verify, max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections, keepalive_expiry=limits.keepalive_expiry,
        http1=True, http2=(kind == "http2"), network_backend=GuardedBackend(addresses),
    )
    return transport
