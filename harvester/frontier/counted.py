"""The count tables kept beside what they count, checked against it and recounted (``harvester db check``).

``queue_counts`` (migration 0017) holds the number of ``queue`` entries per host and kind, kept by triggers in the
transaction that changes the queue, so ``harvester status`` never walks the queue. A trigger dropped by hand, a
restore of one table without the other, or an edit with triggers disabled leaves it wrong with nothing to say
so: ``status`` then shows queued URLs that are not there (or hides some). ``queue_count_drift`` compares it with
the queue (one pass of the queue: for ``db check``, never for ``status``); ``recount_queue`` rebuilds it from the
queue, the queue's writers held off meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from harvester.frontier.base import Part

_DRIFT = (
    "SELECT host_id, kind, sum(counted), sum(queued) FROM ("
    " SELECT host_id, kind, n AS counted, 0 AS queued FROM queue_counts"
    " UNION ALL SELECT host_id, kind, 0, 1 FROM queue) m"
    " GROUP BY host_id, kind HAVING sum(counted) <> sum(queued) ORDER BY host_id, kind"
)
"""Every host and kind whose counted total differs from its queue entries: any SQLite, no FULL OUTER JOIN."""


@dataclass(frozen=True, slots=True)
class Drift:
    """One host and kind whose ``queue_counts`` total differs from its ``queue`` entries."""

    host_id: int
    kind: str
    counted: int
    queued: int


class Counted(Part):
    """``queue_counts`` against ``queue``."""

    def queue_count_drift(self) -> list[Drift]:
        """Each host and kind whose counted total differs from its queue entries ([]: they agree). Read in one
        snapshot, so a worker moving the queue meanwhile shows no drift (its trigger moves both)."""
        with self._tx(write=False, snapshot=True) as tx:
            return [Drift(int(host_id), str(kind), int(counted), int(queued))
                    for host_id, kind, counted, queued in tx.conn.exec_driver_sql(_DRIFT)]

    def recount_queue(self) -> int:
        """Rebuild ``queue_counts`` from ``queue``; returns the host and kind rows written. The queue's writers wait
        for it (SQLite: the write lock; PostgreSQL: a lock on ``queue`` that lets readers through), so no entry is
        counted twice or missed. A worker's fold of the count rows (``_PG_FOLD_COUNTS``) holds no lock on ``queue``:
        on PostgreSQL the recount also waits for the fold's advisory lock, or its DELETE missed the fold's new row
        (inserted after its snapshot) and the queue was counted twice (10 for 5). SQLite has one writer: no fold
        runs meanwhile."""
        with self._tx() as tx:
            if not self._d.is_sqlite:
                tx.conn.exec_driver_sql("LOCK TABLE queue IN SHARE ROW EXCLUSIVE MODE")
                from harvester.frontier.dialect_postgres import QUEUE_COUNTS_LOCK  # psycopg: PostgreSQL's alone

                tx.conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (QUEUE_COUNTS_LOCK,))
            tx.conn.exec_driver_sql("DELETE FROM queue_counts")
            return int(tx.conn.exec_driver_sql(
                "INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, count(*) FROM queue"
                " GROUP BY host_id, kind").rowcount)
