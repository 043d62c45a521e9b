"""SQLite's statements: writers are serialized (``BEGIN IMMEDIATE``), so a unit of work that reads then writes is
never overtaken; bulk rows go straight to the driver in multi-row statements, no ``None`` ever bound."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection

from harvester.frontier.dialects import _RETURNED, _UPSERT_SET, _URL_INSERT_COLUMNS, Dialect, revisit_rank
from harvester.frontier.models import to_epoch_us
from harvester.frontier.rows import Merged

SQLITE_ROWS_PER_STATEMENT = 100
"""URL rows per multi-row INSERT on SQLite (1,300 parameters at most). One statement per 100 rows instead of one
step per row saves SQLite's per-statement halt and reset (~17% of an insert under callgrind)."""


@cache
def _sqlite_url_values(mask: int) -> str:
    """One row's VALUES tuple; bit 0/1/2/3/4 of ``mask`` set: lastmod/changefreq/priority/fetch_path/lastmod_until is
    NULL, written as a literal rather than bound (see the NoneType adapter above: a bound None is the slow path)."""
    optional = ["NULL" if mask & (1 << bit) else "?" for bit in range(5)]
    return f"(?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, {', '.join(optional)})"


@cache
def _sqlite_url_insert(mask: int, rows: int, *, upsert: bool) -> str:
    conflict = (
        " ON CONFLICT (host_id, path) DO UPDATE SET" + _UPSERT_SET.format(greatest="max", least="min")
        if upsert else " ON CONFLICT (host_id, path) DO NOTHING"
    )
    values = ", ".join([_sqlite_url_values(mask)] * rows)
    return f"INSERT INTO urls ({_URL_INSERT_COLUMNS}) VALUES {values}{conflict}"


@cache
def _sqlite_candidates(n_hosts: int, n_kinds: int) -> str:
    """Per host and kind, the first ``LIMIT`` due entries of the queue's primary key range, as one query."""
    branch = (
        "SELECT * FROM (SELECT host_id, kind, rank, url_id FROM queue WHERE host_id = ? AND kind = ?"
        " AND (due_at IS NULL OR due_at <= ?) ORDER BY rank, url_id LIMIT ?)"
    )
    return " UNION ALL ".join([branch] * (n_hosts * n_kinds))


_SQLITE_DEQUEUE = (
    "DELETE FROM queue WHERE host_id = ? AND kind = ? AND (rank, url_id) <= (?, ?)"
    " AND (due_at IS NULL OR due_at <= ?)"
)
"""The head of one host and kind's queue range up to the last entry claimed, under the candidates' own due
condition: exactly the claimed entries (the transaction holds the write lock), as one range delete."""
@cache
def _sqlite_lease_insert(rows: int) -> str:
    return "INSERT INTO leases (url_id, host_id, owner, lease_until) VALUES " + ", ".join(["(?, ?, ?, ?)"] * rows)

_SQLITE_REVISIT_RANK = revisit_rank(
    "revisit_s IS NOT NULL AND last_fetched_at IS NOT NULL AND next_fetch_at < last_fetched_at + revisit_s * 500000")
"""Times are integer microseconds here: half the interval is ``revisit_s`` × 500,000."""


