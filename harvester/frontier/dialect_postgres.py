"""PostgreSQL's statements: concurrent writers are real, so claims lock with ``SKIP LOCKED`` and one upsert statement
per chunk reports which rows it inserted."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Sequence, Set
from datetime import datetime
from functools import cache
from typing import Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from harvester.frontier.dialects import _RETURNED, _UPSERT_SET, PROMOTE_BATCH, Dialect, revisit_rank
from harvester.frontier.rows import Merged

EXTRACTION_NAME = "harvester-extract:"
"""The ``application_name`` prefix of an extraction process's sessions (then its site's digest, ``host:pid``)."""

CYCLES_LOCK = 0x68617276
"""The advisory lock key of ``lock_cycles`` ("harv"); ``QUEUE_COUNTS_LOCK`` is the other one this project takes."""


@cache
def _pg_upsert() -> str:
    # One statement per chunk: parallel arrays unnested server-side (no per-row round trips or parsing), sent
    # in binary (%b): text-formatting the arrays cost ~7 us per row client-side, binary ~1.5 us. ``xmax = 0``
    # marks a row this statement inserted (an updated row carries the updating transaction's id): that, not an
    # earlier lookup, says which rows are new, so a concurrent insert of the same URL is never queued twice.
    return (
        "INSERT INTO urls (host_id, path, canonical_version, source_id, kind, state, score, depth, first_seen,"
        " last_seen, lastmod, changefreq, priority, fetch_path, lastmod_until)"
        " SELECT t.host_id, t.path, %s, t.source_id, t.kind, 'queued', t.score, t.depth, %s, %s, t.lastmod,"
        " t.changefreq, t.priority, t.fetch_path, t.lastmod_until FROM unnest(%b::bigint[], %b::text[],"
        " %b::bigint[], %b::text[], %b::float8[], %b::int[], %b::timestamptz[], %b::text[], %b::float8[],"
        " %b::text[], %b::timestamptz[])"
        " AS t(host_id, path, source_id, kind, score, depth, lastmod, changefreq, priority, fetch_path,"
        " lastmod_until)"
        " ON CONFLICT (host_id, path) DO UPDATE SET" + _UPSERT_SET.format(greatest="GREATEST", least="LEAST")
        + " RETURNING id, host_id, path, source_id, kind, score, (xmax = 0) AS inserted"
    )


@cache
def _pg_upsert_and_enqueue() -> str:
    """The upsert, and the queue entries of the rows it inserted, in one round trip."""
    return (
        f"WITH w AS ({_pg_upsert()}),"
        " q AS (INSERT INTO queue (host_id, kind, rank, url_id)"
        " SELECT host_id, kind, -score, id FROM w WHERE inserted ON CONFLICT DO NOTHING)"
        " SELECT id, host_id, path, source_id, inserted FROM w"
    )


_PG_CLAIM = f"""
WITH c AS (
    SELECT q.ctid, q.host_id, q.kind, q.rank, q.url_id
    FROM unnest(%s::bigint[]) AS h(id) CROSS JOIN unnest(%s::text[]) AS k(kind) CROSS JOIN LATERAL (
        SELECT ctid, host_id, kind, rank, url_id FROM queue
        WHERE host_id = h.id AND kind = k.kind AND (due_at IS NULL OR due_at <= %s)
        ORDER BY rank, url_id LIMIT %s FOR UPDATE SKIP LOCKED) q
),
r AS (SELECT *, row_number() OVER (PARTITION BY host_id ORDER BY rank, url_id) AS rn FROM c),
d AS (
    DELETE FROM queue WHERE ctid = ANY(ARRAY(SELECT ctid FROM r WHERE rn <= %s))
    RETURNING url_id, host_id, rank
),
l AS (INSERT INTO leases (url_id, host_id, owner, lease_until) SELECT url_id, host_id, %s, %s FROM d)
SELECT {_RETURNED}, q.q_rank FROM urls JOIN (SELECT url_id AS q_id, rank AS q_rank FROM d) q ON urls.id = q.q_id
WHERE urls.id = ANY(ARRAY(SELECT url_id FROM d))
"""
"""PostgreSQL: per host and kind, an index range of the queue stopping after ``per_host`` due rows, locked with
``FOR UPDATE SKIP LOCKED`` so two claimers never take the same entry; ROW_NUMBER keeps the best ``per_host`` per
host across kinds; those rows move from the queue to the leases (a data-modifying WITH runs whole whether read or
not), and their URLs are read back with their queue rank (the claim's order), in one statement. The ``ANY`` keeps
the read a primary-key lookup per URL whatever the planner guesses of the join."""

_PG_PROMOTE = """
WITH p AS (
    UPDATE urls SET state = 'queued'
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM urls WHERE host_id = ANY(%s) AND state = 'done' AND next_fetch_at <= %s
                           LIMIT %s FOR UPDATE SKIP LOCKED))
      AND state = 'done'
    RETURNING host_id, kind, {rank} AS rank, id, next_fetch_at
)
INSERT INTO queue (host_id, kind, rank, url_id, due_at) SELECT host_id, kind, rank, id, next_fetch_at FROM p
ON CONFLICT DO NOTHING
""".format(rank=revisit_rank("revisit_s IS NOT NULL AND last_fetched_at IS NOT NULL"
                             " AND next_fetch_at < last_fetched_at + revisit_s * interval '0.5 second'"))


_FREE_HOSTS = ("ARRAY(SELECT id FROM hosts WHERE origin = ANY(%s::text[]) AND NOT (lease_owner IS NOT NULL"
               " AND lease_owner <> %s AND lease_until >= %s AND lease_owner <> ALL(%s::text[])))")
"""The ids of the given origins no other owner holds (bar the owners beside the claimer, ``Queue.claim``'s
``beside``): a claim's hosts, read by the claim statement itself."""

