"""Counts read while workers write are of one moment (stranger 42): after a SIGTERM the frontier printout said
"1250 URLs (1196 detail)" of 1254 (1200), and ``status --json`` 88 new of 84 fetched, each number summed or compared
across statements that PostgreSQL, at READ COMMITTED, ran on snapshots of their own. And a running cycle's
``deferred`` is 0 (nothing is left behind before it closes): it jumped 0 -> 282 as its hosts were first asked."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import event

from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, UrlKind, UrlState
from harvester.runtime import utcnow
from harvester.settings import Settings

ORIGIN = "https://a.test"


def test_frontier_counts_are_of_one_moment_while_a_url_is_completed(store: FrontierStore) -> None:
    store.add_discovered([DiscoveredUrl(f"{ORIGIN}/story-{n}", UrlKind.DETAIL, "seed") for n in range(4)])
    leased = store.claim("w", hosts=[ORIGIN], per_host=2, lease_s=600)
    assert len(leased) == 2
    other = FrontierStore.open(Settings(database_url=store.settings.database_url))  # a worker's connection
    fired: list[str] = []

    def a_worker_completes_a_url_meanwhile(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # Right after the first count of the read, as a worker's completion can land between two statements.
        if fired or "count(" not in statement.lower():
            return
        fired.append(statement)
        other.complete("w", Completion(url_id=leased[0].id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                       content_hash="h", next_fetch_at=utcnow() + timedelta(days=1)))

    event.listen(store.db.engine, "after_cursor_execute", a_worker_completes_a_url_meanwhile)
    try:
        stats = store.stats()
    finally:
        event.remove(store.db.engine, "after_cursor_execute", a_worker_completes_a_url_meanwhile)
        other.close()
    assert fired, "control: the completion landed during the read"
    assert (stats.total, stats.by_kind) == (4, {"detail": 4}), stats
    assert store.stats().by_state == {"done": 1, "leased": 1, "queued": 2}  # control: it did land


def test_a_running_cycles_deferred_is_zero_until_it_closes(store: FrontierStore) -> None:
    store.add_discovered([DiscoveredUrl(f"{ORIGIN}/story-{n}", UrlKind.DETAIL, "seed") for n in range(3)])
    cycle, _ = store.begin_cycle("harvest", profile={"name": "site"})
    run = store.start_run("extract", profile={"name": "site"})
    (first,) = store.claim("w", hosts=[ORIGIN], per_host=1, lease_s=600)
    store.complete("w", Completion(url_id=first.id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                   content_hash="h", next_fetch_at=utcnow() + timedelta(days=1)), run_id=run)
    assert store.cycle_counts(cycle)["deferred"] == 0  # 2 queued, but the cycle has not left them behind yet
    store.finish_cycle(cycle, origins=[ORIGIN], status="completed")
    assert store.cycle_counts(cycle)["deferred"] == 2

