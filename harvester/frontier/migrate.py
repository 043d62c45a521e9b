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
from sqlalchemy.exc import DBAPIError

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
    except DBAPIError:
        return None


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database behind ``connection`` to ``revision``; commits what it ran."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)
