"""PostgreSQL connections without a round trip per store call (issue 32): a pooled connection is pinged only
after sitting idle, reads run without a transaction, and a claim is pipelined. What must still hold: a connection
the server closed while it sat in the pool is replaced, not handed to a unit of work."""

from __future__ import annotations

import psycopg
import pytest

from harvester.frontier import FrontierStore, dialects
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

pytestmark = pytest.mark.postgres

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"


def _terminate_others(database: str) -> int:
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        return len(admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall())


def test_a_pooled_connection_the_server_closed_while_idle_is_replaced_before_use(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dialects, "PING_IDLE_S", 0.0)  # every checkout counts as idle: no waiting in a test
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl("http://127.0.0.1:9/a", UrlKind.DETAIL, "sitemap:x")])
        assert store.due_count() == 1
        assert _terminate_others(pg_url.rsplit("/", 1)[1]) >= 1  # the pool's idle connection, closed by the server
        assert store.due_count() == 1  # pinged, found closed, replaced: the read never saw the dead connection
        claimed = store.claim("w", hosts=["http://127.0.0.1:9"], per_host=5, lease_s=60)
        assert [c.url for c in claimed] == ["http://127.0.0.1:9/a"]
