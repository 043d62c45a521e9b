"""Phase runs: started, resumed after a crash (same profile), finished with their counters."""


from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from harvester.errors import InvalidRecord
from harvester.frontier.base import Database, Part
from harvester.frontier.cycles import Cycles
from harvester.frontier.models import (
    Cycle,
    Run,
)
from harvester.runtime import aware, utcnow
from harvester.store_results import RunRow

logger = logging.getLogger(__name__)


class Runs(Part):
    """One row per phase run, each in the crawl cycle open for its profile (``cycles``)."""

    def __init__(self, db: Database, cycles: Cycles) -> None:
        super().__init__(db)
        self._cycles = cycles

    def start_run(self, phase: str, *, profile: dict[str, Any] | None = None, owner: str | None = None,
                  user_agent: str | None = None) -> int:
        """A new run of ``phase``, in the cycle open for ``profile`` (``Cycles.open_cycle``) if any. An
        extraction with no cycle open (``harvester extract`` on its own) opens one of its own (kind ``extract``,
        closed by ``finish_run``): the first versions it stores are new in a cycle, once, like any other's.
        ``user_agent``: the one its requests carry, for the WARC export (None: not known)."""
        now = utcnow()
        with self._tx() as tx:
            self._d.lock_cycles(tx.conn)
            cycle_id = self._cycles.open_cycle(tx.conn, profile)
            if cycle_id is None and phase == "extract":
                cycle_id = int(tx.conn.execute(
                    insert(Cycle).values(kind="extract", started_at=now, status="running", profile=profile)
                    .returning(Cycle.id)
                ).scalar_one())
            row = tx.conn.execute(
                insert(Run).values(phase=phase, started_at=now, status="running", profile=profile,
                                   owner=owner, cycle_id=cycle_id, user_agent=user_agent).returning(Run.id)
            ).one()
        return int(row[0])

    def resume_or_start_run(
        self, phase: str, *, profile: dict[str, Any] | None = None, owner: str | None = None,
        user_agent: str | None = None,
    ) -> int:
        """The newest unfinished run of ``phase`` with the same profile and User-Agent in the same cycle (a crashed
        one, resumed), or a new run. A run left unfinished by an abandoned cycle is not resumed into another one: its
        fetches are that cycle's. Nor is one that sent another User-Agent (the setting changed before the rerun), or
        one whose User-Agent is not known (started before migration 0013): a run's requests all carry its own, as the
        WARC export says. Nor is one another live process is running (``Liveness.is_another_live_process``: of
        this machine on SQLite, of any machine on PostgreSQL): three extractions started side by side shared one
        run row, its counters and its closing table. A resumed run becomes ``owner``'s, taken only if its owner is
        still the one read (of two processes resuming the same dead one's run, one gets it). A run of this cycle
        with another User-Agent whose process is known dead (``Liveness.is_dead``), or with no owner recorded, is
        closed ``abandoned`` here, saying why (``counters["reason"]``), rather than left ``running`` for ever beside
        the run that replaced it; what it stored stays the cycle's (its fetches keep its id)."""
        with self._tx(write=False) as tx:
            cycle = self._cycles.open_cycle(tx.conn, profile)
            rows = tx.conn.execute(
                select(Run.id, Run.profile, Run.cycle_id, Run.user_agent, Run.owner)
                .where(Run.phase == phase, Run.status == "running").order_by(Run.id.desc()).limit(20)
            ).all()
        ours = [(int(run_id), sent, holder) for run_id, stored, cycle_id, sent, holder in rows
                if stored == profile and cycle_id == cycle]
        run_id = next((run_id for run_id, sent, holder in ours
                       if sent == user_agent and not self.db.liveness.is_another_live_process(holder)
                       and (owner is None or self._take_over(run_id, holder, owner))), None)
        if run_id is None:
            run_id = self.start_run(phase, profile=profile, owner=owner, user_agent=user_agent)
        # Only a run whose process is gone: workers of one harvest with their own User-Agents run side by side.
        self._abandon([(old, sent) for old, sent, holder in ours
                       if sent != user_agent and (holder is None or self.db.liveness.is_dead(holder))],
                      by=run_id, user_agent=user_agent)
        return run_id

    def _abandon(self, runs: list[tuple[int, str | None]], *, by: int, user_agent: str | None) -> None:
        """Close the unfinished ``runs`` (id, the User-Agent it sent) that run ``by`` did not resume (see
        ``resume_or_start_run``) as ``abandoned``, with the reason ``harvester status`` shows."""
        for run_id, sent in runs:
            said = ("its User-Agent is not recorded (started before migration 0013)" if sent is None
                    else f"it sent the User-Agent {sent!r}")
            reason = (f"abandoned: {said}; run {by}, sending {user_agent!r}, was started in its place "
                      "(what it stored is kept)")
            with self._tx() as tx:
                tx.conn.execute(
                    update(Run).where(Run.id == run_id, Run.status == "running")
                    .values(finished_at=utcnow(), status="abandoned", counters={"reason": reason, "replaced_by": by})
                )
            logger.info("run %d %s", run_id, reason)

    def _take_over(self, run_id: int, holder: str | None, owner: str) -> bool:
        """Make ``owner`` the run's owner if it is still ``holder``'s and still running (False: another took it)."""
        held = Run.owner.is_(None) if holder is None else Run.owner == holder
        with self._tx() as tx:
            return bool(tx.conn.execute(
                update(Run).where(Run.id == run_id, Run.status == "running", held).values(owner=owner, counters=None)
            ).rowcount)

    def run_started_at(self, run_id: int) -> datetime | None:
        with self._tx(write=False) as tx:
            value = tx.conn.execute(select(Run.started_at).where(Run.id == run_id)).scalar_one_or_none()
        return aware(value) if isinstance(value, datetime) else None

    def finish_run(self, run_id: int, *, status: str, counters: dict[str, Any]) -> None:
        """Close the run, and the cycle of its own a standalone extraction opened (``start_run``) once no other live
        run is in it."""
        with self._tx() as tx:
            self._d.lock_cycles(tx.conn)  # of two runs ending at once, the second sees the first ended (below)
            changed = tx.conn.execute(
                update(Run).where(Run.id == run_id).values(finished_at=utcnow(), status=status, counters=counters)
            ).rowcount
            own = tx.conn.execute(
                select(Cycle.id).join(Run, Run.cycle_id == Cycle.id)
                .where(Run.id == run_id, Run.phase == "extract", Cycle.kind == "extract", Cycle.status == "running")
            ).scalar_one_or_none()
            # Extractions started side by side share that cycle (``lock_cycles``): the last of them closes it, not
            # the first to end while the others still fetch.
            beside = [] if own is None else [(int(other), holder) for other, holder in tx.conn.execute(
                select(Run.id, Run.owner).where(Run.cycle_id == own, Run.status == "running", Run.id != run_id)
            ).all()]
        if not changed:
            raise InvalidRecord(f"run {run_id} does not exist")
        if own is not None and all(holder is None or self.db.liveness.is_dead(holder) for _, holder in beside):
            self._close_left(beside, by=run_id)
            self._cycles.finish_cycle(int(own), status="completed" if status == "completed" else "failed")

    def _close_left(self, left: list[tuple[int, str | None]], *, by: int) -> None:
        """The cycle's other runs still ``running`` once ``by`` closes it (their processes are gone: a SIGTERM, a
        kill -9) are closed ``abandoned``, saying why: no rerun resumes a run of a closed cycle, so a stopped one
        stayed ``running`` for good and ``status`` kept saying "the next run resumes it" after the other workers
        had finished the cycle (stranger 45). What it stored is the cycle's either way. Only while each is still
        the owner's judged dead (``left``: id, owner): a rerun that took one over meanwhile keeps it (review)."""
        with self._tx() as tx:
            for run_id, holder in left:
                held = Run.owner.is_(None) if holder is None else Run.owner == holder
                counters = tx.conn.execute(
                    select(Run.counters).where(Run.id == run_id, Run.status == "running", held)
                ).scalar_one_or_none()
                kept = dict(counters) if isinstance(counters, dict) else {}
                said = f"it was stopped ({kept['stopped']})" if kept.get("stopped") else "its process ended unfinished"
                kept.update(reason=f"abandoned: {said}; run {by} finished its cycle (what it stored is kept)",
                            replaced_by=by)
                tx.conn.execute(update(Run).where(Run.id == run_id, Run.status == "running", held)
                                .values(finished_at=utcnow(), status="abandoned", counters=kept))

    def last_profile(self, phase: str | None = None) -> dict[str, Any] | None:
        """The profile of the most recent run (of ``phase``) that recorded one."""
        query = select(Run.profile).where(Run.profile.is_not(None)).order_by(Run.id.desc()).limit(1)
        if phase is not None:
            query = query.where(Run.phase == phase)
        with self._tx(write=False) as tx:
            row = tx.conn.execute(query).first()
        return None if row is None or row[0] is None else dict(row[0])

    def last_run(self, phase: str, *, stopped: bool = False) -> RunRow | None:
        """The newest finished run of ``phase`` with its counters (per-host diagnostics for ``harvester status``);
        ``stopped``: or a newer one a stop left unfinished for its rerun to resume (``stop_run``), whose table is
        the one a user who stopped it wants, not the day before's."""
        with self._tx(write=False) as tx:
            run = tx.conn.execute(
                select(Run.__table__).where(Run.phase == phase, Run.finished_at.is_not(None))
                .order_by(Run.id.desc()).limit(1)
            ).mappings().first()
            newer = [] if not stopped else tx.conn.execute(
                select(Run.__table__).where(Run.phase == phase, Run.status == "running",
                                            Run.id > (run["id"] if run is not None else 0))
                .order_by(Run.id.desc()).limit(_STOPPED_LOOKED_AT)
            ).mappings().all()
        for row in newer:
            if isinstance(row["counters"], dict) and row["counters"].get("stopped"):
                return _run_row(row)
        return None if run is None else _run_row(run)

    def cycle_runs(self, cycle_id: int, phase: str) -> list[RunRow]:
        """Every run of ``phase`` in the cycle, oldest first: several extraction processes share one cycle, each
        with its own run row and its own hosts' table (``harvester status`` adds them up)."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Run.__table__).where(Run.cycle_id == cycle_id, Run.phase == phase).order_by(Run.id)
            ).mappings().all()
        return [_run_row(row) for row in rows]

    def stop_run(self, run_id: int, *, counters: dict[str, Any]) -> None:
        """Keep what a stopped run did (``counters``: why it stopped, its requests per host) on its row, left
        ``running`` and unfinished: the rerun resumes it (``resume_or_start_run`` clears them, and its end replaces
        them with its own)."""
        with self._tx() as tx:
            tx.conn.execute(update(Run).where(Run.id == run_id, Run.status == "running").values(counters=counters))

    def completed_run(self, cycle_id: int, phase: str) -> RunRow | None:
        """The newest completed run of ``phase`` in the cycle (a resumed cycle's discovery that finished before the
        kill), or None."""
        with self._tx(write=False) as tx:
            run = tx.conn.execute(
                select(Run.__table__).where(Run.cycle_id == cycle_id, Run.phase == phase, Run.status == "completed")
                .order_by(Run.id.desc()).limit(1)
            ).mappings().first()
        return None if run is None else _run_row(run)

    def get_run(self, run_id: int) -> RunRow | None:
        with self._tx(write=False) as tx:
            run = tx.conn.execute(select(Run.__table__).where(Run.id == run_id)).mappings().first()
        return None if run is None else _run_row(run)


_STOPPED_LOOKED_AT = 20
"""Unfinished runs newer than the last finished one that ``last_run`` looks through for a stopped one (extractions
side by side run a few at once)."""


def _run_row(run: Any) -> RunRow:
    """A ``runs`` row as its typed record (times aware; SQLite hands them back naive)."""
    return RunRow(
        id=int(run["id"]), phase=run["phase"], started_at=aware(run["started_at"]),
        finished_at=aware(run["finished_at"]), status=run["status"], profile=run["profile"],
        counters=run["counters"], owner=run["owner"], cycle_id=run["cycle_id"],
    )
