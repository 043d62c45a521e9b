"""A new SQLite frontier gets the head schema in one script (``frontier.sqlite_head``), not by replaying every
migration through Alembic: issue 31 measured ~0.6 s of a harvest's start there (Alembic's import and 8 migrations)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from harvester.frontier import FrontierStore, migrate, sqlite_head
from harvester.settings import Settings


def _dump(path: Path) -> list[str]:
    """Schema and rows, sorted: the order of indexes in a dump is the order they were created in."""
    with sqlite3.connect(path) as conn:
        lines = sorted(conn.iterdump())
    conn.close()
    return lines


def _migrated(path: Path) -> list[str]:
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        migrate.upgrade(conn)
    engine.dispose()
    return _dump(path)


def test_the_snapshot_is_what_the_migrations_leave(tmp_path: Path) -> None:
    expected = migrate.render_sqlite_head(tmp_path / "migrated.db")
    assert Path(sqlite_head.__file__).read_text(encoding="utf-8") == expected, (
        "harvester/frontier/sqlite_head.py is stale: run `python -m harvester.frontier.migrate`")


def test_a_new_file_set_up_from_the_snapshot_holds_what_the_migrations_leave(tmp_path: Path) -> None:
    with FrontierStore.open(Settings.load(database_url=f"sqlite:///{tmp_path / 'new.db'}")) as store:
        assert store.stats().total == 0
    assert _dump(tmp_path / "new.db") == _migrated(tmp_path / "migrated.db")


def test_a_new_file_is_set_up_without_alembic(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'h.db'}"
    code = (
        "import sys\nfrom harvester.frontier import FrontierStore\nfrom harvester.settings import Settings\n"
        f"with FrontierStore.open(Settings.load(database_url={db!r})) as store:\n    store.stats()\n"
        "sys.exit('alembic' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_a_snapshot_of_another_revision_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A migration added without regenerating the snapshot: the new file is migrated by Alembic, to the head."""
    monkeypatch.setattr(sqlite_head, "STATEMENTS", ("CREATE TABLE stale (id INTEGER)",))
    monkeypatch.setattr(sqlite_head, "REVISION", "0000")
    with FrontierStore.open(Settings.load(database_url=f"sqlite:///{tmp_path / 'new.db'}")) as store:
        assert store.stats().total == 0
    assert _dump(tmp_path / "new.db") == _migrated(tmp_path / "migrated.db")


def _open_and_count(path: str) -> None:
    with FrontierStore.open(Settings(database_url=f"sqlite:///{path}"), upgrade=True) as store:
        store.stats()


def test_processes_opening_one_new_file_at_once_all_open_it(tmp_path: Path) -> None:
    """Two extractions (or a worker and ``status``) starting on one new file: the second ran the head script
    into a file the first had just set up and died on 'table alembic_version already exists' (14 of 60 here)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for round_ in range(6):
        path = str(tmp_path / f"new-{round_}.db")
        processes = [context.Process(target=_open_and_count, args=(path,)) for _ in range(3)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=120)
        assert [process.exitcode for process in processes] == [0, 0, 0]
