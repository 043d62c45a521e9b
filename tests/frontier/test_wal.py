"""SQLite's write-ahead log is bounded by the database's own size (a quarter of it, 1 MiB to 64 MiB), not by a
fixed 64 MiB that a small harvest's WAL could fill a small volume with before its first checkpoint (issue 32)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import text

from harvester.frontier import FrontierStore
from harvester.frontier.dialects import WAL_MAX_PAGES, WAL_MIN_PAGES, bound_wal, make_engine
from harvester.settings import Settings


def pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def test_the_wal_limit_follows_the_database_size(tmp_path: Path):
    conn = sqlite3.connect(tmp_path / "f.db")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (b BLOB)")
    assert bound_wal(conn) == WAL_MIN_PAGES  # a small file: 1 MiB
    assert pragma(conn, "journal_size_limit") == WAL_MIN_PAGES * pragma(conn, "page_size")
    with conn:
        conn.executemany("INSERT INTO t VALUES (randomblob(4000))", [()] * 4_000)  # ~16 MB
    pages = pragma(conn, "page_count")
    assert bound_wal(conn) == pages // 4 == pragma(conn, "wal_autocheckpoint")
    conn.close()
    assert WAL_MAX_PAGES * 4096 == 64 * 2**20  # the ceiling for large frontiers, as before


def test_every_store_connection_gets_the_bound(tmp_path: Path):
    with FrontierStore.open(Settings(database_url=f"sqlite:///{tmp_path / 'h.db'}"), upgrade=True) as store:
        store.ensure_hosts(["https://a.test"])
    conn = sqlite3.connect(tmp_path / "h.db")
    try:
        assert pragma(conn, "wal_autocheckpoint") == 1000  # SQLite's own default on a foreign connection ...
    finally:
        conn.close()
    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path / 'h.db'}"))
    with engine.connect() as c:  # ... and the bound on ours
        assert c.execute(text("PRAGMA wal_autocheckpoint")).scalar_one() == WAL_MIN_PAGES
    engine.dispose()
