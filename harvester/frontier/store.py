"""FrontierStore: the durable frontier and the only module that speaks SQL (SQLite or PostgreSQL).

Each public method is one transaction keeping one invariant (``complete_many`` writes outcomes, pages, fetches
and outlinks together or not at all). Synchronous and thread safe (one Engine, a pooled connection per call):
async callers use ``asyncio.to_thread``. Never fetches, never parses pages, never builds Settings.
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import importlib
import logging
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Engine, Select, case, exists, func, insert, inspect, literal, or_, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import aliased

from harvester.errors import DatabaseUnavailable, InvalidRecord, LeaseLost, SchemaOutOfDate, StoreError
from harvester.frontier import migrate
from harvester.frontier.dialects import PROMOTE_BATCH, dialect_for, make_engine
from harvester.frontier.models import (
    Document,
    Fetch,
    Host,
    Lease,
    Page,
    QueueEntry,
    Run,
    Source,
    Url,
    UrlSource,
    from_epoch_us,
)
from harvester.frontier.rows import (
    ORIGIN,
    Merged,
    aware,
    check_completion,
    fold,
    merge,
    outcome,
    page_row,
    source_kind,
    split_url,
    stored_page,
    url_outcome,
)
from harvester.records import (
    AddResult,
    ClaimedUrl,
    CompleteResult,
    Completion,
    DiscoveredUrl,
    DocumentState,
    ErrorClass,
    HostPolicy,
    RobotsState,
    StoredFetch,
    StoredPage,
    StoreStats,
    UrlKind,
    UrlState,
    Vanished,
)
from harvester.runtime import utcnow
from harvester.settings import DEFAULT_DATABASE_URL, Settings

logger = logging.getLogger(__name__)

PERMANENT_REDIRECTS = (301, 308)
"""Statuses that say a URL moved for good (RFC 9110 §15.4.2, §15.4.9)."""

CHUNK = 5000
"""Most rows per statement (bounded by SQLite's parameter limit); settings.discovery.batch_size if smaller."""


_URL_UPDATE = (
    "UPDATE urls SET state = ?, last_status = ?, etag = ?, last_modified = ?, content_hash = ?,"
    " next_fetch_at = ?, revisit_s = ?, attempts = ?, last_error_class = ?, last_error = ?,"
    " changed_at = COALESCE(?, changed_at), gone_at = ?, final_url = ?, duplicate_of = ?,"
    " last_fetched_at = COALESCE(?, last_fetched_at) WHERE id = ?"
)
"""One completion's URL columns (rows.UrlOutcome); run with executemany for a batch of completions."""

_full_url = (Host.origin + Url.path).label("url")

_KIND_OF = {kind.value: kind for kind in UrlKind}
"""Stored kind -> UrlKind without Enum's (slow) value lookup."""


_NOT_CURRENT = tuple(s.value for s in (UrlState.GONE, UrlState.DUPLICATE, UrlState.DISALLOWED, UrlState.SKIPPED))
"""URL states whose stored pages a snapshot (``iter_pages(latest=True)``) leaves out."""


def _pages_query() -> Select[Any]:
    return (
        select(Page.__table__, _full_url, Url.state.label("url_state"))
        .join(Url, Url.id == Page.url_id).join(Host, Host.id == Url.host_id)
    )


UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
"""PostgreSQL's admin_shutdown, crash_shutdown and cannot_connect_now; with class 08 (connection exception),
the server is away, not the unit of work wrong."""


def _unreachable(exc: DBAPIError) -> bool:
    """The error says the server is away (refused, restarting, connection dropped), not that the work is wrong."""
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None)
    if state is None:  # no answer from a server at all: refused, reset, closed
        return type(exc.orig).__name__ in ("OperationalError", "InterfaceError")
    return state.startswith("08") or state in UNREACHABLE_STATES


def _document_state(doc: Any) -> DocumentState:
    return DocumentState(
        url=doc["url"], kind=doc["kind"], status=doc["status"], etag=doc["etag"],
        last_modified=doc["last_modified"], content_hash=doc["content_hash"], fetched_at=doc["fetched_at"],
        next_fetch_at=doc["next_fetch_at"], url_count=doc["url_count"], error=doc["error"],
        children=tuple(doc["children"] or ()), read_at=doc["read_at"],
    )


def _canonical_version() -> int:
    try:
        urls_module = importlib.import_module("harvester.urls")
    except ImportError:
        return 1
    return int(getattr(urls_module, "CANONICAL_VERSION", 1))


_Known = tuple[int, "int | None", str, float, str]
"""A stored URL as the upsert paths read it: (id, source_id, state, score, kind)."""


@dataclass(slots=True)
class _Tx:
    """An open transaction plus the ids it created, published to the caches only after commit."""

    conn: Connection
    hosts: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)


SOURCE_KINDS_CACHED = 100_000
"""Source kinds a store remembers (one per sitemap, feed or listing page) before it starts again."""


