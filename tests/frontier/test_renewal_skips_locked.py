"""A lease renewal never waits on a lease row another transaction holds (issue 32): the completion writer locks the
lease rows of the URLs it writes (``FOR UPDATE``) and deletes them in a transaction that runs through their
outlinks' upserts; a renewal waited behind it, 12-20 s per process with 2 and 3 processes under load. The row it
skips is renewed at the next renewal; the others are renewed now."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import psycopg
import pytest

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.runtime import utcnow
from harvester.settings import Settings

pytestmark = pytest.mark.postgres

HOST = "http://127.0.0.1:9111"


def test_a_renewal_skips_a_lease_row_another_transaction_holds(pg_url: str) -> None:
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{HOST}/p{i}", UrlKind.DETAIL, "sitemap:x") for i in range(3)])
        assert store.claim_hosts("w", limit=1, lease_s=60) == [HOST]
        claimed = store.claim("w", hosts=[HOST], per_host=3, lease_s=60)
        locked, free = claimed[0].id, [c.id for c in claimed[1:]]
        dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn) as writer:  # as the completion writer holds the row it is about to delete
            writer.execute("SELECT url_id FROM leases WHERE url_id = %s FOR UPDATE", (locked,))
            renewed: list[list[str]] = []
            renewal = threading.Thread(target=lambda: renewed.append(
                store.renew_hosts("w", [HOST], lease_s=600)), daemon=True)
            renewal.start()
            renewal.join(60)  # without the skip it waits for the writer's transaction, here for ever
            assert renewed == [[HOST]], "the renewal waited on the locked lease row"
            writer.rollback()
        with psycopg.connect(dsn) as check:
            until: dict[int, datetime] = dict(check.execute("SELECT url_id, lease_until FROM leases").fetchall())
        later = utcnow() + timedelta(seconds=300)
        assert all(until[url_id] > later for url_id in free)  # renewed to 600 s
        assert until[locked] < later  # skipped: still its claim's 60 s, renewed next time
        assert store.renew_hosts("w", [HOST], lease_s=600) == [HOST]
