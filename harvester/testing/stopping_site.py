"""A threaded site for tests of the process's stop (``runtime.request_stop``) met with answers on the wire: its
request log is its own, and it holds one request on the wire while the test orders the workers around it.

Apart from ``threaded_site`` (plain answers by function) because it is stateful and asks for the stop itself: the
stop is requested from the held request's own handler, so it meets the worker with that request in flight.
"""

from __future__ import annotations

import threading

from harvester.runtime import request_stop
from harvester.testing.threaded_site import Answer, Asked

WAIT_S = 60.0
"""Bound on each wait for an event; met at once when the product works."""

ALLOW_ALL: Answer = 200, {"Content-Type": "text/plain"}, b"User-agent: *\nAllow: /\n"


class StoppingSite:
    """A loopback site whose request log is its own: every request (``asked``: the path and whether it carried
    validators), and every answer written (``answered``: its body follows at once, answered as the harvester sees
    it). The first request ``holds`` picks is held on the wire until ``until``; with ``stop_first`` the process's
    stop is requested as it comes in (the worker is stopping while it is on the wire); ``held`` is set then.

    ``holds``, ``arrived`` and ``page`` are what a test's site says of its own paths."""

    def __init__(self, until: threading.Event, held: threading.Event, *, stop_first: bool = False) -> None:
        self.origin = ""
        self.until = until
        self.held = held
        self.stop_first = stop_first
        self.lock = threading.Lock()
        self.asked: list[tuple[str, bool]] = []
        self.answered: list[str] = []

    def holds(self, path: str) -> bool:
        """Whether ``path``, just asked (not yet in ``asked``; under ``lock``), is the request held on the wire."""
        raise NotImplementedError

    def arrived(self, path: str) -> None:
        """Called as each request comes in, before any hold (a site may wait here for another site's progress)."""

    def page(self, path: str) -> Answer:
        """The answer to ``path`` (robots.txt allows everything)."""
        raise NotImplementedError

    def answer(self, request: Asked) -> Answer:
        path = request.path
        conditional = "if-none-match" in request.headers or "if-modified-since" in request.headers
        with self.lock:
            first = self.holds(path)
            self.asked.append((path, conditional))
        self.arrived(path)
        if first:
            if self.stop_first:
                request_stop("test: the worker is stopping")
            self.held.set()
            self.until.wait(WAIT_S)
        answer = ALLOW_ALL if path == "/robots.txt" else self.page(path)
        with self.lock:
            self.answered.append(path)
        return answer
