"""The local multi-host test web: one HTTP/1.1 server per host on 127.0.0.1 (one port each), in a daemon
thread (``mode="thread"``) or a child process (``mode="process"``) behind the same API.

``TestWeb`` is the object tests, benchmarks and ``harvester demo`` hold; the server lives in server.py, the
ground truth in truth.py. Binds only 127.0.0.1; never reaches past it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

from harvester.testing.record import RequestRecord
from harvester.testing.runners import ProcessRunner, Runner, ThreadRunner
from harvester.testing.server import LOOPBACK
from harvester.testing.sites import HostSpec, RobotsSpec
from harvester.testing.truth import DayChange, HostTruth, Truth

__all__ = ["DayChange", "HostSpec", "HostTruth", "RequestRecord", "RobotsSpec", "TestWeb", "Truth"]



class TestWeb:
    """A running set of hosts. Use as a context manager, or ``start()`` / ``stop()``.

    ``records()`` is a snapshot of every request so far; ``advance_day()`` moves every host to the next day.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self, hosts: Sequence[HostSpec], *, seed: int = 1, mode: Literal["thread", "process"] = "thread"
    ) -> None:
        names = [h.name for h in hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        if mode not in ("thread", "process"):
            raise ValueError(f"mode must be 'thread' or 'process', not {mode!r}")
        self.specs: list[HostSpec] = list(hosts)
        self.seed = seed
        self.mode = mode
        self.day = 0
        self._runner: Runner | None = None
        self._by_port: dict[int, str] = {}
        self._origins: dict[str, str] = {}
        self._truth: Truth | None = None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> TestWeb:
        if self._runner is not None:
            return self
        runner: Runner = (
            ThreadRunner(self.specs, self.seed) if self.mode == "thread" else ProcessRunner(self.specs, self.seed)
        )
        runner.start()
        self._runner = runner
        self._origins = {name: f"http://{LOOPBACK}:{port}" for name, port in runner.ports.items()}
        self._by_port = {port: name for name, port in runner.ports.items()}
        models = runner.models()
        self._truth = Truth({s.name: HostTruth(s.name, s, models[s.name], self._origins[s.name]) for s in self.specs})
        return self

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.stop()
            self._runner = None

    def __enter__(self) -> TestWeb:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> TestWeb:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _r(self) -> Runner:
        if self._runner is None:
            raise RuntimeError("TestWeb is not started")
        return self._runner

    # ---------------------------------------------------------------- addresses

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def spec(self, name: str) -> HostSpec:
        for s in self.specs:
            if s.name == name:
                return s
        raise KeyError(name)

    def origin(self, name: str) -> str:
        """``http://127.0.0.1:PORT`` of host ``name``."""
        self._r()
        return self._origins[name]

    def url(self, name: str, path: str = "/") -> str:
        return self.origin(name) + (path if path.startswith("/") else "/" + path)

    def host_name(self, origin_or_url: str) -> str:
        """The host name behind an origin or URL (any spelling of 127.0.0.1:PORT); KeyError if not ours."""
        port = urlsplit(origin_or_url.strip()).port
        if port is None or port not in self._by_port:
            raise KeyError(origin_or_url)
        return self._by_port[port]

    @property
    def seeds(self) -> list[str]:
        """The homepage URL of every host."""
        return [self.url(name) for name in self.names]

    @property
    def truth(self) -> Truth:
        self._r()
        assert self._truth is not None
        return self._truth

    # ---------------------------------------------------------------- the record and the day

    def records(self) -> list[RequestRecord]:
        """Every request answered (or abandoned) so far, in completion order."""
        o = self._origins
        return [RequestRecord(*raw, origin=o[raw[0]]) for raw in self._r().records()]

    def clear_records(self) -> None:
        self._r().clear()

    def server_cpu_s(self) -> float | None:
        """CPU seconds the server process has used (process mode); None in thread mode."""
        return self._r().cpu_s()

    def advance_day(
        self, *, changed: float = 0.05, new: float = 0.02, gone: float = 0.01, moved: float = 0.0,
        restyled: float = 0.0, returned: float = 0.0,
    ) -> DayChange:
        """Next day on every host: ``changed``, ``gone`` and ``moved`` are fractions of the live pages, ``new``
        adds that fraction. Deterministic from the seed; sitemaps and feeds change only where their content did.
        A moved page answers 301 at its old address and is published under its new one; a ``restyled`` page serves
        new bytes around the same main text (a new ETag, the same version); ``returned`` is a fraction of the pages
        gone on earlier days that answer again, in a new version, published where they were."""
        for name, value in (("changed", changed), ("new", new), ("gone", gone), ("moved", moved),
                            ("restyled", restyled), ("returned", returned)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], not {value}")
        changes = self._r().advance(changed, new, gone, moved, restyled, returned)
        self.day += 1
        o = self._origins
        return DayChange(
            day=self.day,
            changed={n: tuple(o[n] + p for p in c.changed) for n, c in changes.items()},
            new={n: tuple(o[n] + p for p in c.new) for n, c in changes.items()},
            gone={n: tuple(o[n] + p for p in c.gone) for n, c in changes.items()},
            moved={n: tuple((o[n] + a, o[n] + b) for a, b in c.moved) for n, c in changes.items()},
            restyled={n: tuple(o[n] + p for p in c.restyled) for n, c in changes.items()},
            returned={n: tuple(o[n] + p for p in c.returned) for n, c in changes.items()},
        )