class SqliteDialect(Dialect):
    """SQLite: writers are serialized (BEGIN IMMEDIATE), so a read-then-write unit of work cannot be overtaken."""

    serialized_writers = True

    def insert_new_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> None:
        _sqlite_write_urls(conn, hids, chunk, first_source, version, now, upsert=False)

    def enqueue_above(self, conn: Connection, max_id: int) -> None:
        """Queue every URL with an id above ``max_id``: the rows this transaction just inserted (one C-level
        statement over adjacent rows instead of a parameter tuple per URL)."""
        conn.exec_driver_sql(
            "INSERT INTO queue (host_id, kind, rank, url_id, due_at)"
            " SELECT host_id, kind, -score, id, next_fetch_at FROM urls WHERE id > ? AND state = 'queued'",
            (max_id,),
        )

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None, bool]] | None:
        _sqlite_write_urls(conn, hids, chunk, first_source, version, now, upsert=True)
        return None

    def promote_revisits(self, conn: Connection, host_ids: Sequence[int], now: datetime, limit: int) -> int:
        if not host_ids:
            return 0
        promoted = conn.exec_driver_sql(
            "UPDATE urls SET state = 'queued' WHERE id IN (SELECT id FROM urls WHERE host_id IN"
            f" {self.in_list(len(host_ids))} AND state = 'done' AND next_fetch_at <= ? LIMIT ?)"
            f" RETURNING host_id, kind, {_SQLITE_REVISIT_RANK}, id, next_fetch_at",
            (*host_ids, to_epoch_us(now), limit),
        ).all()
        if promoted:
            conn.exec_driver_sql(self.enqueue_sql, [tuple(row) for row in promoted])
        return len(promoted)

    def claim_rows(
        self, conn: Connection, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime,
    ) -> list[Any]:
        rows: list[Any] = []
        t_now, t_until = to_epoch_us(now), to_epoch_us(lease_until)
        # Reads go straight to the driver too: SQLAlchemy's Row objects for 2,000 rows cost more than the reads.
        driver = conn.connection.driver_connection
        assert driver is not None
        step = max(1, 200 // len(kinds))  # branches per statement: ~800 parameters, well inside SQLite's limit
        for start in range(0, len(host_ids), step):
            part = host_ids[start : start + step]
            params: list[Any] = []
            for host_id in part:
                for kind in kinds:
                    params += (host_id, kind, t_now, per_host)
            chosen = driver.execute(_sqlite_candidates(len(part), len(kinds)), params).fetchall()
            if len(kinds) > 1:  # several kinds of one host: keep its best per_host across them
                by_host: dict[int, list[Any]] = {}
                for entry in chosen:
                    by_host.setdefault(entry[0], []).append(entry)
                chosen = []
                for entries in by_host.values():
                    entries.sort(key=lambda e: (e[2], e[3]))
                    chosen += entries[:per_host]
            if not chosen:
                continue
            last: dict[tuple[int, str], tuple[float, int]] = {}
            for host_id, kind, rank, url_id in chosen:
                last[(host_id, kind)] = (rank, url_id)  # ascending per host and kind: the last one wins
            conn.exec_driver_sql(_SQLITE_DEQUEUE, [(*key, *edge, t_now) for key, edge in last.items()])
            flat: list[Any] = []
            for host_id, _, _, url_id in chosen:
                flat += (url_id, host_id, owner, t_until)
            _sqlite_execute_rows(conn, _sqlite_lease_insert, flat, width=4, count=len(chosen))
            ids = [entry[3] for entry in chosen]
            found: dict[int, Any] = {}
            for offset in range(0, len(ids), 5000):
                batch = ids[offset : offset + 5000]
                found.update((row[0], row) for row in driver.execute(
                    f"SELECT {_RETURNED} FROM urls WHERE id IN {self.in_list(len(batch))}", batch))
            # In the candidates' order (the IN list comes back in id order): cheaper than sorting the records.
            rows += [row for url_id in ids if (row := found.get(url_id)) is not None]
        return rows


def _sqlite_write_urls(
    conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int], version: int,
    now: datetime, *, upsert: bool,
) -> None:
    """Insert (``upsert``: or merge) a chunk as multi-row statements, rows grouped by which optional columns are
    NULL so that no None is ever bound. Parameters go in flat lists, one group per NULL pattern."""
    ts = to_epoch_us
    t_now = ts(now)
    groups: dict[int, list[Any]] = {}
    counts: dict[int, int] = {}
    for h, m, sid in zip(hids, chunk, first_source, strict=True):
        lastmod, changefreq, priority, fetch_path, until = m.lastmod, m.changefreq, m.priority, m.fetch_path, \
            m.lastmod_until
        mask = (lastmod is None) | (changefreq is None) << 1 | (priority is None) << 2 | (fetch_path is None) << 3 \
            | (until is None) << 4
        flat = groups.get(mask)
        if flat is None:
            flat = groups[mask] = []
            counts[mask] = 0
        flat += (h, m.path, version, sid, m.kind, m.score, m.depth, t_now, t_now)
        if lastmod is not None:
            flat.append(ts(lastmod))
        if changefreq is not None:
            flat.append(changefreq)
        if priority is not None:
            flat.append(priority)
        if fetch_path is not None:
            flat.append(fetch_path)
        if until is not None:
            flat.append(ts(until))
        counts[mask] += 1
    for mask, flat in groups.items():
        _sqlite_execute_rows(conn, functools.partial(_sqlite_url_insert, mask, upsert=upsert), flat,
                             width=14 - mask.bit_count(), count=counts[mask])


def _sqlite_execute_rows(
    conn: Connection, sql_for: Callable[[int], str], flat: list[Any], *, width: int, count: int
) -> None:
    """Run ``count`` rows of ``width`` parameters (``flat``, row after row) as multi-row statements of
    ``SQLITE_ROWS_PER_STATEMENT`` rows (``sql_for(n)``: the statement for n rows; its text is the same each time,
    so the prepared statement is reused), the remainder one row per step. Straight on the driver connection:
    SQLAlchemy's per-call overhead was a visible share of a claim (Database.tx translates driver errors)."""
    driver = conn.connection.driver_connection
    assert driver is not None
    full, _ = divmod(count, SQLITE_ROWS_PER_STATEMENT)
    step = SQLITE_ROWS_PER_STATEMENT * width
    if full:
        sql = sql_for(SQLITE_ROWS_PER_STATEMENT)
        for start in range(0, full * step, step):
            driver.execute(sql, flat[start : start + step])
    tail = flat[full * step :]
    if tail:
        driver.executemany(sql_for(1), [tail[i : i + width] for i in range(0, len(tail), width)])
