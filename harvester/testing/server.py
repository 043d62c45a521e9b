"""The test web's HTTP/1.1 server and its two run modes: an asyncio Protocol per connection (keep-alive,
pipelined requests answered in order, Content-Length bodies, precomputed replies), all hosts on one event loop,
run in a daemon thread or in a spawned child process driven over a Pipe.

Binds only 127.0.0.1. Never blocks its loop on anything but a request's own work.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from harvester.testing.render import ServedSite
from harvester.testing.resources import Reply, Stream, make_resource
from harvester.testing.sites import HostChange, HostSpec, SiteModel

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
MAX_HEAD_BYTES = 64 * 1024
"""A request head larger than this is answered 431 and the connection closed."""

RawRecord = tuple[str, str, str, int, int, float, float, int, str | None, str | None, str | None]

try:  # uvloop roughly halves the server's CPU per request; plain asyncio works the same, only slower.
    import uvloop

    def _new_loop() -> asyncio.AbstractEventLoop:
        return uvloop.new_event_loop()

except ImportError:  # pragma: no cover - uvloop is a dependency

    def _new_loop() -> asyncio.AbstractEventLoop:
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

    def __init__(self, host: _ServedHost, server: _Server) -> None:
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


class _Server:
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
            srv = await loop.create_server(functools.partial(_Conn, host, self), LOOPBACK, 0, backlog=2048)
            self.servers.append(srv)
            port = srv.sockets[0].getsockname()[1]
            self.ports[spec.name] = port
            host.site = ServedSite(spec, self.seed, f"http://{LOOPBACK}:{port}")

    def sites(self) -> dict[str, ServedSite]:
        return {name: h.site for name, h in self.hosts.items() if h.site is not None}

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0) -> dict[str, HostChange]:
        out = {}
        for name, site in self.sites().items():
            site.advance(changed=changed, new=new, gone=gone, moved=moved)
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


# ====================================================================== run modes


class Runner(Protocol):
    """What TestWeb needs from a run mode."""

    ports: dict[str, int]

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def records(self) -> list[RawRecord]: ...
    def clear(self) -> None: ...
    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0) -> dict[str, HostChange]: ...
    def models(self) -> dict[str, SiteModel]: ...
    def cpu_s(self) -> float | None: ...


class ThreadRunner:
    def __init__(self, specs: Sequence[HostSpec], seed: int) -> None:
        self.server = _Server(specs, seed)
        self.loop = _new_loop()
        self.thread = threading.Thread(target=self._run, name="testweb", daemon=True)
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self._stopped = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as exc:
                self._error = exc
                raise
            finally:
                self._ready.set()
            await self._stopped.wait()
            await self.server.close()

        try:
            self.loop.run_until_complete(main())
        except BaseException:
            logger.exception("test web thread stopped with an error")
        finally:
            self.loop.close()

    def start(self) -> None:
        self.thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError("test web failed to start") from self._error
        self.ports = dict(self.server.ports)

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(30)

    def stop(self) -> None:
        if self.thread.is_alive() and self._stopped is not None:
            self.loop.call_soon_threadsafe(self._stopped.set)
            self.thread.join(10)

    def records(self) -> list[RawRecord]:
        return list(self.server.records)

    def clear(self) -> None:
        self._call(self.server.records.clear)

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0) -> dict[str, HostChange]:
        result: dict[str, HostChange] = self._call(lambda: self.server.advance(changed, new, gone, moved))
        return result

    def models(self) -> dict[str, SiteModel]:
        return {name: site.model for name, site in self.server.sites().items()}

    def cpu_s(self) -> float | None:
        return None  # shares the test process; use process mode to measure the server alone


def _child_main(conn: Connection, specs: list[HostSpec], seed: int) -> None:
    """Entry point of the process-mode child: serve on the loop, answer control messages from a thread.

    The control thread blocks on the pipe (holding no GIL) and runs each operation on the loop, so a large
    record transfer never stalls serving and the pipe stays blocking (an event-loop reader would make it not).
    """
    loop = _new_loop()
    asyncio.set_event_loop(loop)
    server = _Server(specs, seed)
    stopped = asyncio.Event()

    def on_loop(fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    def take_records() -> list[RawRecord]:
        return list(server.records)

    def control() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                loop.call_soon_threadsafe(stopped.set)
                return
            op = msg[0]
            try:
                if op == "records":
                    conn.send(("ok", on_loop(take_records)))
                elif op == "clear":
                    conn.send(("ok", on_loop(server.records.clear)))
                elif op == "advance":
                    conn.send(("ok", on_loop(functools.partial(server.advance, *msg[1:]))))
                elif op == "cpu":
                    conn.send(("ok", time.process_time()))
                elif op == "stop":
                    loop.call_soon_threadsafe(stopped.set)
                    conn.send(("ok", None))
                    return
                else:
                    conn.send(("error", f"unknown op {op!r}"))
            except Exception as exc:
                conn.send(("error", repr(exc)))

    async def main() -> None:
        await server.start()
        conn.send(("ready", server.ports))
        threading.Thread(target=control, name="testweb-control", daemon=True).start()
        await stopped.wait()
        await server.close()

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        conn.close()


class ProcessRunner:
    def __init__(self, specs: Sequence[HostSpec], seed: int) -> None:
        self.specs = list(specs)
        self.seed = seed
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_child_main, args=(child, self.specs, seed), name="testweb", daemon=True)
        self._child_conn = child
        self._lock = threading.Lock()
        # The parent keeps its own copy of every model (same seed, same days) as the ground truth.
        self._models = {s.name: SiteModel(s, seed) for s in self.specs}

    def start(self) -> None:
        self.proc.start()
        self._child_conn.close()
        if not self.conn.poll(60):
            self.proc.kill()
            raise RuntimeError("test web child process did not start within 60 s")
        tag, ports = self.conn.recv()
        assert tag == "ready"
        self.ports = ports

    def _ask(self, *msg: Any) -> Any:
        with self._lock:
            self.conn.send(msg)
            tag, value = self.conn.recv()
        if tag != "ok":
            raise RuntimeError(f"test web child: {value}")
        return value

    def stop(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError, EOFError, RuntimeError):
                self._ask("stop")
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
        self.conn.close()

    def records(self) -> list[RawRecord]:
        result: list[RawRecord] = self._ask("records")
        return result

    def clear(self) -> None:
        self._ask("clear")

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0) -> dict[str, HostChange]:
        remote: dict[str, HostChange] = self._ask("advance", changed, new, gone, moved)
        for name, model in self._models.items():
            local = model.advance(changed=changed, new=new, gone=gone, moved=moved)
            if local != remote[name]:
                raise RuntimeError(f"test web: host {name!r} diverged between parent and child")
        return remote

    def models(self) -> dict[str, SiteModel]:
        return self._models

    def cpu_s(self) -> float | None:
        result: float = self._ask("cpu")
        return result
