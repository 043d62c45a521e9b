"""Every dialect branch of the frontier in one place: engine setup, and SQLite/PostgreSQL SQL for the hot paths.

The hot paths (bulk upsert, claims) run as driver-level SQL with positional parameters so a million URLs do not
pay per-row ORM/Core overhead; everything else in ``store.py`` is dialect-neutral Core over ``models.py``. Any
other database raises ``StoreError`` naming it. Never called from outside ``harvester/frontier/``.
"""

# ruff: noqa: S608 -- SQL here is assembled from constants and placeholder counts only; values are always bound.
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

from harvester.errors import StoreError
from harvester.frontier.models import from_epoch_us, to_epoch_us
from harvester.frontier.rows import Merged
from harvester.settings import Settings

SUPPORTED = ("sqlite", "postgresql")

_UPSERT_SET = """
    score = {greatest}(urls.score, excluded.score),
    depth = {least}(urls.depth, excluded.depth),
    last_seen = excluded.last_seen,
    lastmod = CASE WHEN urls.lastmod IS NULL OR excluded.lastmod > urls.lastmod
                   THEN COALESCE(excluded.lastmod, urls.lastmod) ELSE urls.lastmod END,
    changefreq = COALESCE(excluded.changefreq, urls.changefreq),
    priority = COALESCE(excluded.priority, urls.priority),
    next_fetch_at = CASE
        WHEN urls.state = 'done' AND excluded.lastmod IS NOT NULL
             AND (urls.lastmod IS NULL OR excluded.lastmod > urls.lastmod)
             AND (urls.last_fetched_at IS NULL OR excluded.lastmod > urls.last_fetched_at)
        THEN excluded.last_seen ELSE urls.next_fetch_at END
"""
# A newer sitemap lastmod than both the stored lastmod and our last fetch makes a finished URL due now
# (next_fetch_at = the time it was seen). SET expressions read the row as it was before this statement.
# lastmod only moves forward: sources disagree (an index-fresh sitemap, a lagging feed), and an older date
# overwriting a newer one would make the URL look unchanged to the skip-by-lastmod rule.

RETURNED_COLUMNS = _RETURNED = (
    "id, path, host_id, kind, depth, score, attempts, lease_until, etag, last_modified, content_hash, lastmod,"
    " last_fetched_at, changefreq, revisit_s"
)


def make_engine(settings: Settings) -> Engine:
    """The one Engine of a store: SQLite with WAL and pragmas set on every connection, or psycopg 3."""
    url = make_url(settings.database_url)
    backend = url.get_backend_name()
    if backend == "postgresql" and url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        busy_ms = int(settings.store.sqlite_busy_timeout_s * 1000)
        engine = create_engine(
            url, connect_args={"timeout": settings.store.sqlite_busy_timeout_s, "check_same_thread": False}
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # We issue BEGIN ourselves (below): pysqlite's implicit transactions cannot BEGIN IMMEDIATE.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            for pragma in (
                "journal_mode=WAL",
                "synchronous=NORMAL",
                # Checkpoint every 64 MiB of WAL rather than every 4 MiB: one claim of 1,000 URLs dirties ~1,200
                # pages, and checkpointing after each cost more than the claim itself (bench/frontier.py).
                "wal_autocheckpoint=16384",
                "journal_size_limit=67108864",
                "foreign_keys=ON",
                f"busy_timeout={busy_ms}",
                "cache_size=-131072",  # 128 MiB page cache: the url index of a million URLs stays hot
                "mmap_size=268435456",
                "temp_store=MEMORY",
            ):
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("harvester_write", True)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    if backend == "postgresql":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    raise StoreError(f"database {url.render_as_string(hide_password=True)!r}: dialect {backend!r} is not supported")


def dialect_for(name: str) -> Dialect:
    """The SQL of one database; any database but SQLite and PostgreSQL is refused, naming it."""
    if name == "sqlite":
        return SqliteDialect(name)
    if name == "postgresql":
        return PostgresDialect(name)
    raise StoreError(f"database dialect {name!r} is not supported; use SQLite or PostgreSQL")


