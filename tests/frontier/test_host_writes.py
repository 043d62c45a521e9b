"""Per-host statements a worker pays on every host it serves (issue 32): on a site of many small hosts they were most
of an extraction's round trips. A claim teaches the store its hosts' ids, so the host's later writes (its politeness
state, its pages' outlinks) look nothing up; the seed hosts' parks are read in one statement, not one per host."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import event

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, HostPolicy, UrlKind
from harvester.settings import Settings

HOSTS = [f"http://127.0.0.1:{port}" for port in (9101, 9102, 9103)]


@contextmanager
def statements(store: FrontierStore) -> Iterator[list[str]]:
    """The SQL statements ``store`` sends while the block runs (the transaction's own BEGIN/COMMIT not included)."""
    seen: list[str] = []

    def before(_conn, _cursor, statement, _params, _context, _many):  # type: ignore[no-untyped-def]
        if statement.split(None, 1)[0].upper() not in ("BEGIN", "PRAGMA"):
            seen.append(statement)

    event.listen(store.db.engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(store.db.engine, "before_cursor_execute", before)


def filled(db_url: str) -> FrontierStore:
    store = FrontierStore.open(Settings(database_url=db_url), upgrade=True)
    store.add_discovered([DiscoveredUrl(f"{origin}/p{i}", UrlKind.DETAIL, "sitemap:x") for origin in HOSTS
                          for i in range(3)])
    return store


def test_a_claimed_hosts_politeness_state_is_written_in_one_statement(db_url: str) -> None:
    with filled(db_url):
        fresh = FrontierStore.open(Settings(database_url=db_url))  # a worker's store: no host id cached yet
        with fresh:
            assert fresh.claim_hosts("w", limit=3, lease_s=60) == HOSTS
            assert len(fresh.claim("w", hosts=[HOSTS[0]], per_host=5, lease_s=60)) == 3
            with statements(fresh) as sent:
                fresh.save_host_policy(HostPolicy(origin=HOSTS[0], concurrency_limit=2, failures=1))
            assert len(sent) == 1, sent  # the UPDATE alone: the claim told the store the host's id
            assert fresh.host_policy(HOSTS[0]) == HostPolicy(origin=HOSTS[0], concurrency_limit=2, failures=1)
            # A host the store has not met yet is still looked up (and made) before its write: nothing is assumed.
            with statements(fresh) as sent:
                fresh.save_host_policy(HostPolicy(origin=HOSTS[1], failures=3))
            assert len(sent) > 1
            assert fresh.host_policy(HOSTS[1]) == HostPolicy(origin=HOSTS[1], failures=3)


def test_many_hosts_policies_are_read_in_one_statement(db_url: str) -> None:
    with filled(db_url) as store:
        store.save_host_policy(HostPolicy(origin=HOSTS[2], parked_reason="failing", failures=5))
        with statements(store) as sent:
            policies = store.host_policies([*HOSTS, "http://127.0.0.1:9199"])  # the last one is not in the frontier
        assert len(sent) == 1
        assert sorted(policies) == HOSTS
        assert policies[HOSTS[2]] == HostPolicy(origin=HOSTS[2], parked_reason="failing", failures=5)
        assert policies[HOSTS[0]] == store.host_policy(HOSTS[0]) == HostPolicy(origin=HOSTS[0])


@pytest.mark.postgres
def test_a_hosts_turn_end_sends_its_writes_without_begin_and_commit(pg_url: str) -> None:
    """Its politeness write and its release are one statement each: PostgreSQL runs them in autocommit (each is
    its own transaction), sparing the BEGIN and COMMIT round trips a transaction costs."""
    with filled(pg_url) as store:
        assert store.claim_hosts("w", limit=3, lease_s=60) == HOSTS
        assert len(store.claim("w", hosts=[HOSTS[0]], per_host=5, lease_s=60)) == 3
        autocommit: list[bool] = []

        def before(conn, _cursor, _statement, _params, _context, _many):  # type: ignore[no-untyped-def]
            autocommit.append(conn.connection.dbapi_connection.autocommit)

        event.listen(store.db.engine, "before_cursor_execute", before)
        try:
            store.save_host_policy(HostPolicy(origin=HOSTS[0], concurrency_limit=3))
            store.release_hosts("w", [HOSTS[0]])
        finally:
            event.remove(store.db.engine, "before_cursor_execute", before)
        assert autocommit == [True, True]
        assert store.host_policy(HOSTS[0]) == HostPolicy(origin=HOSTS[0], concurrency_limit=3)
        with store.db.engine.connect() as conn:
            owners = dict(conn.exec_driver_sql("SELECT origin, lease_owner FROM hosts").all())
        assert owners == {HOSTS[0]: None, HOSTS[1]: "w", HOSTS[2]: "w"}
