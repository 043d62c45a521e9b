"""The test web's HTTP/1.1 server: an asyncio Protocol per connection (keep-alive, pipelined requests answered in
order, Content-Length bodies, precomputed replies), all hosts on one event loop (``runners`` runs it in a daemon
thread or a spawned child process).

Binds only 127.0.0.1. Never blocks its loop on anything but a request's own work.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from harvester.testing.render import ServedSite
from harvester.testing.resources import Reply, Stream, make_resource
from harvester.testing.sites import HostChange, HostSpec

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
MAX_HEAD_BYTES = 64 * 1024
"""A request head larger than this is answered 431 and the connection closed."""

RawRecord = tuple[str, str, str, int, int, float, float, int, str | None, str | None, str | None]

try:  # uvloop roughly halves the server's CPU per request; plain asyncio works the same, only slower.
    import uvloop

    def new_loop() -> asyncio.AbstractEventLoop:
        return uvloop.new_event_loop()

except ImportError:  # pragma: no cover - uvloop is a dependency

    def new_loop() -> asyncio.AbstractEventLoop:
        return asyncio.new_event_loop()


# ====================================================================== the server (runs on one loop)


class _ServedHost:
    __slots__ = ("in_flight", "latency", "max_in_flight", "name", "reply_429", "site")

    def __init__(self, spec: HostSpec) -> None:
        self.name = spec.name
        self.latency = spec.latency_s
        self.max_in_flight = spec.max_in_flight
        self.in_flight = 0
        self.site: ServedSite | None = None
        r = make_resource(
            429,
            "text/plain",
            "too many requests\n",
            headers=(("Retry-After", f"{spec.retry_after_s:g}"),),
            validators=False,
        )
        self.reply_429: Reply = (429, r.head, r.body(b""))


# method, target, path, query, if-none-match, if-modified-since, user-agent, close, start, in_flight
_Req = tuple[str, str, str, str, str | None, str | None, str | None, bool, float, int]

_CLOSE = b"Connection: close\r\n\r\n"
_KEEP = b"\r\n"


class _Conn(asyncio.Protocol):
    """One client connection. Requests are answered in arrival order: synchronously when nothing is queued
    and the host has no latency, else by one worker task per connection (latency, streams, pipelining)."""

    __slots__ = ("_buf", "_can_write", "_closing", "_queue", "_task", "host", "server", "transport")

    def __init__(self, host: _ServedHost, server: Server) -> None:
        self.host = host
        self.server = server
        self.transport: asyncio.Transport | None = None
        self._buf = b""
        self._queue: collections.deque[tuple[_Req, Reply | Stream | None]] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._can_write: asyncio.Event | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        self.server.conns.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self.server.conns.discard(self)
        if self._can_write is not None:
            self._can_write.set()
        if self._task is not None:
            self._task.cancel()
        else:
            self._abandon()

    def _abandon(self) -> None:
        """The client left with requests unanswered: they leave the in-flight count, logged with status 0."""
        while self._queue:
            req, _ = self._queue.popleft()
            self._log(req, 0, 0)

    def pause_writing(self) -> None:
        if self._can_write is None:
            self._can_write = asyncio.Event()
        self._can_write.clear()

    def resume_writing(self) -> None:
        if self._can_write is not None:
            self._can_write.set()

    async def drain(self) -> None:
        if self._can_write is not None and not self._can_write.is_set():
            await self._can_write.wait()
        if self._closing:
            raise ConnectionResetError("client went away")

    # ------------------------------------------------------------ parsing

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        buf = self._buf + data if self._buf else data
        pos = 0
        while True:
            end = buf.find(b"\r\n\r\n", pos)
            if end < 0:
                break
            head_start = pos
            lines = buf[pos:end].lstrip(b"\r\n").split(b"\r\n")
            pos = end + 4
            parts = lines[0].decode("latin-1").split(" ")
            if len(parts) != 3:
                self._fatal(400)
                return
            method, target, version = parts
            inm = ims = ua = None
            close = version != "HTTP/1.1"
            clen = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                n = name.strip().lower()
                if n == b"if-none-match":
                    inm = value.strip().decode("latin-1")
                elif n == b"if-modified-since":
                    ims = value.strip().decode("latin-1")
                elif n == b"user-agent":
                    ua = value.strip().decode("latin-1")
                elif n == b"connection":
                    v = value.lower()
                    if b"close" in v:
                        close = True
                    elif b"keep-alive" in v:
                        close = False
                elif n == b"content-length":
                    try:
                        clen = int(value)
                    except ValueError:
                        self._fatal(400)
                        return
                elif n == b"transfer-encoding":
                    self._fatal(400)  # request bodies are never chunked here; refuse rather than desync
                    return
            if clen:
                if len(buf) - pos < clen:
                    pos = head_start
                    break
                pos += clen
            self._arrive(method, target, inm, ims, ua, close)
            if close or self._closing:
                self._closing = True
                break
        rest = buf[pos:]
        if len(rest) > MAX_HEAD_BYTES:
            self._fatal(431)
            return
        self._buf = rest if not self._closing else b""

    def _fatal(self, status: int) -> None:
        self._closing = True
        self._buf = b""
        if self.transport is not None:
            self.transport.write(f"HTTP/1.1 {status} Bad Request\r\nContent-Length: 0\r\n".encode() + _CLOSE)
            self.transport.close()

    def _arrive(self, method: str, target: str, inm: str | None, ims: str | None, ua: str | None, c: bool) -> None:
        host = self.host
        host.in_flight += 1
        if target.startswith(("http://", "https://")):  # absolute-form (RFC 9112 §3.2.2)
            s = urlsplit(target)
            target = (s.path or "/") + ("?" + s.query if s.query else "")
        path, _, query = target.partition("?")
        req: _Req = (method, target, path, query, inm, ims, ua, c, time.monotonic(), host.in_flight)
        reply: Reply | Stream | None = None
        if host.max_in_flight is not None and host.in_flight > host.max_in_flight:
            reply = host.reply_429
        if self._queue or host.latency:
            self._enqueue(req, reply)
            return
        if reply is None:
            reply = self._resolve(req)
        if isinstance(reply, Stream):
            self._enqueue(req, reply)
        else:
            self._send(req, reply)

    def _resolve(self, req: _Req) -> Reply | Stream:
        method = req[0]
        if method not in ("GET", "HEAD"):
            r = make_resource(405, "text/plain", "", headers=(("Allow", "GET, HEAD"),), validators=False)
            return 405, r.head, b""
        site = self.host.site
        assert site is not None
        return site.respond(req[2], req[3], req[4], req[5])

    def _enqueue(self, req: _Req, reply: Reply | Stream | None) -> None:
        self._queue.append((req, reply))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._work())

    async def _work(self) -> None:
        try:
            while self._queue and not self._closing:
                req, reply = self._queue[0]
                if reply is None:
                    if self.host.latency:
                        await asyncio.sleep(self.host.latency)
                    reply = self._resolve(req)
                self._queue.popleft()
                if isinstance(reply, Stream):
                    await self._send_stream(req, reply)
                else:
                    self._send(req, reply)
        except (asyncio.CancelledError, ConnectionError):
            pass  # the client went away (or the server is stopping): nothing left to answer
        except Exception:
            logger.exception("test web: answering failed", extra={"host": self.host.name})
            if self.transport is not None:
                self.transport.close()
        finally:
            self._task = None
            if self._closing:
                self._abandon()

    # ------------------------------------------------------------ writing

    def _log(self, req: _Req, status: int, nbytes: int) -> None:
        self.host.in_flight -= 1
        self.server.records.append(
            (self.host.name, req[1], req[0], status, nbytes, req[8], time.monotonic(), req[9], req[4], req[5], req[6])
        )

    def _send(self, req: _Req, reply: Reply) -> None:
        status, head, body = reply
        close = req[7]
        data = head + (_CLOSE if close else _KEEP)
        if req[0] != "HEAD":
            data += body
        transport = self.transport
        if transport is None or (self._closing and not close):
            self._log(req, 0, 0)
            return
        transport.write(data)
        self._log(req, status, len(data))
        if close:
            self._closing = True
            transport.close()

    async def _send_stream(self, req: _Req, reply: Stream) -> None:
        transport = self.transport
        assert transport is not None
        close = req[7] or reply.close
        sent = 0
        try:
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
            head = reply.head if isinstance(reply.head, bytes) else await reply.head()
            if self._closing:
                raise ConnectionResetError("client went away")
            data = head + (_CLOSE if close else _KEEP)
            transport.write(data)
            sent = len(data)
            if req[0] != "HEAD":
                async for chunk in reply.body():
                    if self._closing:
                        break
                    transport.write(chunk)
                    sent += len(chunk)
                    await self.drain()
        except (ConnectionError, asyncio.CancelledError):
            self._log(req, reply.status, sent)
            raise
        self._log(req, reply.status, sent)
        if close:
            self._closing = True
            transport.close()


class Server:
    """All hosts on one event loop. Methods run on that loop only."""

    def __init__(self, specs: Sequence[HostSpec], seed: int) -> None:
        self.specs = list(specs)
        self.seed = seed
        self.hosts = {s.name: _ServedHost(s) for s in self.specs}
        self.records: list[RawRecord] = []
        self.conns: set[_Conn] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.ports: dict[str, int] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for spec in self.specs:
            host = self.hosts[spec.name]
            srv = await loop.create_server(functools.partial(_Conn, host, self), LOOPBACK, spec.port,
                                            backlog=2048)
            self.servers.append(srv)
            port = srv.sockets[0].getsockname()[1]
            self.ports[spec.name] = port
            host.site = ServedSite(spec, self.seed, f"http://{LOOPBACK}:{port}")

    def sites(self) -> dict[str, ServedSite]:
        return {name: h.site for name, h in self.hosts.items() if h.site is not None}

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> dict[str, HostChange]:
        out = {}
        for name, site in self.sites().items():
            site.advance(changed=changed, new=new, gone=gone, moved=moved, restyled=restyled, returned=returned)
            out[name] = site.model.last_change
        return out

    async def close(self) -> None:
        for srv in self.servers:
            srv.close()
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.abort()
        for srv in self.servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 2)
