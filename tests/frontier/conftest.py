"""Frontier fixtures: a migrated store over a fresh SQLite file and over an empty migrated PostgreSQL database.

The PostgreSQL store is ``migrated_pg_url`` (tests/conftest.py): one migrated database per session, emptied before
each test, rather than a database created, migrated and dropped per test (~2 s each, for ~50 tests here). The
migrations themselves are tested from an empty database in test_migrations.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.frontier import FrontierStore
from harvester.settings import Settings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FrontierStore]:
    """The same test against a SQLite file and a real PostgreSQL database, each migrated and empty."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'harvester.db'}"
    else:
        url = request.getfixturevalue("migrated_pg_url")
    with FrontierStore.open(Settings(database_url=url), upgrade=True) as opened:
        yield opened
