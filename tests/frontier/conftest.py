"""Frontier fixtures: a migrated store over each database of ``db_url`` (SQLite file, fresh PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harvester.frontier import FrontierStore
from harvester.settings import Settings


@pytest.fixture
def store(db_url: str) -> Iterator[FrontierStore]:
    with FrontierStore.open(Settings(database_url=db_url), upgrade=True) as opened:
        yield opened

