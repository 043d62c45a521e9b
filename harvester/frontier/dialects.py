"""Every dialect branch of the frontier in one place: engine setup, and SQLite/PostgreSQL SQL for the hot paths.

The hot paths (bulk upsert, claims) run as driver-level SQL with positional parameters so a million URLs do not
pay per-row ORM/Core overhead; everything else in the frontier's modules is dialect-neutral Core over ``models.py``. Any
other database raises ``StoreError`` naming it. Never called from outside ``harvester/frontier/``.
"""

# ruff: noqa: S608 -- SQL here is assembled from constants and placeholder counts only; values are always bound.
from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence, Set
from datetime import datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url

from harvester.errors import StoreError
from harvester.frontier.models import add_postgresql_predicates, from_epoch_us, to_epoch_us
from harvester.frontier.rows import Merged
from harvester.settings import Settings

SUPPORTED = ("sqlite", "postgresql")

# CPython 3.11's sqlite3 binds int, float, str and bytearray directly but sends None through its adapter lookup
# (statement.c ``_need_adapt``), which finds nothing and raises and discards a formatted "can't adapt" error:
# ~3,000 instructions per None parameter (callgrind), about a sixth of the cost of adding a sitemap URL. An
# identity adapter for NoneType makes that lookup succeed at once; NULL is still what gets bound. ``{}.get`` is
# a C-level callable returning None for None. Process-wide, and a no-op for every other user of sqlite3.
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))

_UPSERT_SET = """
    score = {greatest}(urls.score, excluded.score),
    depth = {least}(urls.depth, excluded.depth),
    last_seen = excluded.last_seen,
    lastmod = CASE WHEN urls.lastmod IS NULL OR excluded.lastmod > urls.lastmod
                   THEN COALESCE(excluded.lastmod, urls.lastmod) ELSE urls.lastmod END,
    lastmod_until = CASE WHEN excluded.lastmod IS NOT NULL AND (urls.lastmod IS NULL OR excluded.lastmod > urls.lastmod)
                         THEN excluded.lastmod_until ELSE urls.lastmod_until END,
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
# overwriting a newer one would make the URL look unchanged to the skip-by-lastmod rule. lastmod_until (the end of
# the period a reduced-precision lastmod names; NULL for a moment) goes with the lastmod it belongs to.

RETURNED_COLUMNS = _RETURNED = (
    "id, path, host_id, kind, depth, score, attempts, etag, last_modified, content_hash, lastmod, last_fetched_at,"
    " changefreq, revisit_s, fetch_path, lastmod_until, source_id"
)
"""What a claim reads of each leased URL (store._claimed unpacks them in this order; source_id stays last)."""

REVISIT_RANK_OFFSET = 1e6
"""How far a revisit's queue rank moves from ``-score`` (scores are small): a revisit its lastmod or a vanished
listing announced (due before half its interval) by ``-offset``, ahead of everything; one that merely came due by
``+offset``, behind every URL never fetched. So within a page budget, announced changes come first (invariant 8),
then the pages a budget deferred, then re-checks of pages nothing says changed; score orders each group."""


def revisit_rank(announced_early: str) -> str:
    """The rank of a promoted revisit (``REVISIT_RANK_OFFSET``); ``announced_early`` is the dialect's test for a
    URL due before half its interval since its last fetch."""
    return (f"-score + CASE WHEN (lastmod IS NOT NULL AND last_fetched_at IS NOT NULL AND lastmod > last_fetched_at)"
            f" OR ({announced_early}) THEN -{REVISIT_RANK_OFFSET} ELSE {REVISIT_RANK_OFFSET} END")


PROMOTE_BATCH = 2_000
"""Most finished URLs whose revisit came due that one claim moves into the queue (earliest due first). Bounds the
claim that first meets a day's worth of revisits; later claims move the rest."""


