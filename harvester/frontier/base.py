"""The frontier's core: the ``Database`` (one engine, one dialect, one transaction helper, fixed once open) every
concern shares, and ``Part``, the base of a concern.

Each concern of the frontier (found URLs, the queue and leases, outcomes, hosts, documents, runs, cycles, reports)
is an object of its own module that owns its state (its caches) and runs its queries in ``Database.tx``;
``store.FrontierStore`` builds them over one ``Database``. Only the frontier speaks SQL.
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

from sqlalchemy import Connection, Engine, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from harvester.errors import DatabaseUnavailable, InvalidRecord, SchemaOutOfDate, StoreError, WriteConflict
from harvester.frontier import migrate
from harvester.frontier.dialects import Dialect, dialect_for, disk_full, make_engine
from harvester.frontier.models import Host, Url
from harvester.frontier.rows import split_url
from harvester.owners import LOCAL_LIVENESS, Liveness
from harvester.settings import DEFAULT_DATABASE_URL, Settings

logger = logging.getLogger(__name__)

CHUNK = 5000
"""Most rows per statement (bounded by SQLite's parameter limit); settings.discovery.batch_size if smaller."""


FULL_URL = (Host.origin + Url.path).label("url")




UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03"})
"""PostgreSQL's admin_shutdown, crash_shutdown and cannot_connect_now; with class 08 (connection exception),
the server is away, not the unit of work wrong."""


CONFLICT_STATES = frozenset({"40P01", "40001"})
"""PostgreSQL's deadlock_detected and serialization_failure: the transaction was rolled back, ask it again."""


def _unreachable(exc: DBAPIError) -> bool:
    """The error says the server is away (refused, restarting, connection dropped), not that the work is wrong."""
    if exc.connection_invalidated:
        return True
    state = getattr(exc.orig, "sqlstate", None)
    if state is None:  # no answer from a server at all: refused, reset, closed
        return type(exc.orig).__name__ in ("OperationalError", "InterfaceError")
    return state.startswith("08") or state in UNREACHABLE_STATES




CREATE_HINT = "a harvest creates it (`harvester harvest SEED --db DATABASE`), or `harvester db upgrade --db DATABASE`"


def _where(settings: Settings) -> str:
    """Which setting named the database, for a message about one that is not there."""
    if settings.database_url == DEFAULT_DATABASE_URL:
        return "the default, ./.harvester/harvester.db; name another with --db or HARVESTER_DATABASE_URL"
    return "--db or HARVESTER_DATABASE_URL"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None: another database, or SQLite in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def read_only_mode(path: Path) -> str | None:
    """How to open a SQLite file read-only, or None to open it as usual (a reader of a writable file too: a
    read-only connection would leave its ``-wal`` and ``-shm`` files behind).

    "ro" (``?mode=ro``): the file cannot be written; SQLite still shares the WAL index (``-shm``) beside it with
    any writer. "immutable" (``?immutable=1``): its directory cannot be written either (a read-only mount) and
    holds no ``-shm``, so none can be made, and nobody can be writing it."""
    if not path.is_file():
        return None
    directory = path.parent if str(path.parent) else Path(".")
    if not os.access(directory, os.W_OK):
        # A writer that made its WAL index before the directory was closed to us shares it: read through it.
        return "ro" if Path(f"{path}-shm").is_file() else "immutable"
    if not os.access(path, os.W_OK):
        return "ro"
    return None


DAMAGE_CODES = frozenset({11, 26})
"""SQLITE_CORRUPT and SQLITE_NOTADB: the file's bytes are wrong where the read went, not the statement."""

DAMAGED_HINT = ("the file is damaged there: `harvester db check` names the damaged parts, `harvester export` writes "
                "out what can still be read")


def damaged_file(error: BaseException | None) -> bool:
    """``error`` (a driver's) says the SQLite file is damaged where it was read."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    code = getattr(error, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF in DAMAGE_CODES) or "malformed" in str(error)


REFUSALS = (
    ("does not exist", "create that database (CREATE DATABASE, or createdb), then `harvester db upgrade --db URL`; "
                       "or correct its name in the URL"),
    ("password authentication failed", "correct the user name or password in the URL (postgresql://USER:PASSWORD@"
                                       "HOST:PORT/DATABASE)"),
    ("no pg_hba.conf entry", "allow this client in the server's pg_hba.conf, or connect as a user it allows"),
    ("authentication failed", "correct the credentials in the URL (postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"),
)
"""A server that answered and refused for good: waiting for it would change nothing (PostgreSQL's FATAL at
connect carries no SQLSTATE through psycopg, so the message says which)."""


def refusal_fix(exc: DBAPIError) -> str | None:
    """What to do about a database that cannot exist as asked (no such database or role, bad password), or None
    when the error is another one."""
    text = str(exc.orig)
    if "FATAL" not in text:
        return None
    for needle, fix in REFUSALS:
        if needle in text:
            reason = text.rsplit("FATAL:", 1)[-1].strip()
            return f"{reason}: {fix}"
    return None


@dataclass(slots=True)
class Transaction:
    """An open transaction plus the ids it created, published to their cache (``keys.Keys``) only after commit."""

    conn: Connection
    hosts: dict[str, int] = field(default_factory=dict)
    sources: dict[str, int] = field(default_factory=dict)
    committed: list[Callable[[Transaction], None]] = field(default_factory=list)
    """Called with this transaction once it has committed (never after a rollback)."""

    def on_commit(self, action: Callable[[Transaction], None]) -> None:
        if action not in self.committed:
            self.committed.append(action)


class Database:
    """The engine, the dialect and the transaction every concern of the frontier runs in; nothing in it changes
    after ``open``, so the concerns share it without sharing state. Build a store with ``FrontierStore.open``."""

    def __init__(self, settings: Settings, engine: Engine) -> None:
        self.settings = settings
        self.engine = engine
        self.dialect = dialect_for(engine.dialect.name)
        self.chunk = max(1, min(settings.discovery.batch_size, CHUNK))
        self.liveness: Liveness = LOCAL_LIVENESS
        """Which owners are alive (``owners.Liveness``; on PostgreSQL ``frontier.liveness``, set by ``open``)."""
        self.read_only = False
        """Opened read-only (``open``): a SQLite file this process cannot write."""
        self._sqlite_writer = threading.RLock()
        """One SQLite writer of this process at a time, the next one taking the file's write lock the moment the
        last lets it go. Left to SQLite's busy handler, a writer behind a long transaction slept in steps of up
        to 100 ms before it looked again: a discovery document answered meanwhile waited that much longer for its
        record, which a kill then asked again (issue 31)."""

    # --- lifecycle ----------------------------------------------------------------------------------------

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool | None = None, read_only: bool = False) -> Self:
        """Open the database at ``settings.database_url``.

        ``upgrade`` None upgrades the embedded default SQLite file (creating its directory) and sets up any new,
        empty SQLite file (nothing in it to migrate with care); any other database behind the head revision
        raises ``SchemaOutOfDate``. True migrates to head; False never does.

        ``read_only`` (status, export, what extract and recrawl need first): never create a database nor set one
        up; one that does not exist, or has no tables, is an error naming it and how to make one. A SQLite file
        this process cannot write (permissions, a read-only mount: an archived crawl) is opened read-only whoever
        asks: setting up its journal would fail first.
        """
        url = settings.database_url
        is_default = url == DEFAULT_DATABASE_URL
        path = sqlite_file(url)
        mode = None
        if path is not None:
            if read_only and not path.is_file():
                raise StoreError(f"no frontier at {path.resolve()} (from {_where(settings)}): nothing to read; "
                                 f"{CREATE_HINT}")
            mode = read_only_mode(path)
            if not is_default and not path.parent.is_dir():
                raise StoreError(f"cannot open the frontier at {path}: the directory {path.parent} does not exist; "
                                 "create it, or name a file in an existing directory")
        if is_default and mode is None and path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        db = cls(settings, make_engine(settings, read_only=mode))
        if mode is not None:
            upgrade = False
        try:
            if read_only and upgrade is None and db.empty():
                upgrade = False  # set nothing up in an empty database: say there is no frontier there
            if upgrade or (upgrade is None and (is_default or (db.dialect.is_sqlite and db.empty()))):
                db.upgrade()  # a reader too brings the default file's schema up to date, as before
            else:
                db.check_revision(read_only=read_only)
        except DBAPIError as exc:  # e.g. a SQLite file locked past sqlite_busy_timeout_s, a server down
            db.close()
            if (fix := refusal_fix(exc)) is not None:
                raise StoreError(f"cannot open the frontier at {db.url_display}: {fix}") from exc
            error = DatabaseUnavailable if not db.dialect.is_sqlite and _unreachable(exc) else StoreError
            raise error(f"cannot open the frontier at {db.url_display}: {exc.orig}") from exc
        except BaseException:
            db.close()
            raise
        db.read_only = mode is not None
        if not db.dialect.is_sqlite:
            import psycopg

            from harvester.frontier.liveness import postgres_liveness

            try:  # this process's liveness session: before any owner of it is written
                db.liveness = postgres_liveness(db, reader=read_only)
            except psycopg.OperationalError as exc:
                db.close()
                raise DatabaseUnavailable(f"cannot open the frontier at {db.url_display}: {exc}") from exc
        return db

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.engine.dispose()

    def upgrade(self) -> None:
        """Alembic upgrade to head: ``migrations/`` is the only way the schema changes.

        On SQLite a migration alters a table by rebuilding it (a copy, DROP, rename), and with foreign keys on,
        dropping a table that other rows point at fails (0008 on any frontier with fetches). SQLite's own recipe
        (https://www.sqlite.org/lang_altertable.html, "other kinds of table schema changes"): keys off before
        the transaction (the pragma does nothing inside one), ``foreign_key_check`` before committing, keys on."""
        with self.engine.connect() as conn:
            raw = conn.connection.dbapi_connection if self.dialect.is_sqlite else None
            fresh = raw is not None and not inspect(conn).get_table_names()
            conn.rollback()  # the look began a transaction: the set-up or the migration runs its own
            if fresh and migrate.set_up_empty_sqlite(conn):
                logger.info("database %s set up at %s", self.url_display, migrate.head_revision())
                return  # a new file: the head schema in one script, no migration to replay
            if raw is not None:
                raw.execute("PRAGMA foreign_keys=OFF")
            try:
                with conn.begin():
                    migrate.upgrade(conn)
                    if raw is not None and (broken := conn.exec_driver_sql("PRAGMA foreign_key_check").all()):
                        raise StoreError(f"upgrading {self.url_display} would leave {len(broken)} rows pointing at"
                                         f" rows that do not exist (first: {tuple(broken[0])}); nothing was changed")
            finally:
                if raw is not None:
                    raw.execute("PRAGMA foreign_keys=ON")
        logger.info("database %s upgraded to %s", self.url_display, migrate.head_revision())

    def empty(self) -> bool:
        """No table at all: a database file just created (by SQLite on first open, or by the user)."""
        with self.engine.connect() as conn:
            return not inspect(conn).get_table_names()

    def check_revision(self, *, read_only: bool = False) -> None:
        with self.engine.connect() as conn:
            current = migrate.current_revision(conn)
        head = migrate.head_revision()
        if current is None and read_only:
            raise SchemaOutOfDate(f"no frontier in {self.url_display} (no harvester tables): nothing to read; "
                                  f"{CREATE_HINT}")
        if current != head:
            raise SchemaOutOfDate(
                f"database {self.url_display} is at schema revision {current or 'none (empty)'}, this harvester"
                f" needs {head}: run `harvester db upgrade` (with HARVESTER_DATABASE_URL set to this database)"
            )

    @property
    def url_display(self) -> str:
        """The database URL with any password masked: safe to log and print."""
        url = self.engine.url if self.engine.url.database else make_url(self.settings.database_url)  # read-only
        return url.render_as_string(hide_password=True)

    @contextmanager
    def tx(self, *, write: bool = True, one_statement: bool = False, snapshot: bool = False) -> Iterator[Transaction]:
        """One transaction. On SQLite a writer takes the write lock up front (BEGIN IMMEDIATE), so a
        read-then-write unit of work can never be overtaken; driver errors become StoreError/InvalidRecord.
        ``one_statement``: the unit of work is a single statement, which PostgreSQL runs atomically on its own.
        ``snapshot`` (a read): every statement sees the same moment, REPEATABLE READ on PostgreSQL (a read-only one
        never fails to serialise); a SQLite read transaction already does. Counts summed or compared across
        statements need it: read one statement apart while workers completed URLs, a run showed 88 new of 84
        fetched, and 1250 URLs of 1254."""
        serialised = self._sqlite_writer if write and self.dialect.is_sqlite else contextlib.nullcontext()
        try:
            with serialised, self.engine.connect() as conn:
                conn.execution_options(harvester_write=write)
                if snapshot and not write and not self.dialect.is_sqlite:
                    conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
                elif (one_statement or not write) and not self.dialect.is_sqlite:
                    # A read needs no transaction on PostgreSQL: at READ COMMITTED (the default, never changed
                    # here) each statement takes its own snapshot inside one too; nor does a write of one statement,
                    # its own transaction. Autocommit spares the BEGIN and COMMIT round trips, two of a
                    # one-statement unit's three (issue 32).
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                tx = Transaction(conn)
                with conn.begin():
                    yield tx
        except IntegrityError as exc:
            raise InvalidRecord(f"the database refused the unit of work (nothing was written): {exc.orig}") from exc
        except DBAPIError as exc:
            if not self.dialect.is_sqlite and _unreachable(exc):
                raise DatabaseUnavailable(f"database {self.url_display} unavailable: {exc.orig}") from exc
            if getattr(exc.orig, "sqlstate", None) in CONFLICT_STATES:
                raise WriteConflict(f"write conflict on {self.url_display}: {exc.orig}") from exc
            if damaged_file(exc.orig):
                raise StoreError(f"database error on {self.url_display}: {exc.orig}; {DAMAGED_HINT}") from exc
            raise StoreError(disk_full(self.url_display, exc) or f"database error on {self.url_display}: {exc.orig}"
                             ) from exc
        # The SQLite bulk paths talk to the driver connection directly (dialect_sqlite._sqlite_write_urls).
        except sqlite3.IntegrityError as exc:
            raise InvalidRecord(f"the database refused the unit of work (nothing was written): {exc}") from exc
        except sqlite3.Error as exc:
            hint = f"; {DAMAGED_HINT}" if damaged_file(exc) else ""
            raise StoreError(disk_full(self.url_display, exc) or f"database error on {self.url_display}: {exc}{hint}"
                             ) from exc
        for action in tx.committed:
            action(tx)


class Part:
    """One concern of the frontier (its own object, its own state) over the shared ``Database``: the settings,
    dialect, chunk size and transaction under the names its queries use."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.settings = db.settings
        self._d = db.dialect
        self._chunk = db.chunk
        self._tx = db.tx


def url_id_of(conn: Connection, d: Dialect, url: str) -> int | None:
    """The id of a stored URL (canonical) in ``conn``'s transaction, or None."""
    origin, path = split_url(url)
    p = d.p
    row = conn.exec_driver_sql(
        f"SELECT u.id FROM urls u JOIN hosts h ON h.id = u.host_id WHERE h.origin = {p} AND u.path = {p}",
        (origin, path),
    ).first()
    return None if row is None else int(row[0])