_PG_CLAIM_FREE = (
    _PG_CLAIM.replace("unnest(%s::bigint[]) AS h(id)", f"unnest({_FREE_HOSTS}) AS h(id)", 1)
    .replace(f"SELECT {_RETURNED}, q.q_rank FROM urls",
             f"SELECT {_RETURNED}, q.q_rank, (SELECT s.kind FROM sources s WHERE s.id = urls.source_id) FROM urls", 1)
)
"""``_PG_CLAIM`` over the origins no other owner holds, each row with its source's kind."""

_PG_PROMOTE_FREE = _PG_PROMOTE.replace("host_id = ANY(%s)", f"host_id = ANY({_FREE_HOSTS})", 1)


def extraction_scope(site: str) -> str:
    """The ``application_name`` prefix of ``site``'s extraction sessions: the site as a short digest (the name
    holds 63 bytes), so another site's processes, which never take this site's hosts, are not counted."""
    return f"{EXTRACTION_NAME}{hashlib.sha256(site.encode()).hexdigest()[:8]}:"

_PG_FOLD_COUNTS = """
WITH d AS (DELETE FROM queue_counts WHERE pg_try_advisory_xact_lock(%s) RETURNING host_id, kind, n)
INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, sum(n) FROM d GROUP BY host_id, kind
HAVING sum(n) <> 0
"""
"""The rows each statement's trigger appended, summed into one per host and kind. Only the rows committed before
it are seen (and deleted): a concurrent transaction's rows stay for the next fold, so the sums stay true. One fold
at a time (the advisory lock; another skips): two would wait on each other's deleted rows for nothing."""
QUEUE_COUNTS_LOCK = 0x68765F7163  # "hv_qc"


