"""Per-host pipelining: a host is handed from discovery to extraction as soon as its own discovery is done.

A harvest runs its two phases at once: extraction takes a host only once discovery has handed it over, so a host
whose sitemaps are read in a second is being fetched while a slow host is still being discovered, and the phases
never overlap on one host (politeness spans both: the one phase on a host at a time keeps its limit, and the host's
politeness state, Crawl-delay's next allowed request included, is saved by discovery before the handover and loaded
by extraction after it). Hosts no discovery of the cycle reads (another in-scope host a link leads to) are open to
extraction once discovery has ended.

When both phases run in one event loop (the library's cycle, the CLI without a Prefect server, and a flow's
subflows and tasks awaited in its loop), they share one polite client (``Shared``, held by the ``CycleState``):
one gate per host for both, so the limit and the Crawl-delay bound their requests together, other hosts'
discovery and extraction included (a sitemap or a redirect on another host), and robots.txt is read once for both.

A host's discovery may hand it over *beside* itself once its sitemaps are read (``hand_over(..., beside=True)``),
when it fetches through the cycle's shared client: what is left (the listing crawl, the feeds, often chains of pages
one after another at the host's latency) then goes on while extraction fetches the pages the sitemaps listed, both
through the host's one gate, so the host's slots are not left idle. Only an extraction fetching through that same
client takes such a host (``open_hosts(beside=True)``); and discovery's listing claims pass the host lease of an
extraction worker sharing its client (``Shared.owners``), never another's.

A ``Handover`` is part of the cycle's shared state (``cycle_state.CycleState``), passed to both phases; a phase
given none (run alone, or its cycle runs in another process) is not pipelined: extraction then takes every host, as
a lone extraction run does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvester.fetch.engine import PoliteClient
    from harvester.phases.host_policy import PolicyKeeper
    from harvester.rules.admission import Site

@dataclass
class Shared:
    """The cycle's one polite client and policy keeper, used by both phases when they run in ``loop``."""

    client: PoliteClient
    policies: PolicyKeeper
    loop: asyncio.AbstractEventLoop
    sites: list[Site] = field(default_factory=list)
    """Each phase's view of the site (moved hosts join it as they are found): a redirect hop in the scope of any
    of them is in the cycle's scope."""

    owners: set[str] = field(default_factory=set)
    """Lease owners of the extraction workers fetching through ``client``: discovery's claims pass their host leases
    (the one gate keeps the host's limit over both), never those of a worker with a client of its own."""

    def in_scope(self, url: str) -> bool:
        return any(site.in_scope(url) for site in self.sites)


class Handover:
    """The hosts discovery has finished in one cycle, and whether discovery has ended. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: set[str] = set()
        self._beside: set[str] = set()
        """Hosts handed over while their discovery goes on through the cycle's shared client."""
        self._ended = False
        self.version = 0
        """Grows with every change: a waiter compares it with what it saw."""
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def _changed(self) -> None:
        """Wake every waiter, in its own loop (discovery may run in another thread). Called under the lock."""
        self.version += 1
        for loop, waiter in self._waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits there any more
                loop.call_soon_threadsafe(_wake, waiter)
        self._waiters.clear()

    def hand_over(self, origins: Iterable[str], *, beside: bool = False) -> None:
        """These hosts' discovery is done (their politeness state saved): extraction may take them. ``beside``: it
        goes on through the cycle's shared client; only an extraction fetching through that client may take them."""
        with self._lock:
            (self._beside if beside else self._ready).update(origins)
            self._changed()

    def end(self) -> None:
        """Discovery has ended, however it ended: every host is open to extraction."""
        with self._lock:
            self._ended = True
            self._changed()

    @property
    def ended(self) -> bool:
        return self._ended

    def open_hosts(self, *, beside: bool = False) -> frozenset[str] | None:
        """The hosts extraction may take now; None when discovery has ended (all of them). ``beside``: the caller
        fetches through the cycle's shared client, so the hosts handed over beside their discovery are open too."""
        with self._lock:
            if self._ended:
                return None
            return frozenset(self._ready | self._beside) if beside else frozenset(self._ready)

    async def changed(self, seen: int, timeout_s: float) -> bool:
        """Wait until something changes after version ``seen`` (True) or ``timeout_s`` passes (False). Woken
        at the change, not at the next poll: a host handed over is a host whose requests could start now."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self.version != seen:
                return True
            self._waiters.append((loop, waiter))
        try:
            async with asyncio.timeout(timeout_s):  # unlike wait_for in 3.11, never swallows a cancellation
                await waiter
        except TimeoutError:
            return self.version != seen
        finally:
            with self._lock:
                if (loop, waiter) in self._waiters:
                    self._waiters.remove((loop, waiter))
        return True


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
