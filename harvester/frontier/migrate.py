"""Alembic configured in code: ``migrations/`` is the only schema path, and no alembic.ini is needed in the cwd.

Upgrades run on a connection the caller owns (Alembic cookbook "sharing a connection"), so they work from a CLI
command, a test or a running event loop alike. Never decides *whether* to upgrade: ``FrontierStore.open`` does.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from harvester.errors import StoreError

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic is imported where a migration runs, not here: every command opens the store, and importing alembic
# alone cost 0.13 s of a CLI run's ~1 s fixed cost. Opening an up-to-date database needs none of it.

MIGRATIONS_PACKAGE = "harvester._migrations"
"""The repository's top-level ``migrations/`` under the name an install gives it (pyproject's package-dir): a
wheel ships it there, and an editable install maps the name back to the repository's directory."""


def _migrations_dir() -> Path:
    """Where the migrations are: the installed package, else ``migrations/`` beside this source tree (a checkout
    run without installing it, e.g. ``PYTHONPATH=.``)."""
    try:
        spec = importlib.util.find_spec(MIGRATIONS_PACKAGE)
    except ImportError:
        spec = None
    if spec is not None and spec.origin:
        return Path(spec.origin).resolve().parent
    return Path(__file__).resolve().parents[2] / "migrations"


MIGRATIONS_DIR = _migrations_dir()


def alembic_config(connection: Connection | None = None) -> Config:
    if not (MIGRATIONS_DIR / "env.py").is_file():
        raise StoreError(
            f"Alembic migrations not found at {MIGRATIONS_DIR}: this installation of harvester is incomplete "
            f"(the wheel ships them as {MIGRATIONS_PACKAGE}); reinstall it"
        )
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=]*)?=\s*(?:['\"]([^'\"]+)['\"]|None)", re.M)


@cache
def head_revision() -> str:
    """The newest revision: read from the scripts' ``revision``/``down_revision`` lines when they form one plain
    chain (every migration here does), else asked of Alembic (merges, branches)."""
    revisions, downs = set(), set()
    for script in (MIGRATIONS_DIR / "versions").glob("*.py"):
        source = script.read_text(encoding="utf-8")
        found, down = _REVISION.search(source), _DOWN.search(source)
        if found is None or down is None:
            continue
        revisions.add(found.group(1))
        if down.group(1):
            downs.add(down.group(1))
    heads = revisions - downs
    if len(heads) == 1 and len(downs) == len(revisions) - 1:
        return heads.pop()
    return _alembic_head()


def _alembic_head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise StoreError(f"no Alembic revisions under {MIGRATIONS_DIR / 'versions'}")
    return head


def current_revision(connection: Connection) -> str | None:
    """The database's revision (Alembic's one-row ``alembic_version`` table), or None when it has none."""
    if not connection.dialect.has_table(connection, "alembic_version"):
        return None
    try:
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one_or_none()
    except DBAPIError as exc:
        # A server going away under the query is no missing revision: raised, the open says the database is
        # unavailable and a run waits for it. Said "empty, run db upgrade", it ended a run a restart should only
        # have paused (tests/hardening/test_db_outage.py, beside two busy loops).
        if exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError):
            raise
        return None


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database behind ``connection`` to ``revision``; commits what it ran."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)


def set_up_empty_sqlite(connection: Connection) -> bool:
    """Give an empty SQLite database the head schema in one script, without Alembic: True when done.

    A harvest into a new SQLite file (the first run, every bench and most tests) paid ~0.3 s importing Alembic and
    ~0.3 s replaying every migration before its first request (issue 31). ``sqlite_head`` holds what those
    migrations leave in an empty file (``render_sqlite_head``); tests/frontier/test_sqlite_head.py proves the two
    identical, schema and rows. False (the caller migrates with Alembic) when the snapshot is of another revision
    than the scripts' head: a migration added without regenerating it costs time, never a wrong schema."""
    from harvester.frontier import sqlite_head

    if head_revision() != sqlite_head.REVISION:
        return False
    raw = connection.connection.dbapi_connection
    assert raw is not None
    # Two processes opening one new file at once (two extractions, a worker and `status`): the write lock first,
    # then the look, so the second finds the schema there and leaves it to Alembic's check of the version.
    raw.execute("BEGIN IMMEDIATE")
    try:
        if raw.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            raw.execute("ROLLBACK")
            return False
        for statement in sqlite_head.STATEMENTS:
            raw.execute(statement)
        raw.execute("COMMIT")
    except BaseException:
        raw.execute("ROLLBACK")
        raise
    return True


def render_sqlite_head(path: Path) -> str:
    """The source of ``sqlite_head``: an empty SQLite file at ``path`` migrated by Alembic, dumped statement by
    statement. Regenerate after adding a migration: ``python -m harvester.frontier.migrate``."""
    import sqlite3

    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn, conn.begin():
            upgrade(conn)
    finally:
        engine.dispose()
    with sqlite3.connect(path) as dump:
        statements = [s.rstrip(";") for s in dump.iterdump() if s not in ("BEGIN TRANSACTION;", "COMMIT;")]
    dump.close()
    # Tables (and their rows) come by name; indexes in the order the migrations created them, which a rebuilt
    # table's batch operation takes from a set: sorted, so that the file only changes with the schema.
    tables = [s for s in statements if not s.startswith(("CREATE INDEX", "CREATE UNIQUE INDEX"))]
    statements = tables + sorted(s for s in statements if s not in tables)
    lines = ["# ruff: noqa: E501",
             '"""The head schema of an empty SQLite frontier, as the migrations leave it: generated by',
             "``python -m harvester.frontier.migrate`` (``migrate.render_sqlite_head``); never edit by hand.\"\"\"",
             "", f"REVISION = {head_revision()!r}", "", "STATEMENTS: tuple[str, ...] = ("]
    lines += [f"    {statement!r}," for statement in statements]
    lines += [")", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        source = render_sqlite_head(Path(tmp) / "head.db")
    target = Path(__file__).with_name("sqlite_head.py")
    target.write_text(source, encoding="utf-8")
    print(f"wrote {target}")
