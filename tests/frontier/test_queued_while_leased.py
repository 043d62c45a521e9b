"""A URL is never queued while it is leased: a claim moves a queue entry into ``leases`` (keyed by the URL), so an
entry for a leased URL made the next claim of its host fail whole (``pk_leases``), and with it the extraction.

Seen in tests/phases/test_failed_and_duplicates_return.py under load (PostgreSQL, day 3): a page that failed the day
before, named by the sitemap with a newer lastmod. Discovery's upsert read it FAILED (``Discovered._known_rows``);
before it wrote, the extraction beside it queued the page for its recheck (``requeue_rechecks``) and leased it; then
the upsert's revive found the page QUEUED, moved nothing, yet queued it again by a second rank. Here that order is
forced. A listing page the listing crawl holds, named a detail by a sitemap, was queued the same way (both dialects).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from harvester.frontier import FrontierStore
from harvester.records import ErrorClass, UrlKind, UrlState
from harvester.settings import Settings

from .test_store import T0, claim_all, done, found

PAGE = "https://a.test/p"


def _queued(store: FrontierStore, url: str) -> int:
    """Queue entries of ``url`` (a leased URL has none)."""
    info = store.url_info(url)
    assert info is not None
    with store.db.tx(write=False) as tx:
        return int(tx.conn.exec_driver_sql(f"SELECT count(*) FROM queue WHERE url_id = {int(info.id)}").scalar_one())


@pytest.fixture
def pg_store(migrated_pg_url: str) -> Iterator[FrontierStore]:
    with FrontierStore.open(Settings(database_url=migrated_pg_url), upgrade=True) as opened:
        yield opened


@pytest.mark.postgres
def test_a_failed_page_leased_for_its_recheck_while_its_sitemap_is_read_is_not_queued_again(
    pg_store: FrontierStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = pg_store
    store.add_discovered([found(PAGE, lastmod=T0 - timedelta(days=1))], now=T0)
    at = T0
    for _ in range(store.settings.politeness.max_attempts):  # fails every attempt of its run
        (c,) = claim_all(store, "w", ["https://a.test"], now=at)
        store.complete("w", done(c.id, at, state=UrlState.FAILED, status=500, error_class=ErrorClass.HTTP_5XX,
                                 error="500", next_fetch_at=at + timedelta(minutes=1)))
        at += timedelta(minutes=1)
    assert store.url_states()[PAGE][0] == "failed"
    later = T0 + timedelta(days=30)  # past its recheck time; the site mended it meanwhile
    taken: list[Any] = []
    read = store.discovered._known_rows

    def read_then_extraction_starts(*args: Any, **kwargs: Any) -> Any:
        known = read(*args, **kwargs)  # discovery has read the page FAILED, and has not written yet ...
        # ... when the extraction beside it begins, on its own connection: the recheck is queued and leased.
        assert store.requeue_rechecks(["https://a.test"], now=later) == 1
        taken.extend(claim_all(store, "x", ["https://a.test"], now=later, lease_s=300))
        return known

    monkeypatch.setattr(store.discovered, "_known_rows", read_then_extraction_starts)
    store.add_discovered([found(PAGE, lastmod=later - timedelta(hours=6))], now=later)
    monkeypatch.undo()
    assert [c.url for c in taken] == [PAGE]
    assert _queued(store, PAGE) == 0  # leased: not in the queue too
    # The next claim of the host (another worker) finds nothing to take, and fails for nothing.
    assert claim_all(store, "y", ["https://a.test"], now=later, lease_s=300) == []
    store.complete("x", done(taken[0].id, later))
    assert store.url_states()[PAGE][0] == "done"


def test_a_listing_page_named_a_detail_while_the_listing_crawl_holds_it_is_queued_by_its_completion(
    store: FrontierStore,
) -> None:
    listing = "https://a.test/l"
    store.add_discovered([found(listing, kind=UrlKind.LISTING, source="listing:https://a.test/")], now=T0)
    (held,) = claim_all(store, "d", ["https://a.test"], kinds=(UrlKind.LISTING,))
    store.add_discovered([found(listing)], now=T0)  # the sitemap names it a detail while it is read
    assert _queued(store, listing) == 0
    assert claim_all(store, "w", ["https://a.test"]) == []  # it was queued and leased: this claim failed whole
    store.complete_many("d", [(done(held.id, content_hash="h1"), ())], read_as=UrlKind.LISTING)
    assert [c.url for c in claim_all(store, "w", ["https://a.test"])] == [listing]  # read again, as a detail


@pytest.mark.postgres
def test_a_lease_released_while_its_completion_is_written_is_not_queued(pg_store: FrontierStore) -> None:
    """A lease that ran out is handed back while its holder, slow but alive, writes the URL's completion: the URL is
    DONE, and in no queue entry. Queued from a read of the leases (the completion's delete not yet committed), it
    was DONE with a queue entry; its revisit's promotion then queued it again by another rank."""
    store = pg_store
    store.add_discovered([found(PAGE)], now=T0)
    (c,) = claim_all(store, "w", ["https://a.test"], lease_s=10)
    revisit = T0 + timedelta(days=1)
    with store.db.engine.connect() as completion:  # the holder's completion, its transaction left open
        completion.exec_driver_sql(f"SELECT url_id FROM leases WHERE url_id = {c.id} FOR UPDATE")
        completion.exec_driver_sql(f"DELETE FROM leases WHERE url_id = {c.id}")
        completion.exec_driver_sql("UPDATE urls SET state = 'done', last_status = 200, next_fetch_at = %s"
                                   f" WHERE id = {c.id}", (revisit,))
        released: list[int] = []
        expiry = threading.Thread(target=lambda: released.append(store.requeue_expired(now=T0 + timedelta(seconds=11))))
        expiry.start()
        _wait_for_a_lock_wait(store)  # the hand-back waits on the completion's lock on the lease
        completion.commit()
    expiry.join(timeout=120)
    assert released == [0]  # the completion came first: nothing was the expiry's to hand back
    assert store.url_states()[PAGE][0] == "done"
    assert _queued(store, PAGE) == 0
    (again,) = claim_all(store, "w", ["https://a.test"], now=revisit)  # its revisit: one entry, one lease
    assert again.url == PAGE


def _wait_for_a_lock_wait(store: FrontierStore) -> None:
    """Until a session of this test's database waits on a lock (bounded generously)."""
    with store.db.engine.connect() as watch:
        watch.execution_options(isolation_level="AUTOCOMMIT")
        for _ in range(12000):
            if watch.exec_driver_sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                     " AND wait_event_type = 'Lock'").scalar_one():
                return
            time.sleep(0.01)
    raise AssertionError("no session waited on a lock within 120 s")
