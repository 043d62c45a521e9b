"""``harvester status`` counts queued URLs from ``queue_counts``, which triggers on ``queue`` keep (migration 0017):
equal to a plain COUNT of the queue after every way an entry moves, under concurrent workers and after a unit of
work that failed half-way, on SQLite and PostgreSQL; and ``stats`` never walks the queue to get it (issue 32)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from harvester.errors import LeaseLost
from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, UrlKind, UrlState
from harvester.settings import Settings

T0 = datetime(2026, 3, 2, tzinfo=UTC)
ORIGINS = ["https://a.test", "https://b.test", "https://c.test"]


def found(url: str, kind: UrlKind = UrlKind.DETAIL, score: float = 0.5) -> DiscoveredUrl:
    return DiscoveredUrl(url=url, kind=kind, source="sitemap:https://a.test/sitemap.xml", depth=0, score=score)


def plain_count(store: FrontierStore) -> dict[tuple[str, str], int]:
    """(origin, kind) -> entries of ``queue``, counted row by row."""
    with store.db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT h.origin, q.kind, count(*) FROM queue q JOIN hosts h ON h.id = q.host_id GROUP BY h.origin, q.kind"
        ).all()
    return {(str(origin), str(kind)): int(n) for origin, kind, n in rows}


def leased(store: FrontierStore) -> dict[str, int]:
    with store.db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT h.origin, count(*) FROM leases l JOIN hosts h ON h.id = l.host_id GROUP BY h.origin").all()
    return {str(origin): int(n) for origin, n in rows}


@contextmanager
def statements(store: FrontierStore) -> Iterator[list[str]]:
    """Every SQL statement the store's engine runs meanwhile."""
    seen: list[str] = []

    def record(_conn, _cursor, sql, *_args) -> None:  # type: ignore[no-untyped-def]
        seen.append(" ".join(sql.split()))

    event.listen(store.db.engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(store.db.engine, "before_cursor_execute", record)


def assert_status_counts_the_queue(store: FrontierStore) -> None:
    with statements(store) as seen:
        stats = store.stats()
    assert not [sql for sql in seen if " FROM queue " in f"{sql} "]  # the count is kept, not counted
    counted = plain_count(store)
    held = leased(store)
    for origin in ORIGINS:
        queued = sum(n for (o, _), n in counted.items() if o == origin)
        states = stats.hosts.get(origin, {"states": {}})["states"]
        assert states.get("queued", 0) == queued, origin
        assert states.get("leased", 0) == held.get(origin, 0), origin
    assert stats.by_state.get("queued", 0) == sum(counted.values())


def killed_half_way(store: FrontierStore) -> None:
    with store.db.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO queue (host_id, kind, rank, url_id) SELECT host_id, kind, 0, id + 100000"
                             " FROM urls")
        raise RuntimeError("killed")


def test_queued_counts_equal_a_plain_count_through_every_move_of_the_queue(store: FrontierStore) -> None:
    for origin in ORIGINS:
        store.add_discovered([found(f"{origin}/p{i}", score=i / 10) for i in range(12)]
                             + [found(f"{origin}/l{i}", kind=UrlKind.LISTING) for i in range(3)], now=T0)
    store.add_discovered([found(f"{ORIGINS[0]}/p1", score=5.0)], now=T0)  # known, rank raised: no new entry
    assert_status_counts_the_queue(store)
    claimed = store.claim("w", hosts=ORIGINS, per_host=5, lease_s=60, now=T0,
                          kinds=(UrlKind.DETAIL, UrlKind.LISTING))
    assert_status_counts_the_queue(store)
    done, retried, released = claimed[:6], claimed[6:9], claimed[9:]
    store.complete_many("w", [(Completion(url_id=c.id, state=UrlState.DONE, fetched_at=T0, status=200,
                                          next_fetch_at=T0 + timedelta(days=1), revisit_s=86_400.0),
                               [found(f"{c.url}/child")]) for c in done])
    for c in retried:  # a retry goes back into the queue, due after its back-off
        store.complete("w", Completion(url_id=c.id, state=UrlState.QUEUED, fetched_at=T0, status=503,
                                       next_fetch_at=T0 + timedelta(minutes=5)))
    assert store.release("w", [c.id for c in released[:3]]) == 3
    assert_status_counts_the_queue(store)
    # A unit of work that fails half-way (a process killed in it): its queue entries and their counts go together.
    with pytest.raises(RuntimeError, match="killed"):
        killed_half_way(store)
    with pytest.raises(LeaseLost):  # a completion whose lease is gone writes nothing, its outlinks neither
        store.complete("w", Completion(url_id=done[0].id, state=UrlState.DONE, fetched_at=T0, status=200),
                       [found(f"{ORIGINS[2]}/never-{i}") for i in range(5)])
    assert_status_counts_the_queue(store)
    assert store.requeue_expired(now=T0 + timedelta(hours=1)) > 0  # the rest of the leases expired
    assert_status_counts_the_queue(store)
    # A day on: the finished pages' revisits are promoted into the queue by the next claim.
    later = T0 + timedelta(days=1, minutes=1)
    store.claim("w", hosts=ORIGINS, per_host=2, lease_s=60, now=later)
    assert_status_counts_the_queue(store)


