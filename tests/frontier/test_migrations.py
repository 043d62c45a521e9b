"""Schema path: models and migrations agree, auto-upgrade only for the embedded default, clear errors otherwise."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, create_engine

from harvester.errors import SchemaOutOfDate, StoreError
from harvester.frontier import FrontierStore, migrate
from harvester.frontier.models import metadata
from harvester.settings import DEFAULT_DATABASE_URL, Settings


def _diff(url: str, target: MetaData = metadata) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            return list(compare_metadata(context, target))
    finally:
        engine.dispose()


def _is_claim_index(entry: object) -> bool:
    return isinstance(entry, tuple) and entry[0] in ("add_index", "remove_index") and entry[1].name == "ix_urls_claim"


def test_autogenerate_finds_no_diff(db_url: str) -> None:
    diff = _diff(db_url)
    if db_url.startswith("sqlite"):
        # SQLAlchemy does not reflect DESC on SQLite index columns, so alembic sees the expression index
        # ix_urls_claim as changed; check the real index instead.
        assert all(_is_claim_index(entry) for entry in diff), diff
        path = db_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            cols = [(row[2], row[3]) for row in conn.execute("PRAGMA index_xinfo(ix_urls_claim)") if row[5]]
        assert cols == [("host_id", 0), ("state", 0), ("score", 1), ("id", 0)]
    else:
        assert diff == []


def test_autogenerate_compare_can_fail(sqlite_url: str) -> None:
    """Control: a model change that the migration lacks is reported."""
    changed = MetaData()
    for table in metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["documents"].append_column(Column("extra_column_for_test", Integer))
    diff = _diff(sqlite_url, changed)
    assert any(entry[0] == "add_column" for entry in diff if isinstance(entry, tuple))


def test_embedded_default_sqlite_auto_upgrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FrontierStore.open(Settings(database_url=DEFAULT_DATABASE_URL)) as store:
        assert store.stats().total == 0
    assert (tmp_path / ".harvester" / "harvester.db").is_file()
    with FrontierStore.open(Settings(database_url=DEFAULT_DATABASE_URL), upgrade=False) as store:
        assert store.stats().total == 0


def test_other_sqlite_file_is_not_upgraded_silently(sqlite_url: str) -> None:
    with pytest.raises(SchemaOutOfDate, match="harvester db upgrade"):
        FrontierStore.open(Settings(database_url=sqlite_url))
    with FrontierStore.open(Settings(database_url=sqlite_url), upgrade=True) as store:
        assert store.stats().total == 0
    with FrontierStore.open(Settings(database_url=sqlite_url)) as store:  # now at head: opens
        assert store.stats().total == 0


@pytest.mark.postgres
def test_empty_postgres_raises_schema_out_of_date_with_masked_url(pg_url: str) -> None:
    with_password = pg_url.replace("postgres@", "postgres:s3cret@")
    with pytest.raises(SchemaOutOfDate) as err:
        FrontierStore.open(Settings(database_url=with_password))
    message = str(err.value)
    assert "harvester db upgrade" in message
    assert "s3cret" not in message
    assert "***" in message
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        assert store.url_display == pg_url
    with FrontierStore.open(Settings(database_url=pg_url)) as store:
        assert store.stats().total == 0


def test_unsupported_dialect_is_named(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="mysql"):
        FrontierStore.open(Settings(database_url="mysql://u:p@127.0.0.1/x"))
