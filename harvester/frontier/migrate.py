"""Alembic configured in code: ``migrations/`` is the only schema path, and no alembic.ini is needed in the cwd.

Upgrades run on a connection the caller owns (Alembic cookbook "sharing a connection"), so they work from a CLI
command, a test or a running event loop alike. Never decides *whether* to upgrade: ``FrontierStore.open`` does.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from harvester.errors import StoreError

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
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise StoreError(f"no Alembic revisions under {MIGRATIONS_DIR / 'versions'}")
    return head


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Migrate the database behind ``connection`` to ``revision``; commits what it ran."""
    command.upgrade(alembic_config(connection), revision)
