"""What keeps a million-URL frontier's costs flat (issue 32): counts that read no queued URL row, claims by index."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from sqlalchemy import create_engine

from harvester.frontier import FrontierStore, migrate
from harvester.frontier.dialect_sqlite import _sqlite_candidates
from harvester.frontier.models import MISSING_ROWS, MOVED_ROWS
from harvester.records import ErrorClass, UrlKind, UrlState
from harvester.settings import Settings

from .test_store import T0, claim_all, done, found, page


def _truth(store: FrontierStore) -> dict[tuple[str, str, str], int]:
    """(origin, kind, state) -> URLs, read from every URL row: what the counts must equal."""
    out: dict[tuple[str, str, str], int] = {}
    engine = store.db.engine  # the URL rows themselves, which the counts stand for
    with engine.connect() as conn:
        # A reader's state: leased while held; moved and missing apart from done and gone (models.MOVED_ROWS,
        # MISSING_ROWS: a permanent redirect is not a live page, a 404 never stored not a deletion).
        shown = (f"CASE WHEN l.url_id IS NOT NULL THEN 'leased' WHEN {MOVED_ROWS.replace('state', 'u.state')}"
                 f" THEN 'moved' WHEN {MISSING_ROWS.replace('state', 'u.state')} THEN 'missing' ELSE u.state END")
        for origin, kind, state, n in conn.exec_driver_sql(
            f"SELECT h.origin, u.kind, {shown}, count(*)"
            " FROM urls u JOIN hosts h ON h.id = u.host_id LEFT JOIN leases l ON l.url_id = u.id"
            f" GROUP BY h.origin, u.kind, {shown}"
        ):
            out[(origin, kind, state)] = int(n)
    return out


def test_counts_equal_every_url_row_in_every_state(store: FrontierStore) -> None:
    """Queued URLs are counted from the queue and the leases, finished ones from ``ix_urls_finished``: together
    they are every URL row, in whatever state a completion, a retry or a lease left it."""
    store.add_discovered([found(f"https://a.test/{i}", score=i) for i in range(12)]
                         + [found(f"https://a.test/l{i}", kind=UrlKind.LISTING) for i in range(3)]
                         + [found(f"https://b.test/{i}") for i in range(5)], now=T0)
    a = claim_all(store, "w", ["https://a.test"], per_host=7)
    store.complete_many("w", [
        (done(a[0].id, page=page(b"<html>0</html>", "h0"), content_hash="h0"), []),
        (done(a[1].id, page=page(b"<html>1</html>", "h1"), content_hash="h1"), []),
        (done(a[2].id, state=UrlState.GONE, status=404), []),
        (done(a[3].id, state=UrlState.FAILED, status=None, error_class=ErrorClass.TIMEOUT,
              next_fetch_at=T0 + timedelta(hours=1)), []),  # a retry: queued again, due later
        (done(a[4].id, state=UrlState.SKIPPED, status=None), []),
    ])  # a[5], a[6] stay leased
    listing = claim_all(store, "w", ["https://a.test"], kinds=(UrlKind.LISTING,), per_host=1)
    store.complete("w", done(listing[0].id, page=page(b"<html>l</html>", "hl"), content_hash="hl"))
    b = claim_all(store, "v", ["https://b.test"], per_host=2)
    store.release("v", [b[0].id])  # back to the queue

    truth = _truth(store)
    assert truth[("https://a.test", "detail", "leased")] == 2
    assert truth[("https://a.test", "detail", "queued")] == 12 - 7 + 1
    stats = store.stats()
    counted = {(origin, kind, state): n for (origin, kind, state), n in truth.items()}
    for origin, host in stats.hosts.items():
        assert host["states"] == {state: sum(n for (o, _, s), n in counted.items() if o == origin and s == state)
                                  for (o, _, state) in counted if o == origin}
        assert host["total"] == sum(n for (o, _, _), n in counted.items() if o == origin)
    by_state: dict[str, int] = {}
    by_kind: dict[str, int] = {}
    for (_, kind, state), n in truth.items():
        by_state[state] = by_state.get(state, 0) + n
        by_kind[kind] = by_kind.get(kind, 0) + n
    assert stats.by_state == by_state == store.state_counts()
    assert stats.by_kind == by_kind == {"detail": 17, "listing": 3}
    assert stats.total == 20
    assert stats.pages == 3


def test_a_revisit_coming_due_moves_from_the_finished_counts_to_the_queued_ones(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1"), found("https://a.test/2")], now=T0)
    first, second = claim_all(store, "w", ["https://a.test"])
    store.complete_many("w", [
        (done(c.id, page=page(), next_fetch_at=T0 + timedelta(days=1)), []) for c in (first, second)])
    assert store.state_counts() == {"done": 2}
    later = T0 + timedelta(days=2)
    store.claim_hosts("w", limit=1, lease_s=60, now=later)
    claimed = claim_all(store, "w", ["https://a.test"], per_host=1, now=later)  # promotes both, leases one
    assert len(claimed) == 1
    assert store.state_counts() == store.stats().by_state == {"queued": 1, "leased": 1} == {
        state: n for (_, _, state), n in _truth(store).items()}


def _plan(path: str, sql: str, params: tuple[object, ...]) -> str:
    with sqlite3.connect(path) as conn:
        return "\n".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_counting_and_claiming_walk_indexes_not_the_urls_table(sqlite_url: str) -> None:
    """A guard on the plans that keep ``status`` and a claim flat in the frontier's size: finished URLs are
    counted in ``ix_urls_finished`` alone, queued ones in the queue's key order, and a claim reads its host's
    queue range and the URL rows it leases by id; none of them scans ``urls``."""
    with FrontierStore.open(Settings(database_url=sqlite_url), upgrade=True) as store:
        store.add_discovered([found(f"https://a.test/{i}") for i in range(50)], now=T0)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("ANALYZE")
    finished = _plan(path, "SELECT host_id, kind, state, count(*) FROM urls WHERE state <> 'queued'"
                     " GROUP BY host_id, kind, state", ())
    assert "COVERING INDEX ix_urls_finished" in finished
    assert "TEMP B-TREE" not in finished
    queued = _plan(path, "SELECT host_id, kind, count(*) FROM queue GROUP BY host_id, kind", ())
    assert "TEMP B-TREE" not in queued
    candidates = _plan(path, _sqlite_candidates(2, 1), (1, "detail", 0, 50, 2, "detail", 0, 50))
    assert "SEARCH queue USING PRIMARY KEY (host_id=? AND kind=?)" in candidates
    promote = _plan(path, "SELECT id FROM urls WHERE host_id IN (1, 2) AND state = 'done' AND next_fetch_at <= ?"
                    " LIMIT 10", (0,))
    assert "ix_urls_revisit" in promote
    for plan in (finished, queued, candidates, promote):
        assert "SCAN urls\n" not in plan + "\n" and not plan.rstrip().endswith("SCAN urls")


def test_upgrade_to_0010_indexes_the_finished_urls_already_there(db_url: str) -> None:
    engine = create_engine(db_url)
    t0 = "1735689600000000" if db_url.startswith("sqlite") else "'2025-01-01 00:00:00+00'"
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0008")
            conn.exec_driver_sql("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits)"
                                 " VALUES (1, 'https://a.test', 0, 0, 0)")
            for url_id, state in ((1, "queued"), (2, "done"), (3, "gone")):
                conn.exec_driver_sql(
                    "INSERT INTO urls (id, path, host_id, kind, state, score, first_seen, last_seen)"
                    f" VALUES ({url_id}, '/{url_id}', 1, 'detail', '{state}', 0, {t0}, {t0})")
            conn.exec_driver_sql("INSERT INTO queue (host_id, kind, rank, url_id) VALUES (1, 'detail', 0, 1)")
        with engine.begin() as conn:
            migrate.upgrade(conn)
    finally:
        engine.dispose()
    with FrontierStore.open(Settings(database_url=db_url)) as store:
        # The gone row holds no page: a 404 never stored reads as missing (models.MISSING_ROWS, 0018).
        assert store.stats().hosts["https://a.test"]["states"] == {"queued": 1, "done": 1, "missing": 1}


def test_a_finished_cycle_keeps_its_counts_and_a_running_one_is_counted_live(store: FrontierStore) -> None:
    """``status`` after a cycle of a million pages read every fetch of it again (6.5 s of CPU): a finished
    cycle's counts are final, kept by ``finish_cycle``, and read back as they were counted."""
    store.add_discovered([found(f"https://a.test/{i}") for i in range(6)], now=T0)
    profile = {"name": "site"}
    cycle, _ = store.begin_cycle("harvest", profile=profile)
    run = store.start_run("extract", profile=profile)
    claimed = claim_all(store, "w", ["https://a.test"])
    store.complete_many("w", [(done(c.id, page=page(f"<p>{c.id}</p>".encode(), f"h{c.id}")), [])
                              for c in claimed[:3]], run_id=run)
    assert store.cycle_counts(cycle)["new"] == 3  # running: live
    store.complete_many("w", [(done(claimed[3].id, page=page(b"<p>x</p>", "hx")), [])], run_id=run)
    assert store.cycle_counts(cycle)["new"] == 4
    store.release("w", [c.id for c in claimed[4:]])  # left for later: deferred
    store.finish_run(run, status="completed", counters={})
    store.finish_cycle(cycle, origins=["https://a.test"])
    kept = store.cycle_counts(cycle)
    assert kept["new"] == 4 and kept["fetched"] == 4 and kept["deferred"] == 2
    assert len(kept["new_urls"]) == 4
    with store.db.engine.begin() as conn:  # the kept counts are what counting the fetches again gives
        stored = conn.exec_driver_sql(f"SELECT counts FROM cycles WHERE id = {cycle}").scalar_one()
        assert stored is not None
        conn.exec_driver_sql(f"UPDATE cycles SET counts = NULL WHERE id = {cycle}")
    assert store.cycle_counts(cycle) == kept
    assert store.cycle_counts(cycle, origins=["https://a.test"]) == kept  # a subset is counted: the same here
