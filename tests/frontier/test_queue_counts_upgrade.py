"""Migration 0017 fills ``queue_counts`` from the queue while workers of the old code may still write it: a queue
change committed after the fill read the queue, but before the triggers existed, was counted by neither, and the
counts stayed wrong for good. The fill now runs under a lock on the queue, in the transaction that creates the
triggers (PostgreSQL)."""

from __future__ import annotations

import threading

import psycopg
import pytest
from alembic import command

from harvester.frontier import FrontierStore, migrate
from harvester.frontier.dialects import make_engine
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

pytestmark = pytest.mark.postgres


def dsn(pg_url: str) -> str:
    return pg_url.replace("postgresql+psycopg://", "postgresql://")


def test_a_queue_change_committed_during_the_upgrade_is_counted(pg_url: str) -> None:
    settings = Settings(database_url=pg_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url=f"https://a.test/p{n}", kind=UrlKind.DETAIL,
                                            source="sitemap:https://a.test/sitemap.xml", depth=0, score=0.5)
                              for n in range(5)])
    engine = make_engine(settings)
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), "0016")
    # A worker of the old code takes a queue entry in a transaction still open when the upgrade begins.
    with psycopg.connect(dsn(pg_url)) as worker, psycopg.connect(dsn(pg_url), autocommit=True) as watch:
        worker.execute("DELETE FROM queue WHERE url_id = (SELECT min(url_id) FROM queue)")
        upgraded: list[BaseException | None] = []

        def upgrade() -> None:
            try:
                with engine.begin() as conn:
                    migrate.upgrade(conn, "0017")
                upgraded.append(None)
            except BaseException as exc:
                upgraded.append(exc)

        thread = threading.Thread(target=upgrade)
        thread.start()
        # The upgrade waits on the worker's lock (before the fill with the fix; at CREATE TRIGGER without it).
        for _ in range(6000):
            waiting = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if (waiting and waiting[0]) or not thread.is_alive():
                break
            thread.join(0.01)
        assert thread.is_alive(), f"control: the upgrade waited for the worker's transaction ({upgraded})"
        worker.commit()
        thread.join(120)
    assert upgraded == [None]
    engine.dispose()
    with psycopg.connect(dsn(pg_url)) as reader:
        queued = reader.execute("SELECT count(*) FROM queue").fetchone()
        counted = reader.execute("SELECT coalesce(sum(n), 0) FROM queue_counts").fetchone()
    assert queued is not None and counted is not None
    assert (int(counted[0]), int(queued[0])) == (4, 4)
