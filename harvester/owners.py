"""Lease and run owners: the id a unit of work writes on what it holds (``make_owner``), and the one rule that says
whether such an owner is alive (``Liveness``). Apart from ``runtime`` because it is one question asked by the
frontier (whose leases to take back, which run to resume) and answered two ways (this machine's PIDs here, the
PostgreSQL sessions in ``frontier.liveness``), not a helper of the event loop; its one registry is this process's
owners still at work."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from typing import Any

_LIVE_OWNERS: set[str] = set()
"""Owners of this process still at work: a retried task in the same process may take back the others' leases."""


SESSION_MARK = ":live"
"""The end of an owner id whose process keeps a liveness session on a PostgreSQL frontier
(``frontier.liveness``): only such an owner is judged dead by its session's absence. An older harvester's owner
(a rolling deploy runs both) has none: it is judged as before, by its PID on its own machine, else its leases
lapse by time."""


def make_owner(role: str) -> str:
    """A lease owner id that says where it runs, so a rerun on the same machine can tell a dead holder, and that it
    keeps a liveness session (``SESSION_MARK``).

    Call ``retire_owner`` when the unit of work ends, however it ends."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{role}:{uuid.uuid4().hex[:8]}{SESSION_MARK}"
    _LIVE_OWNERS.add(owner)
    return owner


def retire_owner(owner: str) -> None:
    _LIVE_OWNERS.discard(owner)


def owner_process(owner: str) -> tuple[str, int] | None:
    """The machine and PID an owner id names (``make_owner``), or None for one in another form."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    return (host, int(pid_text)) if pid_text.isdigit() else None


def declares_session(owner: str) -> bool:
    """The process of ``owner`` keeps a liveness session (``SESSION_MARK``): its absence says the process is dead."""
    return owner.endswith(SESSION_MARK) and owner_process(owner) is not None


def of_this_process(owner: str) -> bool:
    return owner_process(owner) == (socket.gethostname(), os.getpid())


class Liveness:
    """The one rule that says whether a lease or run owner is alive, asked wherever that matters: a run to resume
    (``Runs.resume_or_start_run``), a cycle to close (``Runs.finish_run``), dead holders' leases to take back
    (``phases.runs``). This one, the rule of a SQLite frontier (one machine by nature), asks this machine's PIDs;
    a PostgreSQL frontier asks the server which processes have a session (``frontier.liveness``), whatever machine
    they run on. An owner of this process is alive while it is not retired (``retire_owner``).

    Both answers may be False at once: an owner this rule cannot judge (another machine's, here) is neither known
    alive nor known dead; a run of it is resumed, its leases wait to lapse."""

    def is_live(self, owner: str) -> bool:
        """True when ``owner`` is known alive."""
        if of_this_process(owner):
            return owner in _LIVE_OWNERS
        return self.process_is_live(owner) is True

    def is_dead(self, owner: str) -> bool:
        """True when ``owner`` is known dead: its leases may go back at once, its run be resumed."""
        if of_this_process(owner):
            return owner not in _LIVE_OWNERS
        return self.process_is_live(owner) is False

    def dead_of(self, owners: Iterable[str]) -> list[str]:
        """Those of ``owners`` known dead (``is_dead``), asked at once."""
        return [owner for owner in owners if self.is_dead(owner)]

    def still_dead(self, conn: Any, owner: str) -> bool:
        """Asked again inside the transaction that hands back the leases of ``owner``, judged dead a moment before
        (``Queue.release_owner``, on ``conn``): a process found dead by its PID stays dead, so yes here."""
        return True

    @property
    def losses(self) -> int:
        """Moves on each time this process loses what makes it alive to others, and when it is back (always 0
        here: a PID cannot be lost; see ``frontier.liveness.ProcessSession.epoch``). A local lease deadline
        granted at another value is void."""
        return 0

    @property
    def present(self) -> bool:
        """Others see this process alive now (here always: its PID is)."""
        return True

    def is_another_live_process(self, owner: str | None) -> bool:
        """True when ``owner`` runs in another process known alive: its run is that process's own, not one to
        resume (two live processes sharing one run row mixed their counters)."""
        return bool(owner) and not of_this_process(owner or "") and self.process_is_live(owner or "") is True

    def process_is_live(self, owner: str) -> bool | None:
        """Whether the process of ``owner`` (not this one) exists: this machine's PIDs; None when not known."""
        where = owner_process(owner)
        if where is None or where[0] != socket.gethostname():
            return None
        try:
            os.kill(where[1], 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


LOCAL_LIVENESS = Liveness()
"""The PID rule, for a frontier on one machine (SQLite)."""
