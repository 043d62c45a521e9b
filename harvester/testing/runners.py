"""The test web's two run modes behind one ``Runner`` protocol: all hosts on one event loop in a daemon thread, or in a
spawned child process driven over a Pipe (so a benchmark measures the server's CPU apart from the client's)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from harvester.testing.server import RawRecord, Server, new_loop
from harvester.testing.sites import HostChange, HostSpec, SiteModel

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)


# ====================================================================== run modes


class Runner(Protocol):
    """What TestWeb needs from a run mode."""

    ports: dict[str, int]

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def records(self) -> list[RawRecord]: ...
    def clear(self) -> None: ...
    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> dict[str, HostChange]: ...
    def models(self) -> dict[str, SiteModel]: ...
    def cpu_s(self) -> float | None: ...


class ThreadRunner:
    def __init__(self, specs: Sequence[HostSpec], seed: int) -> None:
        self.server = Server(specs, seed)
        self.loop = new_loop()
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

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> dict[str, HostChange]:
        result: dict[str, HostChange] = self._call(lambda: self.server.advance(changed, new, gone, moved, restyled,
                                                                                        returned))
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
    loop = new_loop()
    asyncio.set_event_loop(loop)
    server = Server(specs, seed)
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

    def advance(self, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> dict[str, HostChange]:
        remote: dict[str, HostChange] = self._ask("advance", changed, new, gone, moved, restyled,
                                                           returned)
        for name, model in self._models.items():
            local = model.advance(changed=changed, new=new, gone=gone, moved=moved, restyled=restyled,
                                  returned=returned)
            if local != remote[name]:
                raise RuntimeError(f"test web: host {name!r} diverged between parent and child")
        return remote

    def models(self) -> dict[str, SiteModel]:
        return self._models

    def cpu_s(self) -> float | None:
        result: float = self._ask("cpu")
        return result
