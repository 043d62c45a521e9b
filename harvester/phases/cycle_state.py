"""What one cycle's phases share in a process: ``CycleState``, passed to ``discover`` and ``extract``.

It holds the handover (which hosts discovery has finished, ``phases.handover``), the polite client both phases
fetch through when they run in one event loop (``Shared``, set by ``client.shared_politeness``), and the
completions a failed extraction attempt could not write (``Unwritten``), which a retry writes before anything else.
The library passes it in signatures. Only at the Prefect boundary, where a flow's subflows and tasks run in
threads of one process and their parameters are strings, is it found by its ``key`` (``runtime.shared_as``,
``find_cycle``); a key this process does not hold (the cycle runs elsewhere) finds nothing: not pipelined.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harvester.phases.handover import Handover, Shared
from harvester.runtime import find_shared

if TYPE_CHECKING:
    from harvester.records import Completion, DiscoveredUrl
    from harvester.rules.admission import Site

UnwrittenItems = list[tuple["Completion", list["DiscoveredUrl"]]]


class Unwritten:
    """Completions a failed attempt could not write, each batch with the owner whose leases they need (a retry writes
    them first, so those fetches are not repeated: ``completions.write_unwritten``). An owner is kept with no items
    too (its leases could not be handed back): the retry retires it, so its hosts return at once."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, UnwrittenItems]] = []

    def keep(self, owner: str, items: UnwrittenItems) -> None:
        self.batches.append((owner, items))


@dataclass(eq=False)
class CycleState:
    """One cycle's shared state (see the module docstring). ``handover`` None: extraction alone, no discovery beside
    it (a lone extraction flow keeps one too, so its tasks' retries find the unwritten completions)."""

    handover: Handover | None = None
    shared: Shared | None = None
    """The cycle's one polite client and policy keeper, while ``client.shared_politeness`` holds them open."""
    unwritten: Unwritten = field(default_factory=Unwritten)
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Its name at the Prefect boundary (the flows' ``handover`` parameter)."""

    def polite(self, site: Site) -> Shared | None:
        """The shared client when the caller runs in its event loop (``site`` joins its scope), else None: a client
        lives in one loop, so a phase run in another thread's loop fetches through a client of its own."""
        shared = self.shared
        if shared is None or shared.loop is not asyncio.get_running_loop():
            return None
        shared.sites.append(site)
        return shared


def find_cycle(key: str | None) -> CycleState | None:
    """The cycle this process shares under ``key`` (``runtime.shared_as``); None: none, or held elsewhere."""
    found = find_shared(key)
    return found if isinstance(found, CycleState) else None