class FrontierStore:
    """The frontier: URLs, hosts, documents, pages, fetches and runs. Build it with ``FrontierStore.open``."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self._engine = engine
        self._d = dialect_for(engine.dialect.name)
        self._host_ids: dict[str, int] = {}
        self._source_ids: dict[str, int] = {}
        self._source_kinds: dict[int, str] = {}
        self._canonical_version = _canonical_version()
        self._chunk = max(1, min(settings.discovery.batch_size, CHUNK))
        self._known_share: dict[int, float] = {}  # per host: share of the last chunk that was already stored

    # --- lifecycle ----------------------------------------------------------------------------------------

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool | None = None) -> FrontierStore:
        """Open the frontier at ``settings.database_url``.

        ``upgrade`` None upgrades the embedded default SQLite file (creating its directory) and sets up any new,
        empty SQLite file (nothing in it to migrate with care); any other database behind the head revision
        raises ``SchemaOutOfDate``. True migrates to head; False never does.
        """
        url = settings.database_url
        is_default = url == DEFAULT_DATABASE_URL
        if is_default:
            database = make_url(url).database
            if database:
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        store = cls(settings, make_engine(settings))
        try:
            if upgrade or (upgrade is None and (is_default or (store._d.is_sqlite and store._empty()))):
                store.upgrade()
            else:
                store._check_revision()
        except DBAPIError as exc:  # e.g. a SQLite file locked past sqlite_busy_timeout_s, a server down
            store.close()
            error = DatabaseUnavailable if not store._d.is_sqlite and _unreachable(exc) else StoreError
            raise error(f"cannot open the frontier at {store.url_display}: {exc.orig}") from exc
        except BaseException:
            store.close()
            raise
        return store

    def __enter__(self) -> FrontierStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._engine.dispose()

    def upgrade(self) -> None:
        """Alembic upgrade to head: ``migrations/`` is the only way the schema changes."""
        with self._engine.begin() as conn:
            migrate.upgrade(conn)
        logger.info("database %s upgraded to %s", self.url_display, migrate.head_revision())

    def _empty(self) -> bool:
        """No table at all: a database file just created (by SQLite on first open, or by the user)."""
        with self._engine.connect() as conn:
            return not inspect(conn).get_table_names()

    def _check_revision(self) -> None:
        with self._engine.connect() as conn:
            current = migrate.current_revision(conn)
        head = migrate.head_revision()
        if current != head:
            raise SchemaOutOfDate(
                f"database {self.url_display} is at schema revision {current or 'none (empty)'}, this harvester"
                f" needs {head}: run `harvester db upgrade` (with HARVESTER_DATABASE_URL set to this database)"
            )

    @property
    def url_display(self) -> str:
        """The database URL with any password masked: safe to log and print."""
        return self._engine.url.render_as_string(hide_password=True)

    @property
    def dialect(self) -> str:
        return self._d.name

    @contextmanager
    def _tx(self, *, write: bool = True) -> Iterator[_Tx]:
        """One transaction. On SQLite a writer takes the write lock up front (BEGIN IMMEDIATE), so a
        read-then-write unit of work can never be overtaken; driver errors become StoreError/InvalidRecord."""
        try:
            with self._engine.connect() as conn:
                conn.execution_options(harvester_write=write)
                tx = _Tx(conn)
                with conn.begin():
                    yield tx
        except IntegrityError as exc:
            raise InvalidRecord(f"the database refused the unit of work (nothing was written): {exc.orig}") from exc
        except DBAPIError as exc:
            if not self._d.is_sqlite and _unreachable(exc):
                raise DatabaseUnavailable(f"database {self.url_display} unavailable: {exc.orig}") from exc
            raise StoreError(f"database error on {self.url_display}: {exc.orig}") from exc
        # The SQLite bulk paths talk to the driver connection directly (dialects._sqlite_write_urls).
        except sqlite3.IntegrityError as exc:
            raise InvalidRecord(f"the database refused the unit of work (nothing was written): {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"database error on {self.url_display}: {exc}") from exc
        self._host_ids.update(tx.hosts)
        self._source_ids.update(tx.sources)

    # --- hosts and sources --------------------------------------------------------------------------------

    def _ensure_hosts(self, tx: _Tx, origins: Sequence[str]) -> dict[str, int]:
        wanted = {o: self._host_ids.get(o) or tx.hosts.get(o) for o in set(origins)}
        missing = [o for o, i in wanted.items() if i is None]
        if missing:
            d = self._d
            tx.conn.exec_driver_sql(
                d.insert_ignore("hosts", ("origin", "failures", "lastmod_checks", "lastmod_hits"), ("origin",)),
                [(o, 0, 0, 0) for o in missing],
            )
            for start in range(0, len(missing), self._chunk):
                part = missing[start : start + self._chunk]
                where, params = d.any_of("origin", part)
                for host_id, origin in tx.conn.exec_driver_sql(
                    f"SELECT id, origin FROM hosts WHERE {where}", tuple(params)
                ):
                    tx.hosts[origin] = host_id
                    wanted[origin] = host_id
        return {o: i for o, i in wanted.items() if i is not None}

    def _ensure_sources(self, tx: _Tx, labels: Sequence[str]) -> dict[str, int]:
        wanted = {s: self._source_ids.get(s) or tx.sources.get(s) for s in set(labels)}
        missing = [s for s, i in wanted.items() if i is None]
        if missing:
            d = self._d
            tx.conn.exec_driver_sql(
                d.insert_ignore("sources", ("label", "kind"), ("label",)), [(s, source_kind(s)) for s in missing]
            )
            where, params = d.any_of("label", missing)
            for source_id, label in tx.conn.exec_driver_sql(
                f"SELECT id, label FROM sources WHERE {where}", tuple(params)
            ):
                tx.sources[label] = source_id
                wanted[label] = source_id
        return {s: i for s, i in wanted.items() if i is not None}

    def ensure_hosts(self, origins: Sequence[str]) -> None:
        """Create host rows for ``origins`` (``scheme://host[:port]``) that do not exist yet."""
        for origin in origins:
            if not ORIGIN.fullmatch(origin):
                raise InvalidRecord(f"origin {origin!r} is not scheme://host[:port] (http or https)")
        with self._tx() as tx:
            self._ensure_hosts(tx, origins)

    def _host_row(self, conn: Connection, origin: str) -> Any:
        return conn.execute(select(Host.__table__).where(Host.origin == origin)).mappings().first()

    # --- discovery ----------------------------------------------------------------------------------------

    def add_discovered(self, batch: Sequence[DiscoveredUrl], *, now: datetime | None = None) -> AddResult:
        """Bulk upsert of discovered URLs (one statement per chunk, never one per URL).

        New URLs are QUEUED and due now. A URL seen again keeps its best score and least depth, gains the new
        source in its provenance, and takes lastmod/changefreq/priority when given; a newer lastmod than both the
        stored one and the last fetch makes a DONE URL due now (``made_due``). A malformed record raises
        ``InvalidRecord`` naming it, and nothing of the batch is written.
        """
        merged = merge(batch)
        if not merged:
            return AddResult(0, 0, 0)
        with self._tx() as tx:
            return self._upsert(tx, merged, aware(now) or utcnow())

    def _lookup(self, conn: Connection, paths_by_host: dict[int, list[str]], columns: str) -> list[Any]:
        """Rows for (host_id, path) keys: one statement per host and chunk, through the unique index."""
        d = self._d
        rows: list[Any] = []
        for host_id, paths in paths_by_host.items():
            for start in range(0, len(paths), self._chunk):
                where, params = d.any_of("path", paths[start : start + self._chunk])
                rows += conn.exec_driver_sql(
                    f"SELECT host_id, path, {columns} FROM urls WHERE host_id = {d.p} AND {where}",
                    (host_id, *params),
                ).all()
        return rows

    def _upsert(self, tx: _Tx, merged: list[Merged], now: datetime) -> AddResult:
        d, conn = self._d, tx.conn
        host_of = self._ensure_hosts(tx, list({m.origin for m in merged}))
        source_of = self._ensure_sources(tx, list({s for m in merged for s in m.sources}))
        total = AddResult(0, 0, 0)
        for start in range(0, len(merged), self._chunk):
            chunk = merged[start : start + self._chunk]
            hids = [host_of[m.origin] for m in chunk]
            first_source = [source_of[m.sources[0]] for m in chunk]
            if d.serialized_writers and all(self._known_share.get(h, 0.0) < 0.5 for h in set(hids)):
                result, stored = self._insert_first(conn, hids, chunk, first_source, now)
            else:
                result, stored = self._lookup_first(conn, hids, chunk, first_source, now)
            share = result.updated / len(chunk)
            for host_id in set(hids):
                self._known_share[host_id] = share
            pairs: set[tuple[int, int]] = set()
            for h, m in zip(hids, chunk, strict=True):
                entry = stored.get((h, m.path))
                if entry is None:
                    continue
                url_id, row_source = entry
                for label in m.sources:
                    sid = source_of[label]
                    if sid != row_source:
                        pairs.add((url_id, sid))
            if pairs:
                conn.exec_driver_sql(
                    d.insert_ignore("url_sources", ("url_id", "source_id"), ("url_id", "source_id")), sorted(pairs)
                )
            total = total + result
        return total

    def _lookup_first(
        self, conn: Connection, hids: list[int], chunk: list[Merged], first_source: list[int], now: datetime
    ) -> tuple[AddResult, dict[tuple[int, str], tuple[int, int | None]]]:
        """Look the chunk up, then upsert it: the cheaper order when most URLs are already known."""
        d = self._d
        known, made_due = self._known_rows(conn, hids, chunk, None)
        before = d.max_url_id(conn) if d.serialized_writers else 0
        written = d.write_urls(conn, hids, chunk, first_source, self._canonical_version, now)
        self._rerank(conn, hids, chunk, known)
        stored = {key: (row[0], row[1]) for key, row in known.items()}
        if written is None:
            # SQLite reports no rows: the new ones are exactly those above ``before`` (serialized writers).
            d.enqueue_above(conn, before)
            inserted = d.max_url_id(conn) - before
            # Known rows came from the lookup; new URLs that arrived with several sources need their ids, for
            # their extra sources go to url_sources.
            multi: dict[int, list[str]] = {}
            for h, m in zip(hids, chunk, strict=True):
                if len(m.sources) > 1 and (h, m.path) not in known:
                    multi.setdefault(h, []).append(m.path)
            for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id"):
                stored[(host_id, path)] = (url_id, source_id)
        else:  # the database queued the rows it inserted, and says which they were
            inserted = sum(1 for row in written.values() if row[2])
            stored = {key: (row[0], row[1]) for key, row in written.items()}
        return AddResult(inserted, len(chunk) - inserted, made_due), stored

    def _insert_first(
        self, conn: Connection, hids: list[int], chunk: list[Merged], first_source: list[int], now: datetime
    ) -> tuple[AddResult, dict[tuple[int, str], tuple[int, int | None]]]:
        """Insert what is new first (one index probe per URL), and only when some URLs turned out to be known,
        look those up and update them. Needs serialized writers (SQLite): new rows are exactly the ids above
        the largest id before the insert, and nobody else writes in between."""
        d = self._d
        before = d.max_url_id(conn)
        d.insert_new_urls(conn, hids, chunk, first_source, self._canonical_version, now)
        inserted = d.max_url_id(conn) - before
        if inserted:
            d.enqueue_above(conn, before)
        if inserted == len(chunk):
            multi: dict[int, list[str]] = {}
            for h, m in zip(hids, chunk, strict=True):
                if len(m.sources) > 1:
                    multi.setdefault(h, []).append(m.path)
            stored = {
                (host_id, path): (url_id, source_id)
                for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id")
            }
            return AddResult(inserted, 0, 0), stored
        # Some were known: their rows are untouched so far (DO NOTHING), so their old state is still readable.
        known, made_due = self._known_rows(conn, hids, chunk, before)
        again = [(h, m, sid) for h, m, sid in zip(hids, chunk, first_source, strict=True) if (h, m.path) in known]
        d.write_urls(conn, [a[0] for a in again], [a[1] for a in again], [a[2] for a in again],
                     self._canonical_version, now)
        self._rerank(conn, hids, chunk, known)
        stored = {key: (row[0], row[1]) for key, row in known.items()}
        multi = {}
        for h, m in zip(hids, chunk, strict=True):
            if len(m.sources) > 1 and (h, m.path) not in known:
                multi.setdefault(h, []).append(m.path)
        for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id"):
            stored[(host_id, path)] = (url_id, source_id)
        return AddResult(inserted, len(known), made_due), stored

    def _rerank(
        self, conn: Connection, hids: list[int], chunk: list[Merged], known: dict[tuple[int, str], _Known]
    ) -> None:
        """Queued URLs that came back with a better score move up in the queue (the upsert kept the best)."""
        moves = []
        for h, m in zip(hids, chunk, strict=True):
            row = known.get((h, m.path))
            if row is not None and row[2] == "queued" and m.score > row[3]:
                moves.append((-m.score, h, row[4], -row[3], row[0]))
        if moves:
            conn.exec_driver_sql(self._d.rerank_sql, moves)

    def _known_rows(
        self, conn: Connection, hids: list[int], chunk: list[Merged], max_id: int | None
    ) -> tuple[dict[tuple[int, str], _Known], int]:
        """{(host_id, path): (id, source_id, state, score, kind)} of the chunk's URLs already stored (ids <=
        ``max_id`` if given), and how many of them a newer lastmod makes due (the rule of
        dialects._UPSERT_SET, counted here)."""
        d = self._d
        paths_by_host: dict[int, list[str]] = {}
        for host_id, m in zip(hids, chunk, strict=True):
            paths_by_host.setdefault(host_id, []).append(m.path)
        lastmods = {(h, m.path): m.lastmod for h, m in zip(hids, chunk, strict=True) if m.lastmod is not None}
        known: dict[tuple[int, str], _Known] = {}
        made_due = 0
        for host_id, path, url_id, source_id, state, old_lastmod, fetched_at, score, kind in self._lookup(
            conn, paths_by_host, "id, source_id, state, lastmod, last_fetched_at, score, kind"
        ):
            if max_id is not None and url_id > max_id:
                continue
            known[(host_id, path)] = (url_id, source_id, state, score, kind)
            new_lastmod = lastmods.get((host_id, path))
            if state == "done" and new_lastmod is not None:
                old, last_fetch = d.dt(old_lastmod), d.dt(fetched_at)
                if (old is None or new_lastmod > old) and (last_fetch is None or new_lastmod > last_fetch):
                    made_due += 1
        return known, made_due

    def known_urls(self, urls: Sequence[str], *, before: datetime | None = None) -> set[str]:
        """The canonical ``urls`` the frontier already holds (any state), first seen before ``before`` when given;
        through the unique index."""
        by_origin: dict[str, list[str]] = {}
        for url in urls:
            origin, path = split_url(url)
            by_origin.setdefault(origin, []).append(path)
        if not by_origin:
            return set()
        cutoff = aware(before)
        d = self._d
        with self._tx(write=False) as tx:
            ids: dict[str, int] = {
                origin: host_id for origin, host_id in tx.conn.execute(
                    select(Host.origin, Host.id).where(Host.origin.in_(list(by_origin)))
                )
            }
            origin_of_id = {host_id: origin for origin, host_id in ids.items()}
            rows = self._lookup(
                tx.conn, {ids[o]: paths for o, paths in by_origin.items() if o in ids}, "first_seen"
            )
        return {
            origin_of_id[host_id] + path for host_id, path, first_seen in rows
            if cutoff is None or ((seen := d.dt(first_seen)) is not None and seen < cutoff)
        }

    def _url_id(self, conn: Connection, url: str) -> int | None:
        origin, path = split_url(url)
        p = self._d.p
        row = conn.exec_driver_sql(
            f"SELECT u.id FROM urls u JOIN hosts h ON h.id = u.host_id WHERE h.origin = {p} AND u.path = {p}",
            (origin, path),
        ).first()
        return None if row is None else int(row[0])

    def url_id(self, url: str) -> int | None:
        """The id of a stored URL (canonical), or None when the frontier does not hold it."""
        with self._tx(write=False) as tx:
            return self._url_id(tx.conn, url)

    def sources_of(self, url: str) -> list[str]:
        """Provenance labels of ``url`` (first source first), or [] when the URL is unknown."""
        p = self._d.p
        with self._tx(write=False) as tx:
            url_id = self._url_id(tx.conn, url)
            if url_id is None:
                return []
            rows = tx.conn.exec_driver_sql(
                "SELECT s.label, 0 AS o FROM urls u JOIN sources s ON s.id = u.source_id"
                f" WHERE u.id = {p} UNION SELECT s.label, 1 FROM url_sources us"
                f" JOIN sources s ON s.id = us.source_id WHERE us.url_id = {p} ORDER BY 2, 1",
                (url_id, url_id),
            ).all()
        return list(dict.fromkeys(label for label, _ in rows))

    # --- extraction: leases -------------------------------------------------------------------------------

    def claim_hosts(
        self, owner: str, *, limit: int, lease_s: float, now: datetime | None = None,
        hosts: Sequence[str] | None = None, kinds: Sequence[UrlKind] | None = None,
    ) -> list[str]:
        """Lease up to ``limit`` hosts with due work (of ``kinds``, default any) that no other owner holds
        and that are neither blocked nor parked. ``hosts`` restricts to a partition. Returns their origins."""
        if limit <= 0 or (hosts is not None and not hosts):
            return []
        now = aware(now) or utcnow()
        d = self._d
        kind_values = None if kinds is None else [str(k) for k in kinds]
        sql = d.claim_hosts_sql(None if hosts is None else len(hosts), None if kinds is None else len(kinds))
        params = [owner, d.ts(now + timedelta(seconds=lease_s))]
        params += d.claim_hosts_params(owner, now, hosts, kind_values, limit)
        with self._tx() as tx:
            origins = [row[0] for row in tx.conn.exec_driver_sql(sql, tuple(params))]
        return sorted(origins)

    def renew_hosts(
        self, owner: str, origins: Sequence[str], *, lease_s: float, now: datetime | None = None
    ) -> list[str]:
        """Extend this owner's leases on ``origins`` (and on the URLs it holds there); returns those still ours."""
        if not origins:
            return []
        now = aware(now) or utcnow()
        until = now + timedelta(seconds=lease_s)
        with self._tx() as tx:
            kept = tx.conn.execute(
                update(Host).where(Host.origin.in_(origins), Host.lease_owner == owner)
                .values(lease_until=until).returning(Host.origin, Host.id)
            ).all()
            ids = [row[1] for row in kept]
            if ids:
                where, params = self._d.any_of("leases.host_id", ids)
                tx.conn.exec_driver_sql(
                    f"UPDATE leases SET lease_until = {self._d.p} WHERE leases.owner = {self._d.p} AND {where}",
                    (self._d.ts(until), owner, *params),
                )
        return sorted(row[0] for row in kept)

    def release_hosts(self, owner: str, origins: Sequence[str], *, now: datetime | None = None) -> None:
        """Give up this owner's host leases; ``lease_until`` stays as 'last served' for fair ordering."""
        if not origins:
            return
        now = aware(now) or utcnow()
        with self._tx() as tx:
            tx.conn.execute(
                update(Host).where(Host.origin.in_(origins), Host.lease_owner == owner)
                .values(lease_owner=None, lease_until=now)
            )

    def claim(
        self, owner: str, *, hosts: Sequence[str], per_host: int, lease_s: float,
        kinds: Sequence[UrlKind] = (UrlKind.DETAIL,), now: datetime | None = None,
    ) -> list[ClaimedUrl]:
        """Lease the best-scored due URLs, at most ``per_host`` per host, in one indexed statement.

        Due: QUEUED with no ``next_fetch_at`` or one in the past, or DONE whose revisit time has come. Returned
        by host origin, then score descending, then id (stable). Hosts leased by another owner are skipped. Two
        concurrent claimers never receive the same URL.
        """
        if per_host <= 0 or not hosts or not kinds:
            return []
        now = aware(now) or utcnow()
        until = now + timedelta(seconds=lease_s)
        d = self._d
        kind_values = [str(k) for k in kinds]
        with self._tx() as tx:
            where, params = d.any_of("origin", list(set(hosts)))
            host_rows = tx.conn.exec_driver_sql(
                f"SELECT id, origin FROM hosts WHERE {where} AND NOT (lease_owner IS NOT NULL"
                f" AND lease_owner <> {d.p} AND lease_until >= {d.p})",
                (*params, owner, d.ts(now)),
            ).all()
            origin_of = {host_id: origin for host_id, origin in host_rows}
            host_ids = sorted(origin_of, key=origin_of.__getitem__)  # claim order: host, then best first
            d.promote_revisits(tx.conn, host_ids, now, PROMOTE_BATCH)
            rows = d.claim_rows(tx.conn, host_ids, kind_values, per_host, now, owner, until)
            self._learn_sources(tx.conn, {row[-1] for row in rows})
        return self._claimed(rows, origin_of, until)

    def _learn_sources(self, conn: Connection, ids: set[int | None]) -> None:
        """Source id → kind for the claimed URLs' first sources (a few per host: cached, bounded)."""
        unknown = [i for i in ids if i is not None and i not in self._source_kinds]
        if not unknown:
            return
        if len(self._source_kinds) > SOURCE_KINDS_CACHED:
            self._source_kinds.clear()
        for start in range(0, len(unknown), 500):
            chunk = unknown[start:start + 500]
            rows = conn.execute(select(Source.id, Source.kind).where(Source.id.in_(chunk)))
            self._source_kinds.update({int(i): str(k) for i, k in rows})

    def _claimed(self, rows: list[Any], origin_of: dict[int, str], until: datetime) -> list[ClaimedUrl]:
        """Claimed rows as records, in one tight loop (a claim builds a thousand of them)."""
        dt = from_epoch_us if self._d.is_sqlite else self._d.dt  # SQLite: models.UtcDateTime's microseconds
        kind_of = _KIND_OF
        out = []
        source_kind = self._source_kinds.get
        for (url_id, path, host_id, kind, depth, score, attempts, etag, last_modified, content_hash,
             lastmod, last_fetched_at, changefreq, revisit_s, fetch_path, source_id) in rows:
            origin = origin_of[host_id]
            out.append(ClaimedUrl(
                url_id, origin + path, origin, kind_of[kind], depth, score, attempts, until, etag, last_modified,
                content_hash, None if lastmod is None else dt(lastmod),
                None if last_fetched_at is None else dt(last_fetched_at), changefreq, revisit_s,
                source_kind(source_id), None if fetch_path is None else origin + fetch_path,
            ))
        return out

    def release(self, owner: str, url_ids: Sequence[int]) -> int:
        """Unfetched claims back to the queue (attempts unchanged); returns how many were still ours."""
        if not url_ids:
            return 0
        d = self._d
        where, params = d.any_of("leases.url_id", list(url_ids))
        with self._tx() as tx:
            return d.release_leases(tx.conn, f"{where} AND leases.owner = {d.p}", (*params, owner))

    def requeue_expired(self, *, now: datetime | None = None) -> int:
        """Leases that outlived their holder return to the queue (the crash-resume path); returns URLs requeued.
        Expired host leases are cleared too."""
        now = aware(now) or utcnow()
        d = self._d
        with self._tx() as tx:
            count = d.release_leases(tx.conn, f"leases.lease_until < {d.p}", (d.ts(now),))
            tx.conn.execute(
                update(Host).where(Host.lease_owner.is_not(None), Host.lease_until < now).values(lease_owner=None)
            )
        if count:
            logger.info("requeued %d URLs whose lease expired", count)
        return count

    def lease_owners(self) -> list[str]:
        """Every owner holding a URL or host lease now: a rerun asks which of them are dead."""
        with self._tx(write=False) as tx:
            owners = {o for o in tx.conn.execute(select(Lease.owner).distinct()).scalars() if o}
            owners |= {o for o in tx.conn.execute(select(Host.lease_owner).distinct()).scalars() if o}
        return sorted(owners)

    def release_owner(self, owner: str) -> int:
        """Every lease ``owner`` holds goes back (its process is known dead); returns URLs requeued."""
        d = self._d
        with self._tx() as tx:
            count = d.release_leases(tx.conn, f"leases.owner = {d.p}", (owner,))
            tx.conn.execute(update(Host).where(Host.lease_owner == owner).values(lease_owner=None, lease_until=None))
        return count

    def make_due(self, origins: Sequence[str], *, now: datetime | None = None) -> int:
        """Finished URLs and discovery documents of ``origins`` become due now (an off-schedule re-crawl)."""
        now = aware(now) or utcnow()
        with self._tx() as tx:
            host_ids = select(Host.id).where(Host.origin.in_(list(origins))).scalar_subquery()
            result = tx.conn.execute(
                update(Url).where(Url.host_id.in_(host_ids), Url.state == UrlState.DONE.value)
                .values(next_fetch_at=now)
            )
            for origin in origins:
                tx.conn.execute(
                    update(Document).where(Document.url.startswith(origin + "/", autoescape=True))
                    .values(next_fetch_at=now)
                )
        return int(result.rowcount)

    def changes_since(self, since: datetime, *, examples: int = 50) -> dict[str, Any]:
        """Detail URLs first seen, and URLs found gone, at or after ``since``: what a re-crawl reports."""
        since = aware(since) or since
        with self._tx(write=False) as tx:
            joined = select(_full_url).select_from(Url).join(Host, Host.id == Url.host_id)
            new_q = joined.where(Url.first_seen >= since, Url.kind == UrlKind.DETAIL.value)
            gone_q = joined.where(Url.gone_at >= since)
            new = tx.conn.execute(select(func.count()).select_from(new_q.subquery())).scalar_one()
            gone = tx.conn.execute(select(func.count()).select_from(gone_q.subquery())).scalar_one()
            new_urls = list(tx.conn.execute(new_q.order_by(Url.id).limit(examples)).scalars())
            gone_urls = list(tx.conn.execute(gone_q.order_by(Url.id).limit(examples)).scalars())
        return {"new": int(new), "gone": int(gone), "new_urls": new_urls, "gone_urls": gone_urls}

    def url_high_water(self) -> int:
        """The largest URL id: it grows exactly when URLs are added (ids are never reused)."""
        with self._tx(write=False) as tx:
            return self._d.max_url_id(tx.conn)

    def due_count(self, *, kinds: Sequence[str] = ("detail",), now: datetime | None = None) -> int:
        """URLs an extraction would fetch now (not counting those leased): the denominator of its progress."""
        now = aware(now) or utcnow()
        with self._tx(write=False) as tx:
            queued = tx.conn.execute(
                select(func.count()).select_from(QueueEntry).where(
                    QueueEntry.kind.in_(list(kinds)), QueueEntry.due_at.is_(None) | (QueueEntry.due_at <= now))
            ).scalar_one()
            revisits = tx.conn.execute(
                select(func.count()).select_from(Url).where(
                    Url.kind.in_(list(kinds)), Url.state == UrlState.DONE.value, Url.next_fetch_at <= now)
            ).scalar_one()
        return int(queued) + int(revisits)

    def next_due_at(self, *, kinds: Sequence[str] = ("detail",), now: datetime | None = None) -> datetime | None:
        """When queued work next becomes claimable on a host that is not parked: a backed-off retry coming due,
        or the end of a host's back-off (``blocked_until``) with URLs due before it. A retry due on a host that is
        still backing off then is not claimable: waking for it would find nothing to do."""
        now = aware(now) or utcnow()
        kind_values = list(kinds)
        with self._tx(write=False) as tx:
            retry = tx.conn.execute(
                select(func.min(QueueEntry.due_at)).select_from(QueueEntry)
                .join(Host, Host.id == QueueEntry.host_id).where(
                    QueueEntry.kind.in_(kind_values), QueueEntry.due_at > now, Host.parked_reason.is_(None),
                    or_(Host.blocked_until.is_(None), Host.blocked_until <= QueueEntry.due_at),
                )
            ).scalar_one_or_none()
            waiting = exists().where(
                QueueEntry.host_id == Host.id, QueueEntry.kind.in_(kind_values),
                or_(QueueEntry.due_at.is_(None), QueueEntry.due_at <= Host.blocked_until),
            )
            unblocked = tx.conn.execute(
                select(func.min(Host.blocked_until)).where(
                    Host.blocked_until > now, Host.parked_reason.is_(None), waiting)
            ).scalar_one_or_none()
        moments = [aware(value) for value in (retry, unblocked) if isinstance(value, datetime)]
        return min((m for m in moments if m is not None), default=None)

    def sample_urls(self, *, kind: str, limit: int) -> list[str]:
        """Some known URLs of ``kind`` (the newest first), e.g. to re-learn a site's detail URL shapes."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(_full_url).select_from(Url).join(Host, Host.id == Url.host_id).where(Url.kind == kind)
                .order_by(Url.id.desc()).limit(limit)
            ).scalars()
            return list(rows)

    # --- extraction: completions --------------------------------------------------------------------------

    def complete(
        self, owner: str, completion: Completion, outlinks: Sequence[DiscoveredUrl] = (), *, run_id: int | None = None
    ) -> None:
        """Record one outcome with its outlinks atomically; ``LeaseLost`` (nothing written) if the lease is gone."""
        result = self.complete_many(owner, [(completion, outlinks)], run_id=run_id)
        if result.lost:
            raise LeaseLost(f"URL id {completion.url_id} is no longer leased by {owner!r}; nothing was written")

    def complete_many(
        self, owner: str, items: Sequence[tuple[Completion, Sequence[DiscoveredUrl]]], *, run_id: int | None = None,
        demote: Sequence[tuple[int, int]] = (), vanished: Mapping[int, Vanished] | None = None,
        feeds: Sequence[str] = (),
    ) -> CompleteResult:
        """Record outcomes, pages, fetches and outlinks in ONE transaction (all or nothing).

        ``vanished`` (url id → what that listing page may have stopped naming) re-checks, for each completion
        written, the URLs it no longer names (see ``_recheck_vanished``). ``feeds`` found on these pages are
        recorded as discovery documents not yet read, so a kill right after this commit cannot lose them: the
        next discovery of their host reads every such document.

        ``demote`` holds (url id, new holder id) pairs: URLs that held a content which a URL of this batch now
        holds (the one the site names as canonical). Each becomes the new holder's duplicate in the same
        transaction, and so do its own duplicates, but only where the new holder's completion is written and the
        URL is still DONE (``demoted`` counts them).

        Completions whose URL is no longer LEASED by ``owner`` are skipped and counted in ``lost``. A FAILED
        completion goes back to QUEUED (due at ``completion.next_fetch_at``) while attempts stay below
        ``settings.politeness.max_attempts``, and is FAILED for good after that; any other outcome resets
        attempts. Validators and content_hash are replaced on a 2xx response and kept otherwise (a 304 or an
        error says nothing new about them).
        """
        if not items:
            return CompleteResult(0, 0, 0, AddResult(0, 0, 0))
        seen: set[int] = set()
        for completion, _ in items:
            check_completion(completion)
            if completion.url_id in seen:
                raise InvalidRecord(f"URL id {completion.url_id} appears twice in one complete_many batch")
            seen.add(completion.url_id)
        outlink_batches = {c.url_id: merge(links) for c, links in items}
        d = self._d
        max_attempts = self.settings.politeness.max_attempts
        level = self.settings.store.compress_level
        with self._tx() as tx:
            conn = tx.conn
            ids = [c.url_id for c, _ in items]
            where, params = d.any_of("l.url_id", ids)
            held = {
                row[0]: row
                for row in conn.exec_driver_sql(
                    "SELECT l.url_id, u.attempts, u.etag, u.last_modified, u.content_hash, u.host_id, u.kind, u.score"
                    f" FROM leases l JOIN urls u ON u.id = l.url_id WHERE {where} AND l.owner = {d.p}{d.lock_rows}",
                    (*params, owner),
                )
            }
            mine = [(c, links) for c, links in items if c.url_id in held]
            lost_ids = tuple(c.url_id for c, _ in items if c.url_id not in held)
            if held:
                where_held, held_params = d.any_of("url_id", list(held))
                conn.exec_driver_sql(f"DELETE FROM leases WHERE {where_held}", tuple(held_params))
            page_ids: dict[int, int] = {}
            pages = [(c.url_id, c.fetched_at, c.page) for c, _ in mine if c.page is not None]
            if pages:
                inserted = conn.execute(
                    insert(Page).returning(Page.id, sort_by_parameter_order=True),
                    [page_row(url_id, fetched_at, page, level) for url_id, fetched_at, page in pages],
                ).all()
                page_ids = {url_id: row[0] for (url_id, _, _), row in zip(pages, inserted, strict=True)}
            updates = []
            fetch_rows = []
            retries = []
            for c, _ in mine:
                _, attempts, old_etag, old_lm, old_hash, host_id, kind, score = held[c.url_id]
                o = url_outcome(c, attempts, old_etag, old_lm, old_hash, max_attempts)
                if o.state == "queued":  # a retry: back in the queue, due after its back-off
                    retries.append((host_id, kind, -score, c.url_id, d.ts(o.next_fetch_at)))
                updates.append((
                    o.state, o.status, o.etag, o.last_modified, o.content_hash, d.ts(o.next_fetch_at), o.revisit_s,
                    o.attempts, o.error_class, o.error, d.ts(o.changed_at), d.ts(o.gone_at), o.final_url,
                    o.duplicate_of, d.ts(o.last_fetched_at), c.url_id,
                ))
                fetch_rows.append({
                    "url_id": c.url_id, "run_id": run_id, "fetched_at": c.fetched_at, "status": c.status,
                    "outcome": outcome(c), "bytes": c.bytes_read,
                    "error_class": c.error_class.value if c.error_class else None,
                    "page_id": page_ids.get(c.url_id),
                })
            if updates:
                conn.exec_driver_sql(_URL_UPDATE.replace("?", d.p), updates)
                conn.execute(insert(Fetch), fetch_rows)
            if retries:
                conn.exec_driver_sql(d.enqueue_sql, retries)
            links = [m for c, _ in mine for m in outlink_batches[c.url_id]]
            added = AddResult(0, 0, 0)
            if links:
                now = max(c.fetched_at for c, _ in mine)
                added = self._upsert(tx, fold(links), aware(now) or utcnow())
            demoted = self._demote(conn, [(old, new) for old, new in demote if new in held])
            for url_id, gone_from in (vanished or {}).items():
                if url_id in held:
                    self._recheck_vanished(conn, gone_from)
            if feeds and mine:
                self._note_documents(conn, feeds, kind="feed")
        if lost_ids:
            logger.warning("%d completions skipped: lease lost by %s", len(lost_ids), owner)
        return CompleteResult(len(mine), len(lost_ids), len(page_ids), added, lost_ids, demoted)

    @staticmethod
    def _demote(conn: Connection, pairs: Sequence[tuple[int, int]]) -> int:
        """(url id, new holder id): a DONE URL becomes the new holder's duplicate, and the URLs that were its
        duplicates follow it, so ``duplicate_of`` always names a URL that holds the content."""
        demoted = 0
        for url_id, holder in pairs:
            if url_id == holder:
                continue
            changed = conn.execute(
                update(Url).where(Url.id == url_id, Url.state == UrlState.DONE.value)
                .values(state=UrlState.DUPLICATE.value, duplicate_of=holder)
            ).rowcount
            if changed:
                demoted += changed
                conn.execute(update(Url).where(Url.duplicate_of == url_id).values(duplicate_of=holder))
        return demoted

    def duplicates_of(
        self, hashes: Sequence[str], *, exclude_ids: Sequence[int] = (), now: datetime | None = None
    ) -> dict[str, int]:
        """content_hash -> the lowest id of a URL already holding that content, as far as we know now.

        A holder is DONE and not yet due again: a URL due for a re-fetch (or being re-fetched) may have moved or
        vanished since, so its old hash vouches for nothing, and one whose last answer was a permanent redirect
        holds no content at all; the page at a moved URL's new address is never a duplicate of the old one."""
        if not hashes:
            return {}
        now = aware(now) or utcnow()
        query = (
            select(Url.content_hash, func.min(Url.id))
            .where(
                Url.content_hash.in_(list(set(hashes))),
                Url.state == UrlState.DONE.value,
                or_(Url.next_fetch_at.is_(None), Url.next_fetch_at > now),
                or_(Url.last_status.is_(None), Url.last_status.not_in(PERMANENT_REDIRECTS)),
            )
            .group_by(Url.content_hash)
        )
        if exclude_ids:
            query = query.where(Url.id.not_in(list(exclude_ids)))
        with self._tx(write=False) as tx:
            return {str(h): int(i) for h, i in tx.conn.execute(query)}

    def declared_canonicals(self, url_ids: Sequence[int]) -> dict[int, str]:
        """url id -> the canonical URL its newest stored page declares (rel=canonical), where it declares one."""
        if not url_ids:
            return {}
        newer = aliased(Page)
        query = select(Page.url_id, Page.canonical_url).where(
            Page.url_id.in_(list(url_ids)), Page.canonical_url.is_not(None),
            ~exists().where(newer.url_id == Page.url_id, newer.id > Page.id),
        )
        with self._tx(write=False) as tx:
            return {int(url_id): str(canonical) for url_id, canonical in tx.conn.execute(query)}

    # --- hosts: robots, politeness, lastmod truthfulness --------------------------------------------------

    def load_robots(self, origin: str) -> RobotsState | None:
        """The persisted robots.txt state of ``origin``, or None when it was never fetched."""
        with self._tx(write=False) as tx:
            host = self._host_row(tx.conn, origin)
        if host is None or (host["robots_fetched_at"] is None and host["robots_status"] is None):
            return None
        return RobotsState(
            origin=origin, status=host["robots_status"], fetched_at=host["robots_fetched_at"],
            expires_at=host["robots_expires_at"], body=host["robots_body"], etag=host["robots_etag"],
            last_modified=host["robots_last_modified"],
            error_class=ErrorClass(host["robots_error"]) if host["robots_error"] else None,
        )

    def save_robots(self, state: RobotsState) -> None:
        values = {
            "robots_status": state.status, "robots_fetched_at": aware(state.fetched_at),
            "robots_expires_at": aware(state.expires_at), "robots_body": state.body, "robots_etag": state.etag,
            "robots_last_modified": state.last_modified,
            "robots_error": state.error_class.value if state.error_class else None,
        }
        self._update_host(state.origin, values)

    def host_policy(self, origin: str) -> HostPolicy | None:
        with self._tx(write=False) as tx:
            host = self._host_row(tx.conn, origin)
        if host is None:
            return None
        return HostPolicy(
            origin=origin, crawl_delay_s=host["crawl_delay_s"], request_rate_s=host["request_rate_s"],
            concurrency_limit=host["concurrency_limit"], blocked_until=host["blocked_until"],
            parked_reason=host["parked_reason"], failures=host["failures"], next_allowed_at=host["next_allowed_at"],
        )

    def save_host_policy(self, policy: HostPolicy) -> None:
        values = {
            "crawl_delay_s": policy.crawl_delay_s, "request_rate_s": policy.request_rate_s,
            "concurrency_limit": policy.concurrency_limit, "blocked_until": aware(policy.blocked_until),
            "parked_reason": policy.parked_reason, "failures": policy.failures,
            "next_allowed_at": aware(policy.next_allowed_at),
        }
        self._update_host(policy.origin, values)

    def set_moved_to(self, origin: str, target: str) -> None:
        """Record that seed host ``origin`` redirects its homepage to ``target`` (an origin)."""
        if not ORIGIN.fullmatch(target):
            raise InvalidRecord(f"origin {target!r} is not scheme://host[:port] (http or https)")
        self._update_host(origin, {"moved_to": target})

    def moved_hosts(self) -> dict[str, str]:
        """Seed origin -> the origin it moved to, for every seed host found redirecting (``set_moved_to``)."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(select(Host.origin, Host.moved_to).where(Host.moved_to.is_not(None))).all()
        return {origin: target for origin, target in rows if target is not None}

    def _update_host(self, origin: str, values: dict[str, Any]) -> None:
        if not ORIGIN.fullmatch(origin):
            raise InvalidRecord(f"origin {origin!r} is not scheme://host[:port] (http or https)")
        with self._tx() as tx:
            host_id = self._ensure_hosts(tx, [origin])[origin]
            tx.conn.execute(update(Host).where(Host.id == host_id).values(**values))

    def record_lastmod_check(self, origin: str, *, predicted_change: bool, changed: bool) -> None:
        """Count one re-fetch whose lastmod made a prediction: a real change is a check, a hit when the lastmod
        announced it (``revisit.truthfulness``). Unchanged content says nothing about missed changes."""
        if changed:
            self.add_lastmod_checks({origin: (1, 1 if predicted_change else 0)})

    def add_lastmod_checks(self, tallies: dict[str, tuple[int, int]]) -> None:
        """Add (checks, hits) per host in one transaction: extraction tallies them per batch, not per URL."""
        tallies = {origin: pair for origin, pair in tallies.items() if pair[0]}
        if not tallies:
            return
        with self._tx() as tx:
            host_ids = self._ensure_hosts(tx, list(tallies))
            for origin, (checks, hits) in tallies.items():
                tx.conn.execute(
                    update(Host).where(Host.id == host_ids[origin]).values(
                        lastmod_checks=Host.lastmod_checks + checks, lastmod_hits=Host.lastmod_hits + hits
                    )
                )

    def lastmod_truthfulness(self, origin: str) -> tuple[int, int]:
        """(checks, hits): how often this host's newer lastmod came with a real content change."""
        with self._tx(write=False) as tx:
            row = tx.conn.execute(
                select(Host.lastmod_checks, Host.lastmod_hits).where(Host.origin == origin)
            ).first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # --- documents and runs -------------------------------------------------------------------------------

    def get_document(self, url: str) -> DocumentState | None:
        with self._tx(write=False) as tx:
            doc = tx.conn.execute(select(Document.__table__).where(Document.url == url)).mappings().first()
        return None if doc is None else _document_state(doc)

    def host_documents(self, origin: str, *, kinds: Sequence[str], limit: int = 1_000) -> list[DocumentState]:
        """Discovery documents of ``origin`` of ``kinds`` (e.g. the feeds to poll again), oldest fetch first."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Document.__table__)
                .where(Document.url.startswith(origin + "/", autoescape=True), Document.kind.in_(list(kinds)))
                .order_by(Document.fetched_at, Document.id).limit(limit)
            ).mappings().all()
        return [_document_state(row) for row in rows]

    def save_document(self, doc: DocumentState, *, vanished: Vanished | None = None) -> int:
        """Insert or replace the state of one discovery document (keyed by URL). With ``vanished`` (the document
        was just read in full), the URLs it named at its previous full read and no longer names are made due
        now, in the same transaction: a rerun after a kill finds either both or neither. Returns how many."""
        values = {
            "kind": doc.kind, "status": doc.status, "etag": doc.etag, "last_modified": doc.last_modified,
            "content_hash": doc.content_hash, "fetched_at": aware(doc.fetched_at),
            "next_fetch_at": aware(doc.next_fetch_at), "url_count": doc.url_count, "error": doc.error,
            "children": list(doc.children) or None, "read_at": aware(doc.read_at),
        }
        rechecked = 0
        with self._tx() as tx:
            if vanished is not None:
                rechecked = self._recheck_vanished(tx.conn, vanished)
            changed = tx.conn.execute(update(Document).where(Document.url == doc.url).values(**values)).rowcount
            if not changed:
                tx.conn.execute(insert(Document).values(url=doc.url, **values))
        return rechecked

    def _note_documents(self, conn: Connection, urls: Sequence[str], *, kind: str) -> None:
        """Documents found (feeds a page links to) that the frontier does not hold yet: rows with no fetch, so due.
        Two hosts' discoveries may name one feed at once: a conflict on the URL leaves the first."""
        d = self._d
        sql = d.insert_ignore("documents", ("url", "kind", "url_count"), ("url",))
        conn.exec_driver_sql(sql, [(url, kind, 0) for url in dict.fromkeys(urls)])

    def last_read_at(self, url_id: int) -> datetime | None:
        """When ``url_id`` last answered 200 (its last full read), from the fetch log."""
        with self._tx(write=False) as tx:
            moment = tx.conn.execute(
                select(Fetch.fetched_at).where(Fetch.url_id == url_id, Fetch.status == 200)
                .order_by(Fetch.fetched_at.desc()).limit(1)
            ).scalar_one_or_none()
        return aware(moment) if moment is not None else None

    def _recheck_vanished(self, conn: Connection, vanished: Vanished) -> int:
        """Finished URLs of ``vanished.origins`` found through ``vanished.label`` and last named in
        ``[named_since, seen_before)``: named by the document's previous full read, not by this one (nor by
        anything read since ``seen_before``). They lose their published lastmod (no lastmod may say they are
        unchanged any more) and, when finished, are due now, so the run asks them (conditionally) and a 404/410
        marks them gone (a URL still waiting in the queue is asked anyway).
        The window makes it once: the next read's ``named_since`` is this read, later than their last naming.
        Without a previous full read on record (a document stored before ``read_at`` existed), URLs still
        carrying a lastmod stand in for "named by the last read"."""
        sources = select(Source.id).where(Source.label.in_(list(vanished.labels))).scalar_subquery()
        paired = select(UrlSource.url_id).where(UrlSource.source_id.in_(sources))
        named = (Url.last_seen >= aware(vanished.named_since) if vanished.named_since is not None
                 else Url.lastmod.is_not(None))
        total = 0
        for origin in vanished.origins:
            host_id = conn.execute(select(Host.id).where(Host.origin == origin)).scalar_one_or_none()
            if host_id is None:
                continue
            result = conn.execute(
                update(Url).where(
                    Url.host_id == host_id, named, Url.last_seen < aware(vanished.seen_before),
                    or_(Url.source_id.in_(sources), Url.id.in_(paired)),
                ).values(lastmod=None, next_fetch_at=case(
                    (Url.state == UrlState.DONE.value, literal(aware(vanished.now), Url.next_fetch_at.type)),
                    else_=Url.next_fetch_at,
                ))
            )
            total += int(result.rowcount)
        return total

    def start_run(self, phase: str, *, profile: dict[str, Any] | None = None, owner: str | None = None) -> int:
        with self._tx() as tx:
            row = tx.conn.execute(
                insert(Run).values(phase=phase, started_at=utcnow(), status="running", profile=profile,
                                   owner=owner).returning(Run.id)
            ).one()
        return int(row[0])

    def resume_or_start_run(
        self, phase: str, *, profile: dict[str, Any] | None = None, owner: str | None = None
    ) -> int:
        """The newest unfinished run of ``phase`` with the same profile (a crashed one, resumed), or a new run."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Run.id, Run.profile).where(Run.phase == phase, Run.status == "running")
                .order_by(Run.id.desc()).limit(20)
            ).all()
        for run_id, stored in rows:
            if stored == profile:
                return int(run_id)
        return self.start_run(phase, profile=profile, owner=owner)

    def run_started_at(self, run_id: int) -> datetime | None:
        with self._tx(write=False) as tx:
            value = tx.conn.execute(select(Run.started_at).where(Run.id == run_id)).scalar_one_or_none()
        return aware(value) if isinstance(value, datetime) else None

    def finish_run(self, run_id: int, *, status: str, counters: dict[str, Any]) -> None:
        with self._tx() as tx:
            changed = tx.conn.execute(
                update(Run).where(Run.id == run_id).values(finished_at=utcnow(), status=status, counters=counters)
            ).rowcount
        if not changed:
            raise InvalidRecord(f"run {run_id} does not exist")

    def last_profile(self, phase: str | None = None) -> dict[str, Any] | None:
        """The profile of the most recent run (of ``phase``) that recorded one."""
        query = select(Run.profile).where(Run.profile.is_not(None)).order_by(Run.id.desc()).limit(1)
        if phase is not None:
            query = query.where(Run.phase == phase)
        with self._tx(write=False) as tx:
            row = tx.conn.execute(query).first()
        return None if row is None or row[0] is None else dict(row[0])

    def last_run(self, phase: str) -> dict[str, Any] | None:
        """The newest finished run of ``phase`` with its counters (per-host diagnostics for ``harvester status``)."""
        with self._tx(write=False) as tx:
            run = tx.conn.execute(
                select(Run.__table__).where(Run.phase == phase, Run.finished_at.is_not(None))
                .order_by(Run.id.desc()).limit(1)
            ).mappings().first()
        return None if run is None else dict(run)

    def get_run(self, run_id: int) -> dict[str, Any] | None:
        with self._tx(write=False) as tx:
            run = tx.conn.execute(select(Run.__table__).where(Run.id == run_id)).mappings().first()
        return None if run is None else dict(run)

    # --- reporting ----------------------------------------------------------------------------------------

    def stats(self) -> StoreStats:
        """Counts by state and kind, and per host by state with its parked/blocked/lease state."""
        with self._tx(write=False) as tx:
            conn = tx.conn
            by_state = {s: int(n) for s, n in conn.exec_driver_sql("SELECT state, count(*) FROM urls GROUP BY state")}
            by_kind = {k: int(n) for k, n in conn.exec_driver_sql("SELECT kind, count(*) FROM urls GROUP BY kind")}
            per_host = conn.exec_driver_sql(
                "SELECT host_id, state, count(*) FROM urls GROUP BY host_id, state"
            ).all()
            # A leased URL's row still says QUEUED: report it as LEASED.
            leased = conn.exec_driver_sql(
                "SELECT u.host_id, u.state, count(*) FROM leases l JOIN urls u ON u.id = l.url_id"
                " GROUP BY u.host_id, u.state"
            ).all()
            hosts = conn.execute(
                select(Host.id, Host.origin, Host.parked_reason, Host.blocked_until, Host.lease_owner,
                       Host.lease_until, Host.failures)
            ).all()
            pages = int(conn.exec_driver_sql("SELECT count(*) FROM pages").scalar_one())
            fetches = int(conn.exec_driver_sql("SELECT count(*) FROM fetches").scalar_one())
        info: dict[int, dict[str, Any]] = {}
        for host_id, origin, parked, blocked, lease_owner, lease_until, failures in hosts:
            info[host_id] = {
                "origin": origin, "states": {}, "total": 0, "parked_reason": parked,
                "blocked_until": blocked.isoformat() if blocked else None, "lease_owner": lease_owner,
                "lease_until": lease_until.isoformat() if lease_until else None, "failures": failures,
            }
        for host_id, state, n in per_host:
            entry = info[host_id]
            entry["states"][state] = int(n)
            entry["total"] += int(n)
        for host_id, state, n in leased:
            states = info[host_id]["states"]
            for key, delta in ((state, -int(n)), (UrlState.LEASED.value, int(n))):
                states[key] = states.get(key, 0) + delta
                by_state[key] = by_state.get(key, 0) + delta
                if not states[key]:
                    del states[key]
                if not by_state[key]:
                    del by_state[key]
        return StoreStats(
            total=sum(by_state.values()), by_state=by_state, by_kind=by_kind,
            hosts={entry.pop("origin"): entry for entry in info.values()}, pages=pages, fetches=fetches,
        )

    def run_fetch_counts(self, run_id: int) -> dict[str, dict[str, int]]:
        """Per host for one run: fetched, not_modified, gone, failed, and failures by ``error:<class>``."""
        query = (
            select(Host.origin, Fetch.outcome, Fetch.error_class, func.count())
            .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
            .where(Fetch.run_id == run_id).group_by(Host.origin, Fetch.outcome, Fetch.error_class)
        )
        out: dict[str, dict[str, int]] = {}
        with self._tx(write=False) as tx:
            for origin, outcome, error_class, n in tx.conn.execute(query):
                counts = out.setdefault(origin, {"fetched": 0, "not_modified": 0, "gone": 0, "failed": 0})
                counts[outcome] = counts.get(outcome, 0) + int(n)
                if error_class:
                    key = f"error:{error_class}"
                    counts[key] = counts.get(key, 0) + int(n)
        return out

    def iter_pages(
        self, *, since: datetime | None = None, latest: bool = False, batch: int = 500
    ) -> Iterator[StoredPage]:
        """Stored pages in fetch order, decompressed, ``batch`` rows per query (keyset pagination, so memory is
        bounded and no connection or snapshot is held between batches). ``latest``: only the newest version of
        each URL, and none of a URL that is gone, a duplicate, disallowed, skipped or moved since (a snapshot of the
        site as last seen)."""
        last_id = 0
        newer = aliased(Page)
        while True:
            query = (
                _pages_query().where(Page.id > last_id)
                .order_by(Page.id).limit(batch)
            )
            if since is not None:
                query = query.where(Page.fetched_at >= since)
            if latest:
                query = query.where(
                    Url.state.not_in(_NOT_CURRENT),
                    # A URL that answers with a permanent redirect now: its page lives at the target's address.
                    or_(Url.last_status.is_(None), Url.last_status.not_in(PERMANENT_REDIRECTS)),
                    ~exists().where(newer.url_id == Page.url_id, newer.id > Page.id),  # ix_pages_url_id
                )
            with self._tx(write=False) as tx:
                rows = tx.conn.execute(query).all()
            if not rows:
                return
            for row in rows:
                yield stored_page(row)
            last_id = rows[-1].id

    def iter_fetches(self, *, since: datetime | None = None, batch: int = 500) -> Iterator[StoredFetch]:
        """Completed fetches in order, each with its URL and, when it stored a body, its page (for WARC)."""
        last_id = 0
        while True:
            query = (
                select(Fetch.__table__, _full_url).join(Url, Url.id == Fetch.url_id)
                .join(Host, Host.id == Url.host_id).where(Fetch.id > last_id)
                .order_by(Fetch.id).limit(batch)
            )
            if since is not None:
                query = query.where(Fetch.fetched_at >= since)
            with self._tx(write=False) as tx:
                rows = tx.conn.execute(query).all()
                page_ids = [r.page_id for r in rows if r.page_id is not None]
                pages = {}
                if page_ids:
                    for prow in tx.conn.execute(
                        _pages_query().where(Page.id.in_(page_ids))
                    ):
                        pages[prow.id] = stored_page(prow)
            if not rows:
                return
            for r in rows:
                yield StoredFetch(
                    fetch_id=r.id, url_id=r.url_id, url=r.url, fetched_at=r.fetched_at, status=r.status,
                    outcome=r.outcome, bytes=r.bytes, error_class=r.error_class, run_id=r.run_id,
                    page=pages.get(r.page_id) if r.page_id is not None else None,
                )
            last_id = rows[-1].id

    def url_states(self) -> dict[str, tuple[str, str | None]]:
        """url -> (state, content_hash) for every URL: for tests and crash checks, not for big frontiers."""
        with self._tx(write=False) as tx:
            rows = tx.conn.exec_driver_sql(
                "SELECT h.origin, u.path, CASE WHEN l.url_id IS NULL THEN u.state ELSE 'leased' END, u.content_hash"
                " FROM urls u JOIN hosts h ON h.id = u.host_id LEFT JOIN leases l ON l.url_id = u.id"
            )
            return {origin + path: (state, content_hash) for origin, path, state, content_hash in rows}

    def url_info(self, url: str) -> dict[str, Any] | None:
        """Every column of one URL row (times as aware datetimes), for diagnostics and tests."""
        with self._tx(write=False) as tx:
            url_id = self._url_id(tx.conn, url)
            if url_id is None:
                return None
            row = dict(tx.conn.execute(select(Url.__table__).where(Url.id == url_id)).mappings().one())
            lease = tx.conn.execute(select(Lease.owner, Lease.lease_until).where(Lease.url_id == url_id)).first()
        row["lease_owner"], row["lease_until"] = (None, None) if lease is None else (lease[0], aware(lease[1]))
        if lease is not None:
            row["state"] = UrlState.LEASED.value
        return {"url": url, **row}


# --- helpers (no SQL) ----------------------------------------------------------------------------------------
