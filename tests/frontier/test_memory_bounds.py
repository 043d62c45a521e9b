"""What keeps a harvester process's memory independent of the size of its database (issue 22)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harvester import runtime
from harvester.frontier.dialects import make_engine
from harvester.settings import Settings


def test_sqlite_connections_keep_a_bounded_page_cache_and_no_mmap(tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path}/f.db"))
    try:
        with engine.connect() as conn:
            cache = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
            mmap = conn.exec_driver_sql("PRAGMA mmap_size").scalar_one()
    finally:
        engine.dispose()
    assert -cache <= 16 * 1024  # KiB: 16 MiB per connection at most
    assert mmap == 0  # mapped pages of the file would count in RSS as it grows


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_malloc_arenas_are_capped_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert runtime.limit_malloc_arenas(runtime.MALLOC_ARENAS) is True
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert runtime.limit_malloc_arenas(runtime.MALLOC_ARENAS) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_native_memory_is_trimmed_at_most_once_per_interval() -> None:
    assert runtime.trim_native_memory(every_s=0.0) is True  # glibc: the pass runs
    assert runtime.trim_native_memory(every_s=3600.0) is False  # just ran: a host ending now costs nothing
    assert runtime.trim_native_memory(every_s=0.0) is True