class PostgresDialect(Dialect):
    """PostgreSQL: concurrent writers are real, so claims lock with SKIP LOCKED and upserts report their rows."""

    lock_rows = " FOR UPDATE OF l"

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None, bool]] | None:
        returned = conn.exec_driver_sql(
            _pg_upsert_and_enqueue(),
            (
                version, now, now, list(hids), [m.path for m in chunk], list(first_source),
                [m.kind for m in chunk], [m.score for m in chunk], [m.depth for m in chunk],
                [m.lastmod for m in chunk], [m.changefreq for m in chunk], [m.priority for m in chunk],
                [m.fetch_path for m in chunk], [m.lastmod_until for m in chunk],
            ),
        )
        return {(h, path): (url_id, sid, bool(inserted)) for url_id, h, path, sid, inserted in returned}

    def lock_cycles(self, conn: Connection) -> None:
        # Three extraction processes started within 11 ms each saw no open cycle (READ COMMITTED) and two opened
        # one: the cycle's counts were split between them. A transaction-scoped advisory lock makes the second
        # wait for the first's commit, then see its cycle.
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (CYCLES_LOCK,))

    def fold_queue_counts(self, conn: Connection) -> None:
        conn.exec_driver_sql(_PG_FOLD_COUNTS, (QUEUE_COUNTS_LOCK,))

    def extraction_processes(
        self, conn: Connection, site: str = "", stalled: Set[tuple[str, int]] = frozenset()
    ) -> int:
        scope = extraction_scope(site)
        me = f"{scope}{socket.gethostname()}:{os.getpid()}"[:63]
        # Each extraction process names its sessions (``application_name``, visible to every role, gone with the
        # connection: a killed process stops counting at once); the others are counted by name, this one always.
        # A stalled one's session stays while it is frozen: it is left out by name (``Queue.sharing``).
        conn.exec_driver_sql("SELECT set_config('application_name', %s, false)", (me,))
        skip = [f"{scope}{machine}:{pid}"[:63] for machine, pid in stalled]
        return 1 + int(conn.exec_driver_sql(
            "SELECT count(DISTINCT application_name) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE %s AND application_name <> %s AND application_name <> ALL(%s::text[])",
            (scope + "%", me, skip),
        ).scalar_one())

    def claim_urls(
        self, conn: Connection, origins: Sequence[str], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime, beside: Sequence[str] = (),
    ) -> tuple[dict[int, str], list[Any], dict[int, str] | None]:
        """The claim's statements pipelined (psycopg's pipeline mode): one round trip instead of five, plus the
        commit (asynchronous, below). Each is still its own statement, in order, so the promoted revisits are there
        to claim. Under load a round trip costs 5-10 ms of scheduling, and a host's turn starts with a claim: this
        was the largest wait of an extraction process (issue 32). The claim picks its hosts itself (``_FREE_HOSTS``),
        so the id -> origin map reads every origin asked: a host freed between the statements stays mapped."""
        pg = conn.connection.driver_connection
        assert isinstance(pg, psycopg.Connection)
        asked = list(origins)
        free = (asked, owner, now, sorted(beside))
        try:
            with pg.pipeline(), pg.cursor() as setup, pg.cursor() as hosts, pg.cursor() as claim:
                # Each host's queue range is meant to be walked in key order and stopped after LIMIT rows. Right
                # after a bulk load, before autovacuum's ANALYZE, the planner expects a handful of rows per host
                # and picks a bitmap scan that reads and sorts the host's whole queue instead (100+ ms for a claim
                # of 1,000). Off, local to this transaction.
                setup.execute("SELECT set_config('enable_bitmapscan', 'off', true)")
                # The commit does not wait for the server's WAL flush (5 ms p50, 20 ms p99 on a shared server,
                # on every host's turn): a claim lost to a crash of the *server* (never a partial one) only puts
                # its URLs back in the queue, while the host lease, granted and renewed with synchronous commits,
                # keeps them this owner's (a listing claim of discovery holds no host lease: another process may
                # read that listing page again); at worst a page is fetched again, as after a kill.
                setup.execute("SELECT set_config('synchronous_commit', 'off', true)")
                setup.execute(_PG_PROMOTE_FREE, (*free, now, PROMOTE_BATCH))
                claim.execute(_PG_CLAIM_FREE, (*free, list(kinds), now, per_host, per_host, owner, lease_until))
                # After the claim: every host of a claimed row is there to map, however new.
                hosts.execute("SELECT id, origin FROM hosts WHERE origin = ANY(%s::text[])", (asked,))
                claimed = claim.fetchall()
                origin_of = {int(host_id): str(origin) for host_id, origin in hosts.fetchall()}
        except psycopg.Error as exc:  # as SQLAlchemy would have raised it: the store names and classifies it
            raise DBAPIError.instance(_PG_CLAIM_FREE, None, exc, psycopg.Error) from exc
        # Each row: the claim's columns, its queue rank, its source's kind.
        kinds_of = {int(row[-3]): str(row[-1]) for row in claimed if row[-3] is not None and row[-1] is not None}
        # Host, then the queue's own order (rank, then id), as SQLite hands them out: the rank, not the score, puts
        # URLs never fetched before revisits that merely came due. Sorted by score, a new page scored below the
        # site's harvested ones came after the day's revisits here and before them on SQLite.
        claimed.sort(key=lambda row: (origin_of[row[2]], row[-2], row[0]))
        return origin_of, [row[:-2] for row in claimed], kinds_of
