"""A record is kept in the writer's batch without waiting for a write, the one it starts or one already under way
(issue 31: a slow host's records waited behind batches of other hosts' answers being written, and its workers waited
for its records); a write started that way which fails raises at the next record, its batch pending again.

The write is held on an event, so what waits for it is seen, not timed.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from harvester.errors import StoreError
from harvester.frontier import FrontierStore
from harvester.phases.completions import FLUSH_BACKLOG, FLUSH_ITEMS, WRITE_ATTEMPTS, CompletionBatcher
from harvester.records import Completion, UrlState
from harvester.runtime import utcnow
from harvester.settings import Settings

WAIT_S = 60.0
"""Generous bound on a forced step under load; the steps wait on events."""


def done(url_id: int) -> Completion:
    return Completion(url_id=url_id, state=UrlState.DONE, fetched_at=utcnow(), status=200, claimed=True)


async def test_a_record_waits_for_no_write_under_way_until_the_backlog_is_full(tmp_path, monkeypatch) -> None:
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'f.db'}")
    with FrontierStore.open(settings, upgrade=True) as store:
        writing, release = threading.Event(), threading.Event()
        written: list[int] = []
        real = store.complete_many

        def held(owner, items, **kwargs):  # type: ignore[no-untyped-def]
            writing.set()
            assert release.wait(WAIT_S)
            written.extend(c.url_id for c, _ in items)
            return real(owner, items, **kwargs)

        monkeypatch.setattr(store, "complete_many", held)
        writer = CompletionBatcher(store, "w", run_id=None)
        ids = iter(range(1, 10_000))
        for _ in range(FLUSH_ITEMS - 1):
            writer.keep(done(next(ids)), [])
        # Due: it starts the batch's write and returns without waiting for it (before, the record waited for the
        # write of 64 answers of every host, and the slow host's workers for their records).
        await asyncio.wait_for(writer.put(done(next(ids)), []), WAIT_S)
        assert await asyncio.to_thread(writing.wait, WAIT_S)  # the write is under way, held
        assert not release.is_set()

        for _ in range(FLUSH_ITEMS - 1):
            writer.keep(done(next(ids)), [])
        # Due too, while the first write is held: kept, and it returns (before, it waited for that write).
        await asyncio.wait_for(writer.put(done(next(ids)), []), WAIT_S)
        assert not release.is_set()

        while len(writer._pending) < FLUSH_BACKLOG - 1:
            writer.keep(done(next(ids)), [])
        backlogged = asyncio.ensure_future(writer.put(done(next(ids)), []))  # the backlog is full: it waits
        await asyncio.sleep(0.05)  # nothing can end it but the release: it only yields the loop
        assert not backlogged.done()

        release.set()
        await asyncio.wait_for(backlogged, WAIT_S)
        await writer.flush()
        assert sorted(written) == list(range(1, next(ids)))  # every record written once, none lost
        assert writer.counters["lease_lost"] == len(written)  # no URL was leased: the store skipped them all


async def test_a_write_started_by_a_record_that_fails_raises_at_the_next_record(tmp_path, monkeypatch) -> None:
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'f.db'}")
    with FrontierStore.open(settings, upgrade=True) as store:
        failing = [True]
        attempts = threading.Semaphore(0)
        real = store.complete_many

        def flaky(owner, items, **kwargs):  # type: ignore[no-untyped-def]
            attempts.release()
            if failing[0]:
                raise StoreError("the database went away")
            return real(owner, items, **kwargs)

        monkeypatch.setattr(store, "complete_many", flaky)
        monkeypatch.setattr("harvester.phases.completions.WRITE_BACKOFF_S", 0.0)
        writer = CompletionBatcher(store, "w", run_id=None)
        for url_id in range(1, FLUSH_ITEMS):
            writer.keep(done(url_id), [])
        await asyncio.wait_for(writer.put(done(FLUSH_ITEMS), []), WAIT_S)  # starts the write, which fails
        for _ in range(WRITE_ATTEMPTS):
            assert await asyncio.to_thread(attempts.acquire, True, WAIT_S)
        while writer._behind is not None and not writer._behind.done():
            await asyncio.sleep(0.01)
        with pytest.raises(StoreError):
            await writer.put(done(FLUSH_ITEMS + 1), [])
        assert len(writer._pending) == FLUSH_ITEMS + 1  # nothing lost: the failed batch and the new record
        failing[0] = False
        await writer.flush()
        assert writer._pending == [] and writer.counters["lease_lost"] == FLUSH_ITEMS + 1