def test_queued_counts_stay_true_under_concurrent_workers(store: FrontierStore) -> None:
    for origin in ORIGINS:
        store.add_discovered([found(f"{origin}/p{i}", score=i / 100) for i in range(60)], now=T0)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(slot: int) -> None:
        owner = f"t{slot}"
        others = [f"t{i}" for i in range(4)]  # hosts shared too: claims meet on one host's queue
        try:
            start.wait()
            for turn in range(8):
                hosts = store.claim_hosts(owner, limit=1, lease_s=60, now=T0)
                if not hosts:
                    hosts = ORIGINS[slot % 3:slot % 3 + 1]
                batch = store.claim(owner, hosts=hosts, per_host=3, lease_s=60, now=T0, beside=others)
                # Each page links to a page of every host: admissions cross the other workers' hosts.
                store.complete_many(owner, [
                    (Completion(url_id=c.id, state=UrlState.DONE, fetched_at=T0, status=200),
                     [found(f"{o}/from-{slot}-{turn}-{c.id}") for o in ORIGINS]) for c in batch[:2]])
                store.release(owner, [c.id for c in batch[2:]])
                store.release_hosts(owner, hosts)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert_status_counts_the_queue(store)


def test_status_reads_no_url_row_but_the_leased_ones_on_sqlite(tmp_path: Path) -> None:
    """Every statement ``stats`` runs, as SQLite plans it, walks no table of URLs: the leased ones are read from
    the leases to their URLs, not every URL by an index with a lease looked up for each (82 ms at 1M URLs)."""
    with FrontierStore.open(Settings(database_url=f"sqlite:///{tmp_path / 'h.db'}"), upgrade=True) as store:
        store.add_discovered([found(f"{ORIGINS[0]}/p{i}") for i in range(50)], now=T0)
        store.claim("w", hosts=ORIGINS[:1], per_host=5, lease_s=60, now=T0)
        with statements(store) as seen:
            store.stats()
        with store.db.engine.connect() as conn:
            plans = {sql: [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all()]
                     for sql in seen if sql.startswith("SELECT")}
    walks = {sql: plan for sql, plan in plans.items()
             if any(step.startswith(("SCAN u ", "SCAN urls")) and "ix_urls_finished" not in step
                    and "COVERING INDEX ix_urls_moved" not in step and "COVERING INDEX ix_urls_missing" not in step
                    for step in plan)}  # the few moved and missing URLs (0018)
    assert walks == {}


@pytest.mark.postgres
def test_a_recount_meeting_a_fold_in_flight_counts_each_entry_once(migrated_pg_url: str) -> None:
    """``db check --repair`` while a worker folds the count rows: the recount waits for the fold's lock, then counts
    the queue once. Without that lock its DELETE missed the fold's new row (inserted after its snapshot) and the
    recount added the queue again: counted 10 for 5 queued."""
    from harvester.frontier.dialect_postgres import _PG_FOLD_COUNTS, QUEUE_COUNTS_LOCK

    with FrontierStore.open(Settings(database_url=migrated_pg_url), upgrade=True) as store:
        for i in range(5):  # one count row per statement, five rows for the fold to sum
            store.add_discovered([found(f"{ORIGINS[0]}/p{i}")], now=T0)
        done: list[int] = []
        with store.db.engine.connect() as folding:
            folding.exec_driver_sql(_PG_FOLD_COUNTS, (QUEUE_COUNTS_LOCK,))  # in flight: not committed
            recount = threading.Thread(target=lambda: done.append(store.recount_queue()))
            recount.start()
            with store.db.engine.connect() as watch:  # the recount waits on the fold (a lock not granted)
                for _ in range(600):
                    if watch.exec_driver_sql("SELECT count(*) FROM pg_locks WHERE NOT granted").scalar_one():
                        break
                    threading.Event().wait(0.1)
                else:
                    pytest.fail("the recount never waited on the fold")
            folding.commit()
            recount.join(timeout=120)
        assert done == [1]
        assert store.queue_count_drift() == []
        assert plain_count(store) == {(ORIGINS[0], "detail"): 5}
