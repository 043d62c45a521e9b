"""Migration 0021 adds the validators each answer carried to the fetch log; a fetch logged before it is read as
having carried its version's. Copied onto every row by the upgrade, that cost a rewrite of the whole log in one
transaction holding it (87 s and 400 MB grown to 957 MB for 3 million fetches on PostgreSQL): it is read so instead
(``fetches.validators_logged``, migration 0023), and no row is written."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest
from alembic import command

from harvester.frontier import FrontierStore, migrate
from harvester.frontier.dialects import make_engine
from harvester.settings import Settings

from .test_versions import A, answer, complete, ids_of

pytestmark = pytest.mark.postgres


def test_fetches_logged_before_0021_are_read_with_their_versions_validators_and_not_rewritten(pg_url: str) -> None:
    settings = Settings(database_url=pg_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        p = ids_of(store, [f"{A}/p"])[f"{A}/p"]
        first = answer(p, b"<p>one</p>", "m1")
        assert first.page is not None
        complete(store, [replace(first, page=replace(first.page, etag='"v1"', last_modified="Mon, 07 Dec 2026"))])
        complete(store, [answer(p, b"<p>one</p>", "m1")])  # the same bytes again
    engine = make_engine(settings)
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), "0020")  # a store of the code before 0021
    with engine.begin() as conn:
        migrate.upgrade(conn, "head")
    engine.dispose()
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        written = conn.execute("SELECT count(*) FROM fetches WHERE etag IS NOT NULL OR last_modified IS NOT NULL"
                               " OR validators_logged IS NOT NULL").fetchone()
    assert written == (0,)  # the upgrade rewrote no fetch
    with FrontierStore.open(settings) as store:
        fetches = [f for f in store.iter_fetches() if f.page is not None]
        pages = list(store.iter_pages())
    assert [f.served for f in fetches] == [None, None]  # read as their version's
    assert [(v.etag, v.last_modified, v.served) for v in pages] == [('"v1"', "Mon, 07 Dec 2026", None)]
