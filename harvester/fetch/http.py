"""The bounded fetch: one small httpx transport per host, a total deadline, size and redirect caps.

Only ``fetch/`` imports httpx (here, ``transport.py`` and ``answers.py``); every httpx/aiohttp/asyncio exception
is translated here into a ``FetchResult`` with an ``ErrorClass``; the last answer is read into its result by
``results.py``. It never raises for network problems and never decides politeness: the engine calls it once it
holds the host's slot. Every connection of every hop goes through the address policy (``addresses.py``, applied by
``resolver.py``): a refused address is an ``ADDRESS_REFUSED`` result, and nothing is sent to it.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urljoin, urlsplit

import aiohttp
import httpx
import yarl
from aiohttp.helpers import is_ip_address

from harvester.fetch.addresses import AddressPolicy, address_refusal
from harvester.fetch.answers import headers_of
from harvester.fetch.resolver import seed_addresses
from harvester.fetch.results import FetchState, Refused, TooLarge, drain, read_answer
from harvester.fetch.transport import RequestUrls, make_transport
from harvester.records import ACCEPT, ACCEPT_ENCODING, DEADLINE_PASSED, ErrorClass, FetchResult, Validators, origin_of
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.settings import HttpSettings, PolitenessSettings, parse_networks

logger = logging.getLogger(__name__)

Follow = Callable[[str], Awaitable["str | ErrorClass | None"]]
"""Redirect hook: given a hop's absolute target, return the URL to request (canonical form), or refuse it.