def enter_wal(cursor: Any, busy_s: float) -> None:
    """Put the file in WAL mode (a no-op once it is), asking again while another connection holds the lock.

    Not asked of a file opened read-only (nor is ``bound_wal``). SQLite refuses the switch with "database is
    locked" *without* calling the busy handler when the lock it needs is a reader's upgrade that could deadlock:
    processes opening one new file at once failed so (1 of 18 in a fresh-clone run). The file is the same for all
    of them, so asking again once the other's switch is done succeeds."""
    deadline = time.monotonic() + busy_s
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def make_engine(settings: Settings, *, read_only: str | None = None) -> Engine:
    """The one Engine of a store: SQLite with WAL and pragmas set on every connection, or psycopg 3.

    ``read_only`` ("ro" or "immutable", ``base.read_only_mode``) opens a SQLite file through a URI filename with
    that flag, sets no journal and begins every transaction as a reader."""
    url = make_url(settings.database_url)
    backend = url.get_backend_name()
    if backend == "postgresql" and url.get_driver_name() != "psycopg":
        url = url.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        busy_ms = int(settings.store.sqlite_busy_timeout_s * 1000)
        timeout = settings.store.sqlite_busy_timeout_s
        connect_args = {"timeout": timeout, "check_same_thread": False}
        if read_only is not None and url.database:
            flag = "immutable=1" if read_only == "immutable" else "mode=ro"
            target = f"file:{quote(str(Path(url.database).resolve()))}?{flag}"
            engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(
                target, uri=True, timeout=timeout, check_same_thread=False))
        else:
            engine = create_engine(url, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # We issue BEGIN ourselves (below): pysqlite's implicit transactions cannot BEGIN IMMEDIATE.
            dbapi_conn.isolation_level = None
            cursor = dbapi_conn.cursor()
            if not read_only:
                enter_wal(cursor, timeout)
            for pragma in (
                "synchronous=NORMAL",
                "foreign_keys=ON",
                f"busy_timeout={busy_ms}",
                # Bounded memory (issue 22): a page cache per pooled connection (up to 7 were open at once), and
                # no mmap, whose pages of a growing file counted in RSS (256 MiB at most); the OS page cache
                # serves reads either way. 128 MiB + 256 MiB mmap gave 428 MB peak RSS at 200 hosts x 300 pages.
                "cache_size=-16384",  # 16 MiB
                "mmap_size=0",
                "temp_store=MEMORY",
            ):
                cursor.execute(f"PRAGMA {pragma}")
            if not read_only:
                bound_wal(cursor)
            cursor.close()

        writes = [0]

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("harvester_write", read_only is None)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
            writes[0] += write
            if write and writes[0] % WAL_RETUNE_EVERY == 0:  # the file grew: its WAL may grow with it
                bound_wal(conn.connection.dbapi_connection)

        return engine
    if backend == "postgresql":
        add_postgresql_predicates()
        # The frontier's statements are short and indexed: JIT compilation (which kicks in on a mis-estimated
        # plan) cost 600 ms on a claim that runs in 20 ms.
        engine = create_engine(url, pool_size=10, max_overflow=10, connect_args={"options": "-c jit=off"})
        ping_when_idle(engine)
        return engine
    raise StoreError(f"database {url.render_as_string(hide_password=True)!r}: dialect {backend!r} is not supported")


PING_IDLE_S = 2.0
"""A pooled PostgreSQL connection idle this long is pinged before use (a server restarted meanwhile closed it)."""


def ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before use only when it has sat idle ``PING_IDLE_S``: SQLAlchemy's ``pool_pre_ping``
    pings on every checkout, a round trip per store call (5-10 ms each under load, issue 32), though a
    connection used a moment ago is as good as a ping. One that fails the ping is replaced at once; one that
    broke while in use fails its unit of work, which ``runtime.db`` asks again (``DatabaseUnavailable``) on a
    fresh connection (SQLAlchemy drops the pool's connections on a disconnect)."""
    from sqlalchemy.exc import DisconnectionError

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["used_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        used_at = record.info.get("used_at")
        if used_at is None or time.monotonic() - used_at < PING_IDLE_S:
            return  # new, or used a moment ago
        try:
            autocommit = dbapi_conn.autocommit
            dbapi_conn.autocommit = True
            dbapi_conn.execute("SELECT 1")
            dbapi_conn.autocommit = autocommit
        except Exception as exc:  # the pool replaces it (and retries the checkout)
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc


WAL_MIN_PAGES = 256
WAL_MAX_PAGES = 16_384
WAL_SHARE = 4
WAL_RETUNE_EVERY = 256
"""SQLite's write-ahead log is checkpointed (copied into the database and begun again) once it holds a quarter of
the database's pages, between 256 (1 MiB) and 16,384 (64 MiB), and truncated back to that size
after (``journal_size_limit``); re-tuned every 256 write transactions as the file grows. A fixed 64 MiB let a
small harvest's WAL grow to 20.8 MB beside a 110 KB database (nothing checkpointed yet) and fill a 20 MiB volume
(issue 32); a large frontier keeps the rare checkpoints it needs: one claim of 1,000 URLs dirties ~1,200 pages, and
checkpointing after each cost more than the claim itself (bench/frontier.py). Headroom a harvest needs on its
volume: the final database, plus a quarter of it (64 MiB at most), plus the largest transaction."""


def bound_wal(dbapi_conn: Any) -> int:
    """Set the connection's checkpoint threshold and WAL size limit from the database's size; returns the pages."""
    pages = int(dbapi_conn.execute("PRAGMA page_count").fetchone()[0])
    page_size = int(dbapi_conn.execute("PRAGMA page_size").fetchone()[0])
    wal = max(WAL_MIN_PAGES, min(WAL_MAX_PAGES, pages // WAL_SHARE))
    dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={wal}")
    dbapi_conn.execute(f"PRAGMA journal_size_limit={wal * page_size}")
    return wal


def disk_full(database: str, exc: BaseException) -> str | None:
    """The error to raise when ``exc`` says the disk is full (SQLite's SQLITE_FULL, PostgreSQL's 53100), naming
    the file, the space left on its volume and what to do; None for any other error."""
    orig = getattr(exc, "orig", exc)
    code = getattr(orig, "sqlite_errorcode", None)
    if code != sqlite3.SQLITE_FULL and getattr(orig, "sqlstate", None) != "53100":
        return None
    where = database
    url = make_url(database)
    if url.get_backend_name() == "sqlite" and url.database:
        path = os.path.abspath(url.database)
        try:
            usage = shutil.disk_usage(os.path.dirname(path))
            where = f"{path} ({usage.free / 1e6:.1f} MB free of {usage.total / 1e6:.1f} MB on its volume)"
        except OSError:
            where = path
    return (f"the disk is full: {where}. The unit of work was rolled back and nothing stored is lost; free some "
            f"space (the database grows by up to a quarter of its size, 64 MiB at most, while it writes; see "
            f"docs/operations.md) and rerun to go on: {orig}")


def dialect_for(name: str) -> Dialect:
    """The SQL of one database; any database but SQLite and PostgreSQL is refused, naming it."""
    if name == "sqlite":
        from harvester.frontier.dialect_sqlite import SqliteDialect

        return SqliteDialect(name)
    if name == "postgresql":
        from harvester.frontier.dialect_postgres import PostgresDialect

        return PostgresDialect(name)
    raise StoreError(f"database dialect {name!r} is not supported; use SQLite or PostgreSQL")


class Dialect:
    """SQL text, value conversion and the dialect-specific units of work (bulk upsert, promotion, claim)."""

    lock_rows = ""
    """Appended to a SELECT whose rows the transaction goes on to update (PostgreSQL: FOR UPDATE OF l)."""

    serialized_writers = False
    """True when one writer at a time holds the database (SQLite): new ids are then exactly those above the
    largest id before an insert, which lets the store insert first and look up only when needed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_sqlite = name == "sqlite"
        self.p = "?" if self.is_sqlite else "%s"

    def max_url_id(self, conn: Connection) -> int:
        return int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM urls").scalar_one())

    def insert_new_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> None:
        """Insert the chunk's URLs that are not stored yet and leave the others untouched."""
        raise NotImplementedError

    def enqueue_above(self, conn: Connection, max_id: int) -> None:
        """Queue every URL with an id above ``max_id`` (serialized writers only: the rows just inserted)."""
        raise NotImplementedError

    def write_urls(
        self, conn: Connection, hids: Sequence[int], chunk: Sequence[Merged], first_source: Sequence[int],
        version: int, now: datetime,
    ) -> dict[tuple[int, str], tuple[int, int | None, bool]] | None:
        """Upsert one chunk in one statement. Returns {(host_id, path): (id, source_id, inserted)} when the
        database reports the rows it wrote, None when it cannot (the store then looks them up as needed)."""
        raise NotImplementedError

    def claim_rows(
        self, conn: Connection, host_ids: Sequence[int], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime,
    ) -> list[Any]:
        """Move the top ``per_host`` due queue rows of each host into ``leases``; rows of ``RETURNED_COLUMNS``,
        grouped by host in the order of ``host_ids``, best first (the order the store hands them out)."""
        raise NotImplementedError

    def claim_urls(
        self, conn: Connection, origins: Sequence[str], kinds: Sequence[str], per_host: int, now: datetime,
        owner: str, lease_until: datetime, beside: Sequence[str] = (),
    ) -> tuple[dict[int, str], list[Any], dict[int, str] | None]:
        """A whole claim: of ``origins``, the hosts no other owner holds bar those ``beside`` the claimer (host id
        -> origin), their due revisits promoted (``promote_revisits``), then ``claim_rows`` over them in origin
        order; and, where the dialect reads them with the rows, the kinds of the rows' sources (source id -> kind;
        None: not read)."""
        where, params = self.any_of("origin", list(origins))
        passed, passed_params = self.any_of("lease_owner", sorted(beside)) if beside else ("", [])
        host_rows = conn.exec_driver_sql(
            f"SELECT id, origin FROM hosts WHERE {where} AND NOT (lease_owner IS NOT NULL"
            f" AND lease_owner <> {self.p} AND lease_until >= {self.p}{f' AND NOT {passed}' if beside else ''})",
            (*params, owner, self.ts(now), *passed_params),
        ).all()
        origin_of = {int(host_id): str(origin) for host_id, origin in host_rows}
        host_ids = sorted(origin_of, key=origin_of.__getitem__)  # claim order: host, then best first
        self.promote_revisits(conn, host_ids, now, PROMOTE_BATCH)
        return origin_of, self.claim_rows(conn, host_ids, kinds, per_host, now, owner, lease_until), None

    def fold_queue_counts(self, conn: Connection) -> None:
        """Sum ``queue_counts``' rows per host and kind, where the database appends them (PostgreSQL); SQLite's
        triggers keep one row per host and kind already."""

    def promote_revisits(self, conn: Connection, host_ids: Sequence[int], now: datetime, limit: int) -> int:
        """Finished URLs of ``host_ids`` whose revisit time has come become QUEUED and enter the queue, where they
        compete with new URLs by score. At most ``limit``, earliest due first (``ix_urls_revisit`` order)."""
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

    def insert_ignore(self, table: str, columns: Sequence[str], conflict: Sequence[str]) -> str:
        cols = ", ".join(columns)
        marks = ", ".join([self.p] * len(columns))
        return f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT ({', '.join(conflict)}) DO NOTHING"

    @property
    def enqueue_sql(self) -> str:
        """Queue rows (host_id, kind, rank, url_id, due_at) for executemany; an entry already there is kept."""
        return self.insert_ignore("queue", ("host_id", "kind", "rank", "url_id", "due_at"),
                                  ("host_id", "kind", "rank", "url_id"))

    @property
    def rerank_sql(self) -> str:
        """A queued URL's better score moves its queue entry; parameters (new rank, host_id, kind, old rank, id).
        Matches nothing when the URL is leased meanwhile (its rank is read from ``urls`` when it comes back)."""
        p = self.p
        return f"UPDATE queue SET rank = {p} WHERE host_id = {p} AND kind = {p} AND rank = {p} AND url_id = {p}"

    def release_leases(self, conn: Connection, where: str, params: Sequence[Any]) -> int:
        """End the leases matching ``where`` (SQL over ``leases.*`` columns) and put their URLs back in the queue,
        due as they were (``urls.next_fetch_at``) and ranked by their current score. Returns how many ended.

        The leases are deleted first and only those this statement ended are queued: on PostgreSQL a completion
        of the same URL (its holder, slow but alive) may hold its lease meanwhile. Queued from a read of the
        leases, such a URL entered the queue as the completion made it DONE: its revisit's promotion queued it a
        second time (another rank), and a claim taking both entries failed whole on ``pk_leases``."""
        ended = [int(url_id) for url_id in conn.exec_driver_sql(
            f"DELETE FROM leases WHERE {where} RETURNING url_id", tuple(params)).scalars()]
        for start in range(0, len(ended), 500):
            ids, ids_params = self.any_of("id", ended[start : start + 500])
            conn.exec_driver_sql(
                "INSERT INTO queue (host_id, kind, rank, url_id, due_at) SELECT host_id, kind, -score, id,"
                f" next_fetch_at FROM urls WHERE {ids} AND state = 'queued' ON CONFLICT DO NOTHING", tuple(ids_params),
            )
        return len(ended)

    def lock_cycles(self, conn: Connection) -> None:
        """Serialise, to the end of the transaction, the look for an open cycle and the opening of a new one. On
        SQLite a writer holds the whole file (BEGIN IMMEDIATE): nothing to do."""

    def extraction_processes(
        self, conn: Connection, site: str = "", stalled: Set[tuple[str, int]] = frozenset()
    ) -> int:
        """Extraction processes of ``site`` on this frontier, this one included, the idle among them too (what host
        leases cannot show: a process waiting for hosts holds none), bar the ``stalled`` ones (machine, PID) whose
        leases have all lapsed. One process per file on SQLite."""
        return 1

    def claim_hosts_sql(self, n_origins: int | None, n_kinds: int | None) -> str:
        """Lease up to N hosts with due work that nobody else holds (or whose holder's lease ran out).

        Due work: a queue entry that is due, or a finished URL whose revisit time has come (promoted by the
        claim). A parked host is skipped until its park's end (``blocked_until``) has passed; one parked with no
        end stays parked until someone clears it. Never-leased hosts first, then the one served longest ago
        (``lease_until`` is kept on release). Parameters: owner, lease_until, then ``claim_hosts_params``.
        """
        p = self.p
        kind_q = kind_u = ""
        if n_kinds is not None:
            kind_q = " AND q.kind IN " + self.in_list(n_kinds) if self.is_sqlite else " AND q.kind = ANY(%s)"
            kind_u = " AND u.kind IN " + self.in_list(n_kinds) if self.is_sqlite else " AND u.kind = ANY(%s)"
        origin_filter = ""
        if n_origins is not None:
            origin_filter = (
                " AND h.origin IN " + self.in_list(n_origins) if self.is_sqlite else " AND h.origin = ANY(%s)"
            )
        pick = f"""
            SELECT h.id FROM hosts h
            WHERE (h.lease_owner IS NULL OR h.lease_owner = {p} OR h.lease_until < {p})
              AND (h.blocked_until IS NULL OR h.blocked_until <= {p})
              AND (h.parked_reason IS NULL OR h.blocked_until IS NOT NULL){origin_filter}
              AND (EXISTS (SELECT 1 FROM queue q WHERE q.host_id = h.id{kind_q}
                           AND (q.due_at IS NULL OR q.due_at <= {p}))
                   OR EXISTS (SELECT 1 FROM urls u WHERE u.host_id = h.id AND u.state = 'done'
                              AND u.next_fetch_at <= {p}{kind_u}))
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
        return [*params, *kind_params, t, t, *kind_params, limit]


_URL_INSERT_COLUMNS = (
    "host_id, path, canonical_version, source_id, kind, state, score, depth, first_seen, last_seen, lastmod,"
    " changefreq, priority, fetch_path, lastmod_until"
)