class Dialect:
    """SQL text, value conversion and the two dialect-specific units of work (bulk upsert, claim)."""

    lock_rows = ""
    """Appended to a SELECT whose rows the transaction goes on to update (PostgreSQL: FOR UPDATE)."""

    serialized_writers = False
    """True when one writer at a time holds the database (SQLite): new ids are then exactly those above the
    largest id before an insert, which lets the store insert first and look up only when needed."""

    def max_url_id(self, conn: Connection) -> int:
        return int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM urls").scalar_one())

    def insert_new_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> None:
        """Insert the chunk's URLs that are not stored yet and leave the others untouched."""
        raise NotImplementedError

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_sqlite = name == "sqlite"
        self.p = "?" if self.is_sqlite else "%s"

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None]] | None:
        """Upsert one chunk in one statement. Returns {(host_id, path): (id, source_id)} when the database
        reports the rows it wrote, None when it cannot (the store then looks them up as needed)."""
        raise NotImplementedError

    def claim_rows(
        self, conn: Connection, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime,
    ) -> list[Any]:
        """Lease the top ``per_host`` due URLs of each host; rows of ``RETURNED_COLUMNS``."""
        raise NotImplementedError

    # --- values -------------------------------------------------------------------------------------------

    def ts(self, value: datetime | None) -> Any:
        """A datetime as the driver stores it (SQLite: integer microseconds, see models.UtcDateTime)."""
        if value is None or not self.is_sqlite:
            return value
        return to_epoch_us(value)

    def dt(self, value: Any) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int):
            return from_epoch_us(value)
        assert isinstance(value, datetime)
        return value

    def in_list(self, n: int) -> str:
        """``(?, ?, ...)`` for SQLite; PostgreSQL binds one array instead (``= ANY(%s)``)."""
        return "(" + ",".join([self.p] * n) + ")"

    def any_of(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column IN (...)`` with its parameters, in the dialect's cheapest form."""
        if self.is_sqlite:
            return f"{column} IN {self.in_list(len(values))}", list(values)
        return f"{column} = ANY(%s)", [list(values)]

    # --- statements ---------------------------------------------------------------------------------------

    @property
    def upsert_urls(self) -> str:
        """SQLite: one row per parameter tuple (host_id, path, canonical_version, source_id, kind, score, depth,
        first_seen, last_seen, lastmod, changefreq, priority), run with executemany of the one prepared
        statement. PostgreSQL: one statement per chunk over parallel arrays, returning (id, host_id, path,
        source_id)."""
        if self.is_sqlite:
            return _sqlite_upsert()
        return _pg_upsert()

    def insert_ignore(self, table: str, columns: Sequence[str], conflict: Sequence[str]) -> str:
        cols = ", ".join(columns)
        marks = ", ".join([self.p] * len(columns))
        return f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT ({', '.join(conflict)}) DO NOTHING"

    def claim_sql(self, n_hosts: int, n_kinds: int) -> str:
        """PostgreSQL: the top ``per_host`` due URLs of each host, locked and leased in one statement.

        Per host, two index range scans stop after ``per_host`` rows (QUEUED by ``ix_urls_claim``; DONE and due
        for a revisit by ``ix_urls_revisit``), locked with ``FOR UPDATE SKIP LOCKED`` so two claimers never take
        the same URL; ROW_NUMBER then ranks only those candidates. (A ROW_NUMBER over every due URL would rank
        each host's whole backlog on every claim.) SQLite uses ``claim_candidates_sql`` + ``lease_sql``.
        """
        return _PG_CLAIM

    def claim_params(
        self, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime, owner: str,
        lease_until: datetime,
    ) -> list[Any]:
        return [list(host_ids), now, list(kinds), per_host, now, list(kinds), per_host, owner, lease_until, per_host]

    def claim_candidates_sql(self, n_hosts: int, n_kinds: int) -> str:
        """SQLite: the same two bounded index range scans per host as one UNION ALL query, returning
        (id, host_id, score); the store ranks them per host and leases the winners in the same transaction
        (BEGIN IMMEDIATE: no other writer can interleave)."""
        return _sqlite_candidates(n_hosts, n_kinds)

    def claim_candidates_params(
        self, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime
    ) -> list[Any]:
        t = self.ts(now)
        params: list[Any] = []
        for host_id in host_ids:
            params += [host_id, t, *kinds, per_host, host_id, t, *kinds, per_host]
        return params

    def lease_sql(self, n_ids: int) -> str:
        """SQLite: lease the chosen ids; parameters (owner, lease_until, *ids)."""
        return (
            "UPDATE urls SET state = 'leased', lease_owner = ?, lease_until = ?"
            f" WHERE id IN {self.in_list(n_ids)} AND state IN ('queued', 'done') RETURNING {_RETURNED}"
        )

    def claim_hosts_sql(self, n_origins: int | None, n_kinds: int | None) -> str:
        """Lease up to N hosts with due work that nobody else holds (or whose holder's lease ran out).

        Never-leased hosts first, then the one served longest ago (``lease_until`` is kept on release).
        Parameters: owner, lease_until, then ``claim_hosts_params``.
        """
        p = self.p
        due_kind = "" if n_kinds is None else " AND u.kind IN " + self.in_list(n_kinds)
        if not self.is_sqlite and n_kinds is not None:
            due_kind = " AND u.kind = ANY(%s)"
        origin_filter = ""
        if n_origins is not None:
            origin_filter = (
                " AND h.origin IN " + self.in_list(n_origins) if self.is_sqlite else " AND h.origin = ANY(%s)"
            )
        pick = f"""
            SELECT h.id FROM hosts h
            WHERE (h.lease_owner IS NULL OR h.lease_owner = {p} OR h.lease_until < {p})
              AND (h.blocked_until IS NULL OR h.blocked_until <= {p}) AND h.parked_reason IS NULL{origin_filter}
              AND (EXISTS (SELECT 1 FROM urls u WHERE u.host_id = h.id AND u.state = 'queued'
                           AND (u.next_fetch_at IS NULL OR u.next_fetch_at <= {p}){due_kind})
                   OR EXISTS (SELECT 1 FROM urls u WHERE u.host_id = h.id AND u.state = 'done'
                              AND u.next_fetch_at <= {p}{due_kind}))
            ORDER BY h.lease_until IS NOT NULL, h.lease_until, h.id
            LIMIT {p}"""
        if self.is_sqlite:
            return f"UPDATE hosts SET lease_owner = ?, lease_until = ? WHERE id IN ({pick}) RETURNING origin"
        return (
            f"UPDATE hosts SET lease_owner = %s, lease_until = %s FROM ({pick} FOR UPDATE OF h SKIP LOCKED) AS s"
            " WHERE hosts.id = s.id RETURNING hosts.origin"
        )

    def claim_hosts_params(
        self, owner: str, now: datetime, origins: Sequence[str] | None, kinds: Sequence[str] | None, limit: int
    ) -> list[Any]:
        t = self.ts(now)
        params: list[Any] = [owner, t, t]
        if origins is not None:
            params += list(origins) if self.is_sqlite else [list(origins)]
        kind_params: list[Any] = []
        if kinds is not None:
            kind_params = list(kinds) if self.is_sqlite else [list(kinds)]
        return [*params, t, *kind_params, t, *kind_params, limit]


@cache
def _sqlite_upsert() -> str:
    return (
        "INSERT INTO urls (host_id, path, canonical_version, source_id, kind, state, score, depth, first_seen,"
        " last_seen, lastmod, changefreq, priority) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (host_id, path) DO UPDATE SET" + _UPSERT_SET.format(greatest="max", least="min")
    )


@cache
def _sqlite_insert_new() -> str:
    return (
        "INSERT INTO urls (host_id, path, canonical_version, source_id, kind, state, score, depth, first_seen,"
        " last_seen, lastmod, changefreq, priority) VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (host_id, path) DO NOTHING"
    )


@cache
def _pg_upsert() -> str:
    # One statement per chunk: parallel arrays unnested server-side (no per-row round trips or parsing), sent
    # in binary (%b): text-formatting the arrays cost ~7 us per row client-side, binary ~1.5 us.
    return (
        "INSERT INTO urls (host_id, path, canonical_version, source_id, kind, state, score, depth, first_seen,"
        " last_seen, lastmod, changefreq, priority)"
        " SELECT t.host_id, t.path, %s, t.source_id, t.kind, 'queued', t.score, t.depth, %s, %s, t.lastmod,"
        " t.changefreq, t.priority FROM unnest(%b::bigint[], %b::text[], %b::bigint[], %b::text[],"
        " %b::float8[], %b::int[], %b::timestamptz[], %b::text[], %b::float8[])"
        " AS t(host_id, path, source_id, kind, score, depth, lastmod, changefreq, priority)"
        " ON CONFLICT (host_id, path) DO UPDATE SET" + _UPSERT_SET.format(greatest="GREATEST", least="LEAST")
        + " RETURNING id, host_id, path, source_id"
    )


@cache
def _sqlite_candidates(n_hosts: int, n_kinds: int) -> str:
    kinds = "(" + ",".join("?" * n_kinds) + ")"
    branch = (
        "SELECT * FROM (SELECT id, host_id, score FROM urls WHERE host_id = ? AND state = '{state}' AND {due}"
        f" AND kind IN {kinds} ORDER BY score DESC, id LIMIT ?)"
    )
    queued = branch.format(state="queued", due="(next_fetch_at IS NULL OR next_fetch_at <= ?)")
    done = branch.format(state="done", due="next_fetch_at <= ?")
    return " UNION ALL ".join(f"{queued} UNION ALL {done}" for _ in range(n_hosts))


_PG_CLAIM = f"""
WITH h(id) AS (SELECT unnest(%s::bigint[])),
c AS (
    SELECT q.id, q.host_id, q.score FROM h CROSS JOIN LATERAL (
        SELECT u.id, u.host_id, u.score FROM urls u
        WHERE u.host_id = h.id AND u.state = 'queued' AND (u.next_fetch_at IS NULL OR u.next_fetch_at <= %s)
          AND u.kind = ANY(%s)
        ORDER BY u.score DESC, u.id LIMIT %s FOR UPDATE SKIP LOCKED) q
    UNION ALL
    SELECT q.id, q.host_id, q.score FROM h CROSS JOIN LATERAL (
        SELECT u.id, u.host_id, u.score FROM urls u
        WHERE u.host_id = h.id AND u.state = 'done' AND u.next_fetch_at <= %s AND u.kind = ANY(%s)
        ORDER BY u.score DESC, u.id LIMIT %s FOR UPDATE SKIP LOCKED) q
),
r AS (SELECT id, ROW_NUMBER() OVER (PARTITION BY host_id ORDER BY score DESC, id) AS rn FROM c)
UPDATE urls SET state = 'leased', lease_owner = %s, lease_until = %s
FROM r WHERE urls.id = r.id AND r.rn <= %s
RETURNING {", ".join("urls." + c.strip() for c in _RETURNED.split(","))}
"""


class SqliteDialect(Dialect):
    """SQLite: writers are serialized (BEGIN IMMEDIATE), so a read-then-write unit of work cannot be overtaken."""

    serialized_writers = True

    def insert_new_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> None:
        ts = to_epoch_us
        t_now = ts(now)
        conn.exec_driver_sql(
            _sqlite_insert_new(),
            [
                (h, m.path, version, sid, m.kind, m.score, m.depth, t_now, t_now,
                 None if m.lastmod is None else ts(m.lastmod), m.changefreq, m.priority)
                for h, m, sid in zip(hids, chunk, first_source, strict=True)
            ],
        )

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None]] | None:
        ts = to_epoch_us
        t_now = ts(now)
        # executemany of one prepared INSERT ... ON CONFLICT: sqlite3 steps it per row in C.
        conn.exec_driver_sql(
            self.upsert_urls,
            [
                (h, m.path, version, sid, m.kind, m.score, m.depth, t_now, t_now,
                 None if m.lastmod is None else ts(m.lastmod), m.changefreq, m.priority)
                for h, m, sid in zip(hids, chunk, first_source, strict=True)
            ],
        )
        return None

    def claim_rows(
        self, conn: Connection, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime,
    ) -> list[Any]:
        rows: list[Any] = []
        step = 100  # hosts per statement: ~1,200 parameters, well inside SQLite's limit
        for start in range(0, len(host_ids), step):
            part = host_ids[start : start + step]
            candidates = conn.exec_driver_sql(
                self.claim_candidates_sql(len(part), len(kinds)),
                tuple(self.claim_candidates_params(part, kinds, per_host, now)),
            ).all()
            by_host: dict[int, list[tuple[float, int]]] = {}
            for url_id, host_id, score in candidates:
                by_host.setdefault(host_id, []).append((-score, url_id))
            chosen: list[int] = []
            for entries in by_host.values():
                if len(entries) > per_host:  # queued and revisit candidates together: keep the best
                    entries.sort()
                    del entries[per_host:]
                chosen += [url_id for _, url_id in entries]
            for offset in range(0, len(chosen), 5000):
                batch = chosen[offset : offset + 5000]
                rows += conn.exec_driver_sql(self.lease_sql(len(batch)), (owner, self.ts(lease_until), *batch)).all()
        return rows


class PostgresDialect(Dialect):
    """PostgreSQL: concurrent writers are real, so claims lock with SKIP LOCKED and upserts report their rows."""

    lock_rows = " FOR UPDATE"

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None]] | None:
        returned = conn.exec_driver_sql(
            self.upsert_urls,
            (
                version, now, now, list(hids), [m.path for m in chunk], list(first_source),
                [m.kind for m in chunk], [m.score for m in chunk], [m.depth for m in chunk],
                [m.lastmod for m in chunk], [m.changefreq for m in chunk], [m.priority for m in chunk],
            ),
        )
        return {(h, path): (url_id, sid) for url_id, h, path, sid in returned}

    def claim_rows(
        self, conn: Connection, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime,
    ) -> list[Any]:
        if not host_ids:
            return []
        return list(conn.exec_driver_sql(
            self.claim_sql(len(host_ids), len(kinds)),
            tuple(self.claim_params(host_ids, kinds, per_host, now, owner, lease_until)),
        ))
