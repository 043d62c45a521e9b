"""The transports under httpx, each with a pool of exactly the host's limit and the address policy where it resolves
and connects: aiohttp (the default, cheapest per request), httpcore and HTTP/2; one TLS context shared."""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

import aiohttp
import httpcore
import httpx

from harvester.errors import LeaseLost
from harvester.fetch.addresses import AddressPolicy
from harvester.fetch.resolver import GuardedBackend, GuardedResolver

Transport = Literal["aiohttp", "httpcore", "http2"]

LAST_CHECK: ContextVar[Callable[[], bool] | None] = ContextVar("harvester_last_check", default=None)
"""The lease check of the request being made in this task (``PoliteClient``'s ``hold``), asked again by the
aiohttp transport once the request's connection is in hand, the last await before its bytes go out. The
engine asks it before the fetch too, but a request may then wait for a connection (or a process be frozen
there): asked only up there, a process stopped past its lease and continued went on to send that request to
a host another process had taken over (tests/phases/test_scaleout.py's frozen extractor, 2 of 5 runs)."""


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
            connector = _LastCheckConnector(limit=connections, keepalive_timeout=limits.keepalive_expiry,
                                            ssl=verify, resolver=GuardedResolver(addresses))
            return _no_silent_retry(aiohttp.ClientSession(connector=connector))

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


class _LastCheckConnector(aiohttp.TCPConnector):
    """Asks ``LAST_CHECK`` once the request's connection is in hand (made or taken from the pool), the last await
    before its bytes go out; a lapsed lease gives the unused connection back to the pool and sends nothing."""

    async def connect(self, *args: Any, **kwargs: Any) -> aiohttp.connector.Connection:
        connection = await super().connect(*args, **kwargs)
        check = LAST_CHECK.get()
        if check is not None:
            try:
                live = check()
            except BaseException:
                connection.release()
                raise
            if not live:
                connection.release()
                raise LeaseLost("the lease on the host lapsed while its request waited for a connection; "
                                "nothing was sent")
        return connection


def _no_silent_retry(session: aiohttp.ClientSession) -> aiohttp.ClientSession:
    """Turn off aiohttp's own second send of an idempotent request whose connection dropped before a complete
    answer (``ClientSession._retry_connection``, aiohttp >= 3.10, which its own test client turns off the same
    way): each attempt must reach the server once, under the politeness gate that counted it; a retry is the
    engine's decision, after its back-off (tests/fetch/test_http.py counts the requests a cut answer gets)."""
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session


# --- request URLs without a second full parse ---------------------------------------------------------------

_AS_IS_PATH = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*")
"""A path httpx keeps exactly as written: unreserved, sub-delims, ``:@/`` and well-formed escapes only."""

_AS_IS_QUERY = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*")


class RequestUrls:
    """``httpx.URL`` objects for one origin's URLs: the origin is parsed once, each URL's path and query are
    checked by one regular expression instead of httpx's full parse (its per-character scans cost ~13 us a
    request, half of an ``httpx.Request``'s construction). A URL the check is not sure of, or any URL when
    httpx's parsed form is not what this relies on, takes ``httpx.URL(url)``: the result is equal either way
    (tests/fetch/test_transport_urls.py compares them)."""

    __slots__ = ("_base", "prefix")

    def __init__(self, origin: str) -> None:
        self.prefix = origin + "/"
        self._base: Any = None
        try:
            base = httpx.URL(self.prefix)
        except httpx.InvalidURL:
            return
        reference = getattr(base, "_uri_reference", None)
        if reference is not None and hasattr(reference, "_replace") and reference.path == "/":
            self._base = reference
            # Another httpx release may keep more in a URL than its reference: the fast path is proven on one
            # URL first, and a difference (or any error) leaves every URL to httpx's own parse.
            probe = self.prefix + "as-is/probe?q=1"
            try:
                fast = self(probe)
                if fast != httpx.URL(probe) or str(fast) != probe or fast.raw_path != b"/as-is/probe?q=1":
                    self._base = None
            except Exception:  # any surprise from httpx's internals means: do not use them
                self._base = None

    def __call__(self, url: str) -> httpx.URL:
        base = self._base
        if base is None or not url.startswith(self.prefix) or len(url) > MAX_AS_IS:
            return httpx.URL(url)
        path, mark, query = url[len(self.prefix) - 1:].partition("?")
        if ("/." in path and _dot_segment(path)) or _AS_IS_PATH.fullmatch(path) is None or (
                mark and _AS_IS_QUERY.fullmatch(query) is None):
            return httpx.URL(url)
        parsed = httpx.URL.__new__(httpx.URL)
        parsed._uri_reference = base._replace(path=path, query=query if mark else None)
        return parsed


MAX_AS_IS = 4096
"""Longer URLs take httpx's own parse (its limit, 65536, is checked there)."""


def _dot_segment(path: str) -> bool:
    """A ``.`` or ``..`` segment, which httpx removes."""
    segments = path.split("/")
    return "." in segments or ".." in segments