``None`` refuses as OUT_OF_SCOPE; an ``ErrorClass`` (ROBOTS_DISALLOWED, OUT_OF_SCOPE, ...) refuses with that class.
"""

StopAt = Callable[[str], Awaitable["str | None"]]
"""Asked of a permanent redirect's absolute target (every hop before it permanent too), before ``Follow``: the URL
to record the move to (canonical form) when that URL is the caller's to ask on its own (its answer already in hand,
or a URL the frontier holds), and then the redirect is not followed; ``None`` follows it as usual. Awaited: the
answer may take a look in the frontier."""

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

_SCHEMES = ("http", "https")

NO_VALIDATORS = Validators()
"""An unconditional GET (the shared default)."""

DEFAULT_CONNECTIONS: int = PolitenessSettings.model_fields["max_per_host_limit"].default
"""A host's pool when the caller sizes none (scripts, tests): the settings' per-host ceiling, not a number of its
own (the engine sizes each pool to its host's limit)."""


# --- the per-host client ------------------------------------------------------------------------------------

class HostClient:
    """One host's transport and pool. Requests go straight to the transport (no client-level cookies/auth)."""

    def __init__(self, origin: str, *, connections: int, settings: HttpSettings, user_agent: str,
                 addresses: AddressPolicy) -> None:
        self.origin = origin
        self.connections = connections
        self._addresses = addresses
        self._transport = make_transport(settings.transport, connections, addresses=addresses,
                                         tls=not origin.startswith("http://"))
        self._plain = {"user-agent": user_agent, "accept-encoding": ACCEPT_ENCODING, "accept": ACCEPT}
        # One Headers object for every unconditional GET: httpx.Request copies a Headers' list instead of
        # normalizing every name and value again.
        self._headers = httpx.Headers(self._plain)
        self._urls = RequestUrls(origin)
        self._literal: tuple[tuple[str, int | None] | None] | None = None
        """(the origin's host and port if the host is an IP literal, else None), once a request has been made."""
        self._timeout = {
            "connect": settings.connect_timeout_s,
            "read": settings.timeout_s,
            "write": settings.timeout_s,
            "pool": settings.timeout_s,
        }
        self.closed = False

    async def send(self, url: str, validators: Validators) -> httpx.Response:
        headers: httpx.Headers | dict[str, str] = self._headers
        if validators:
            headers = dict(self._plain)
            if validators.etag:
                headers["if-none-match"] = validators.etag
            if validators.last_modified:
                headers["if-modified-since"] = validators.last_modified
        request = httpx.Request("GET", self._urls(url), headers=headers, extensions={"timeout": self._timeout})
        # aiohttp connects to an IP-literal host without asking its resolver: judge the literal here, parsed and
        # recognised exactly as aiohttp will (yarl, its own test); a literal needs no resolution, so the address
        # checked is the address connected. httpcore's backend sees every host and checks it again. Every URL
        # of this client's origin has the origin's host: it is parsed once (others, if any, each time).
        if url.startswith(self._urls.prefix):
            if self._literal is None:
                self._literal = (_literal_host(request.url),)
            literal = self._literal[0]
        else:
            literal = _literal_host(request.url)
        if literal is not None:
            self._addresses.check_literal(*literal)
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        self.closed = True
        await self._transport.aclose()


def _literal_host(url: httpx.URL) -> tuple[str, int | None] | None:
    """The URL's host and port as aiohttp reads them (yarl), if the host is an IP literal."""
    parsed = yarl.URL(str(url))
    host = parsed.raw_host
    return (host, parsed.port) if host is not None and is_ip_address(host) else None


async def _close_quietly(client: HostClient) -> None:
    try:
        await client.aclose()
    except (httpx.HTTPError, aiohttp.ClientError, OSError):  # closing a broken pool is not an error
        logger.debug("closing %s failed", client.origin, exc_info=True)


async def close_clients(clients: Sequence[HostClient]) -> None:
    """Close detached host clients (run in the background by the engine: a close takes ~10 ms of waiting)."""
    for client in clients:
        await _close_quietly(client)


class Fetcher:
    """Bounded GETs over one ``HostClient`` per origin; ``fetch`` is the contract the engine relies on."""

    def __init__(
        self, settings: HttpSettings, *, user_agent: str, connections_for: Callable[[str], int] | None = None,
        seeds: Sequence[str] = (), allow_addresses: Sequence[str] = (),
    ) -> None:
        """``seeds``: URLs whose hosts' addresses (resolved once, before the first fetch) are allowed exactly;
        ``allow_addresses``: CIDR networks allowed beyond ``settings.allow_addresses`` (a site profile's)."""
        self.settings = settings
        self.user_agent = user_agent
        self._connections_for = connections_for or (lambda _origin: DEFAULT_CONNECTIONS)
        self._clients: dict[str, HostClient] = {}
        self._closed = False
        self.addresses = AddressPolicy(allow=parse_networks((*settings.allow_addresses, *allow_addresses)))
        self._seeds = tuple(seeds)
        self._seeding: asyncio.Task[None] | None = None

    def client(self, origin: str) -> HostClient:
        client = self._clients.get(origin)
        if client is None:
            client = HostClient(origin, connections=self._connections_for(origin), settings=self.settings,
                                user_agent=self.user_agent, addresses=self.addresses)
            self._clients[origin] = client
        return client

    def detach(self, origin: str) -> HostClient | None:
        """Take one host's client out of use (the next fetch to it opens a new one); the caller closes it."""
        return self._clients.pop(origin, None)

    async def close_host(self, origin: str) -> None:
        """Release one host's pool (a retired host keeps no sockets)."""
        client = self.detach(origin)
        if client is not None:
            await _close_quietly(client)

    async def aclose(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await _close_quietly(client)

    async def admit_seeds(self) -> None:
        """Add the seeds' addresses to the policy, once (every caller waits for the one resolution)."""
        if self._seeding is None:
            self._seeding = asyncio.ensure_future(self._resolve_seeds())
        await asyncio.shield(self._seeding)

    async def _resolve_seeds(self) -> None:
        if self._seeds:
            found = await seed_addresses(self._seeds, timeout_s=self.settings.connect_timeout_s)
            self.addresses.seeds.update(found)
            allowed = sorted(f"{address}:{port}" for address, port in found)
            logger.info("seed origins allowed: %s", ", ".join(allowed) or "none")

    async def fetch(
        self,
        url: str,
        *,
        validators: Validators = NO_VALIDATORS,
        accept: Sequence[str] | None = None,
        max_bytes: int | None = None,
        timeout_s: float | None = None,
        follow: Follow | None = None,
        max_redirects: int | None = None,
        truncate: bool = False,
        validators_url: str | None = None,
        stop_at: StopAt | None = None,
    ) -> FetchResult:
        """One bounded GET, redirects included. Never raises for network problems.

        The total deadline covers every hop's headers and body and the ``follow`` hook. The body cap applies
        to Content-Length, to raw streamed bytes and to decoded bytes; ``truncate`` keeps the first
        ``max_bytes`` instead of failing (robots.txt, RFC 9309 §2.5). Validators go to the URL that issued them alone
        (RFC 9110 §13.1.2): ``validators_url``, on whichever hop asks it (robots.txt, whose stored validators are its
        redirect target's, on another origin too); the first hop when None (a page's redirect reaches its target
        whole, since extraction records the move and stores the target's own copy). Another URL never gets them:
        an ETag names one entity, and one a host set is never shown to another (ETags can track). ``stop_at``: a
        permanent redirect to a URL the caller asks on its own (read already, or known to its frontier) ends the
        fetch with the redirect's own answer (``StopAt``), so the target is neither downloaded twice in one run nor
        in full behind its own validators' back.
        """
        cap = self.settings.max_body_bytes if max_bytes is None else max_bytes
        deadline_s = self.settings.timeout_s if timeout_s is None else timeout_s
        hops_allowed = self.settings.max_redirects if max_redirects is None else max_redirects
        state = FetchState(url)
        try:
            async with asyncio.timeout(deadline_s):
                if self._seeding is None or not self._seeding.done():
                    await self.admit_seeds()
                return await self._fetch(state, validators, accept, cap, follow, hops_allowed, truncate,
                                         validators_url or url, stop_at)
        except TimeoutError:
            return state.failure(ErrorClass.TIMEOUT, f"{DEADLINE_PASSED} {deadline_s:g}s passed")
        except Refused as exc:
            if exc.error_class is ErrorClass.ADDRESS_REFUSED:
                logger.info("%s: %s", state.current, exc,
                            extra={"host": origin_of(state.current), "error_class": exc.error_class.value})
            return state.failure(exc.error_class, str(exc), refused_target=exc.target)
        except TooLarge as exc:
            return state.failure(ErrorClass.TOO_LARGE, str(exc))
        except httpx.TimeoutException as exc:
            refined = _refine(exc, ErrorClass.TIMEOUT)
            if refined is ErrorClass.CONNECT and state.answered:
                refined = ErrorClass.PROTOCOL  # the connection dropped mid-answer (httpx-aiohttp calls it a timeout)
            return state.failure(refined, f"{type(exc).__name__}: {exc}")
        except httpx.UnsupportedProtocol as exc:
            return state.failure(ErrorClass.OUT_OF_SCOPE, f"{type(exc).__name__}: {exc}")
        except httpx.InvalidURL as exc:
            return state.failure(ErrorClass.INVALID_URL, f"{type(exc).__name__}: {exc}")
        except zlib.error as exc:
            return state.failure(ErrorClass.BAD_CONTENT, f"undecodable body: {exc}")
        except (httpx.HTTPError, aiohttp.ClientError, OSError, ValueError) as exc:
            return state.failure(_broken_or_unreachable(exc, state), f"{type(exc).__name__}: {exc}")

    async def _fetch(
        self,
        state: FetchState,
        validators: Validators,
        accept: Sequence[str] | None,
        cap: int,
        follow: Follow | None,
        hops_allowed: int,
        truncate: bool,
        validators_url: str,
        stop_at: StopAt | None = None,
    ) -> FetchResult:
        current = state.url
        seen = {current}
        while True:
            if urlsplit(current).scheme not in _SCHEMES:
                raise Refused(ErrorClass.OUT_OF_SCOPE, f"scheme of {current!r} is not http(s)")
            state.current = current
            sent = validators if current == validators_url else NO_VALIDATORS
            state.answered = False
            # ``state.sent`` names the validators once the request may have left, never before: a request refused
            # by the address policy or whose connection was never made carried nothing, and the fetch log (and
            # the WARC export's request records) must not say it did. A hop that never left keeps the last hop's.
            try:
                response = await self.client(origin_of(current)).send(current, sent)
            except (httpx.HTTPError, aiohttp.ClientError, OSError) as exc:
                refusal = address_refusal(exc)
                if refusal is not None:
                    raise Refused(ErrorClass.ADDRESS_REFUSED, str(refusal)) from exc
                if not _never_left(exc):
                    state.sent = sent
                raise
            except BaseException:  # the deadline or a cancel, on the wire or not: taken to have left, as it may have
                state.sent = sent
                raise
            state.sent = sent
            try:
                status = response.status_code
                state.status = status
                state.answered = True
                headers = headers_of(response)
                state.headers = headers
                location = headers.get("location")
                if status in REDIRECT_STATUSES and location:
                    drained = await drain(response, headers)
                    target = urljoin(current, location.strip())
                    if len(state.hops) >= hops_allowed:
                        raise Refused(ErrorClass.TOO_MANY_REDIRECTS, f"more than {hops_allowed} redirects")
                    if stop_at is not None and status in PERMANENT_REDIRECTS and all(
                            code in PERMANENT_REDIRECTS for code in state.hop_statuses):
                        read = await stop_at(target)
                        if read is not None and read not in seen:
                            return state.unfollowed(read, drained.raw_bytes)
                    if follow is not None:
                        decided = await follow(target)
                        if decided is None or isinstance(decided, ErrorClass):
                            cls = decided if isinstance(decided, ErrorClass) else ErrorClass.OUT_OF_SCOPE
                            raise Refused(cls, f"redirect to {target} refused ({cls.value})", target=target)
                        target = decided
                    if target in seen:
                        raise Refused(ErrorClass.TOO_MANY_REDIRECTS, f"redirect loop back to {target}")
                    seen.add(target)
                    state.hops.append(target)
                    state.hop_statuses.append(status)
                    current = target
                    continue
                return await read_answer(state, response, headers, accept, cap, truncate)
            finally:
                await response.aclose()

def _never_left(exc: BaseException) -> bool:
    """Whether ``exc`` was met before the request's bytes could go out: no connection was made (refused,
    unreachable, timed out connecting) or none came free in the pool. Any other failure may have met the request
    on the wire."""
    if isinstance(exc, (httpx.ConnectError, httpx.PoolTimeout, aiohttp.ClientConnectorError,
                        aiohttp.ConnectionTimeoutError)):
        return True
    if isinstance(exc, httpx.ConnectTimeout):
        # httpcore raises it only while connecting; httpx-aiohttp maps every aiohttp connection error to it, a
        # server's disconnect after the request was written among them: there, its aiohttp cause tells.
        cause = exc.__cause__
        return not isinstance(cause, aiohttp.ClientError) or isinstance(
            cause, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))
    return False


def _broken_or_unreachable(exc: BaseException, state: FetchState) -> ErrorClass:
    """PROTOCOL when the server answered and broke HTTP (the body cut short or overrunning its Content-Length,
    a garbled status line), CONNECT when no answer came: operators look at the server for one, the network for
    the other. Both are retried and count towards parking alike."""
    if state.answered:
        return ErrorClass.PROTOCOL  # the answer had begun: what failed was the answer
    for cause in (exc, exc.__cause__, exc.__context__):
        if _cut_in_head(cause):
            return ErrorClass.PROTOCOL
        if isinstance(cause, httpx.RemoteProtocolError) and "without sending a response" in str(cause):
            return ErrorClass.CONNECT  # closed before any answer: a dropped connection, not a broken answer
        if isinstance(cause, (httpx.RemoteProtocolError, aiohttp.ClientPayloadError,
                              aiohttp.http_exceptions.HttpProcessingError)):
            return ErrorClass.PROTOCOL  # a garbled status line
    return ErrorClass.CONNECT


def _cut_in_head(exc: BaseException | None) -> bool:
    """aiohttp's disconnect after a status line but before the end of the head: it carries the head parsed so
    far. The server answered (a broken answer, PROTOCOL), where a disconnect with nothing read is CONNECT."""
    return isinstance(exc, aiohttp.ServerDisconnectedError) and not isinstance(exc.message, str)


def _refine(exc: BaseException, default: ErrorClass) -> ErrorClass:
    """httpx-aiohttp maps every aiohttp connection error to ConnectTimeout; keep real timeouts apart."""
    cause = exc.__cause__
    if _cut_in_head(cause):
        return ErrorClass.PROTOCOL
    if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(
        cause, (aiohttp.ServerTimeoutError, asyncio.TimeoutError)
    ):
        return ErrorClass.CONNECT
    return default


async def fetch(
    url: str,
    *,
    fetcher: Fetcher,
    validators: Validators = NO_VALIDATORS,
    accept: Sequence[str] | None = None,
    max_bytes: int,
    timeout_s: float,
    follow: Follow | None = None,
) -> FetchResult:
    """Module-level form of ``Fetcher.fetch`` (the engine holds a Fetcher; this is for scripts and tests)."""
    return await fetcher.fetch(
        url, validators=validators, accept=accept, max_bytes=max_bytes, timeout_s=timeout_s, follow=follow
    )
