"""What this worker holds, known locally: host lease deadlines, renewed ahead of time, and checked before each
request (issue 32).

The frontier's lease is the truth, but asking it before every request would cost a round trip per page. Each
grant and renewal instead records a local deadline: the moment just *before* the statement that set the lease,
plus ``lease_s`` (the database's ``lease_until`` is at least that late), less a margin for the request to leave.
The engine asks ``holds(origin)`` at the last moment before a request (``PoliteClient.fetch``'s ``hold``): a
process frozen past its lease (SIGSTOP, a VM pause, a swap storm, a debugger) and then continued sends nothing
for a host another worker may have taken over since; its keeper's next renewal says whether the host is still
its own. The clock is the boot-time clock where there is one: unlike ``time.monotonic`` it also runs while the
machine is suspended.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from harvester.runtime import db

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore

logger = logging.getLogger(__name__)

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", None)


def lease_clock() -> float:
    """Seconds on a clock that runs through suspends and freezes (Linux: CLOCK_BOOTTIME; else monotonic)."""
    return time.clock_gettime(_BOOTTIME) if _BOOTTIME is not None else time.monotonic()


MARGIN_SHARE = 0.1
MARGIN_MAX_S = 1.0
"""A request is sent only while at least min(lease_s x MARGIN_SHARE, MARGIN_MAX_S) of the lease is left."""


class HostHolds:
    """Local deadlines of one owner's host leases: granted, renewed, lost, and asked before each request."""

    def __init__(self, store: FrontierStore, owner: str, lease_s: float) -> None:
        self._store = store
        self._owner = owner
        self.lease_s = lease_s
        self._margin = min(lease_s * MARGIN_SHARE, MARGIN_MAX_S)
        self._until: dict[str, tuple[float, int]] = {}
        """Host -> its local deadline, and the liveness losses of this process when it was granted
        (``Liveness.losses``): a deadline granted before the server ended this process's session is void, as
        others may have judged the process dead meanwhile and taken the host."""
        self.lost: set[str] = set()
        """Hosts a renewal found another owner's (or nobody's): never requested again in this run's turn."""

    def grant(self, origins: Iterable[str], asked_at: float, losses: int | None = None) -> None:
        """``origins`` were leased (or renewed) by a statement begun at ``asked_at`` (``lease_clock``), when this
        process's ``Liveness.losses`` read ``losses`` (read before the statement; None: read now)."""
        losses = self._store.liveness.losses if losses is None else losses
        until = (asked_at + self.lease_s - self._margin, losses)
        for origin in origins:
            self._until[origin] = until
            self.lost.discard(origin)

    def drop(self, origin: str) -> None:
        """``origin`` is being handed back: no longer held from now on, whatever time its deadline had left. Kept,
        a host whose turn ended read as held until that deadline, so a redirect to it from the host taken next was
        followed as this worker's own (``MovedAnswers``) while its new holder asked the target again."""
        self._until.pop(origin, None)

    def holds(self, origin: str) -> bool:
        """True while this owner's lease on ``origin`` is known live with the margin to spare: cheap, no I/O."""
        until, losses = self._until.get(origin, (0.0, -1))
        liveness = self._store.liveness
        return lease_clock() < until and losses == liveness.losses and liveness.present

    def left_s(self, origin: str) -> float:
        """Seconds left on the local deadline of ``origin`` (none, once this process's liveness was lost)."""
        until, losses = self._until.get(origin, (0.0, -1))
        return until - lease_clock() if losses == self._store.liveness.losses else -self.lease_s

    def voided(self, origin: str) -> bool:
        """The deadline of ``origin`` was granted before this process's liveness session was lost (and maybe
        opened again): void whatever time is left on it."""
        losses = self._until.get(origin, (0.0, -1))[1]
        return losses >= 0 and losses != self._store.liveness.losses

    async def renew(self, origins: Iterable[str]) -> list[str]:
        """Renew the leases on ``origins``; those the frontier no longer gives this owner are lost at once (no
        request for them after this). Returns the lost ones. A host dropped meanwhile (being handed back: its
        lease goes back in a statement of its own) is no longer renewed nor reported lost: not one of its requests
        is left to guard, and the hand-back released it, not another worker."""
        wanted = sorted(origin for origin in origins if origin in self._until)
        if not wanted:
            return []
        losses, asked_at = self._store.liveness.losses, lease_clock()
        voided = [origin for origin in wanted if self.voided(origin)]
        if voided:  # their time left means nothing: others may have judged this process dead and taken them
            logger.warning("renewing %d host leases after this process's liveness session was lost: requests to "
                           "them waited for this renewal", len(voided))
        timed = [self.left_s(origin) for origin in wanted if origin not in voided]
        late = -min(timed) if timed else 0.0
        if late > 0:  # frozen, starved or a database too slow to answer: the workers stopped asking meanwhile
            logger.warning("renewing leases %.1f s after their local deadline", late)
        kept = await db(self._store.renew_hosts, self._owner, wanted, lease_s=self.lease_s)
        self.grant([origin for origin in kept if origin in self._until], asked_at, losses)  # not one dropped meanwhile
        # A host dropped while the statement ran (handed back: its release may have gone first) is not lost either.
        lost = sorted(origin for origin in set(wanted) - set(kept) if origin in self._until)
        for origin in lost:
            self._until.pop(origin, None)
            self.lost.add(origin)
        return lost

    def due_for_renewal(self, origins: Iterable[str]) -> bool:
        """True when some held lease has less than two thirds of its span left: renew well before it lapses."""
        return any(self.left_s(origin) < self.lease_s * 2 / 3 for origin in origins if origin in self._until)


def fair_take(*, room: int, with_work: int, others: int, mine: int) -> int:
    """How many more hosts a worker leases now: its share of the hosts with work (split with the ``others`` it
    sees holding some), by steps of a quarter of them at first, then doubling what it holds. Workers started
    together each take a step and then see one another, so three on a 6-host site take two each (before, the
    first took all six, up to ``max_active_hosts``); one alone on 200 hosts holds its 64 within two looks."""
    share = -(-with_work // (others + 1))
    step = max(mine, -(-with_work // 4), 1)
    return max(0, min(room, share - mine, step))


def over_share(*, active: int, with_work: int, others: int) -> bool:
    """A worker holds more hosts than its share of those with work while others are there to take them: it hands
    one back (``ExtractWork``). Never its last one: the other would only take over the same work."""
    return others > 0 and active > 1 and active > -(-with_work // (others + 1))


