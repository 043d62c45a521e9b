"""The writer process: discovery through it stores exactly what in-process writes store; errors come back."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import harvester.frontier.writer
from harvester import phases
from harvester.errors import InvalidRecord, StoreError, WriteConflict, WriterGone
from harvester.frontier import FrontierStore
from harvester.frontier.rows import merge
from harvester.frontier.writer import UrlWriter, writer_possible
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec, RobotsSpec

SPECS = [
    HostSpec("a", pages=120, robots=RobotsSpec(disallow=("/private/",)), disallowed_in_sitemap=0.1),
    HostSpec("b", pages=60, sitemap_children=3),
]
VOLATILE = {  # ids, and clock readings of the run
    "id", "host_id", "url", "source_id", "first_seen", "last_seen", "next_fetch_at", "last_fetched_at",
    "changed_at", "gone_at", "lease_until",
}


def _rows(store: FrontierStore) -> dict[str, dict[str, Any]]:
    out = {}
    for url in store.url_states():
        info = store.url_info(url)
        assert info is not None
        row = {key: value for key, value in asdict(info).items() if key not in VOLATILE}
        out[url] = row
    return out


async def test_discovery_through_the_writer_process_stores_what_in_process_writes_store(make_web, db_url, tmp_path):
    web = make_web(SPECS, seed=5)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    through = Settings.load(database_url=db_url).with_overrides(
        **{"discovery.writer_process_after": 0, "discovery.batch_size": 7}
    )
    with FrontierStore.open(through, upgrade=True) as store:
        result = await phases.discover(store, through, profile)
        via_writer = _rows(store)
    assert result.counters["writer_process_batches"] >= 10, "the writer process must have written the batches"
    in_process = Settings.load(database_url=f"sqlite:///{tmp_path / 'direct.db'}").with_overrides(
        **{"discovery.writer_process": False, "discovery.batch_size": 7}
    )
    with FrontierStore.open(in_process, upgrade=True) as store:
        result = await phases.discover(store, in_process, profile)
        direct = _rows(store)
    assert "writer_process_batches" not in result.counters
    assert len(direct) > 150
    assert via_writer.keys() == direct.keys()
    # Recency is scored against each run's own clock: scores agree closely, not to the last bit.
    differing = {
        url for url in direct
        if {**via_writer[url], "score": 0} != {**direct[url], "score": 0}
        or abs(via_writer[url]["score"] - direct[url]["score"]) > 1e-6
    }
    assert not differing, [
        {key: (via_writer[u][key], direct[u][key]) for key in direct[u] if via_writer[u][key] != direct[u][key]}
        for u in sorted(differing)[:3]
    ]


def _item(url: str) -> DiscoveredUrl:
    return DiscoveredUrl(url, UrlKind.DETAIL, "sitemap:https://w.example/s.xml", depth=1, score=5.0,
                         lastmod=datetime(2026, 11, 1, tzinfo=UTC))


async def test_an_invalid_record_is_refused_with_its_class_and_nothing_of_the_batch_is_written(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        writer = UrlWriter(settings, label="test")
        assert await writer.start()
        try:
            assert await writer.add([_item("https://w.example/a"), _item("https://w.example/b")]) == (2, 0, 0)
            with pytest.raises(InvalidRecord, match="not a url"):
                await writer.add([_item("https://w.example/c"), _item("not a url")])
            assert await writer.add([_item("https://w.example/a")]) == (0, 1, 0)
        finally:
            await writer.aclose()
        assert sorted(store.url_states()) == ["https://w.example/a", "https://w.example/b"]


@pytest.mark.postgres
async def test_a_deadlock_the_writer_loses_comes_back_as_a_write_conflict_and_the_writer_goes_on(pg_url):
    """CI once failed a harvest here: the child's deadlock came back as a bare StoreError, which nobody asks again.
    Now it is a ``WriteConflict``, and the host writes that batch in-process, where ``runtime.db`` asks again."""
    settings = Settings.load(database_url=pg_url)
    x, y = _item("https://w.example/x"), _item("https://w.example/y")
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([_item("https://w.example/seed")])  # the host's row exists: only URL rows contend
        writer = UrlWriter(settings, label="test")
        assert await writer.start()
        try:
            held = threading.Event()

            def crossing() -> None:
                """Hold x, let the child take y and wait on x, then want y: PostgreSQL must break the cycle."""
                with store.db.tx() as tx:
                    # The child's deadlock check (1 s) comes first, so the child is the victim.
                    tx.conn.exec_driver_sql("SET LOCAL deadlock_timeout = '20s'")
                    store.discovered.upsert(tx, merge([x]), datetime.now(UTC))
                    held.set()
                    deadline = time.monotonic() + 10
                    while not _waiting_on_a_lock(pg_url):
                        assert time.monotonic() < deadline, "the child never waited on x"
                        time.sleep(0.05)
                    store.discovered.upsert(tx, merge([y]), datetime.now(UTC))

            holder = asyncio.create_task(asyncio.to_thread(crossing))
            # The child writes only once x is held: under load (the final fresh-clone run) the thread had not taken
            # x yet, the child took both and committed, and no deadlock came.
            assert await asyncio.to_thread(held.wait, 60), "the holder never took x"
            with pytest.raises(WriteConflict, match="deadlock"):
                await writer.add([y, x])
            await holder
            assert writer.ready, "a passing error must not cost the writer"
            assert await writer.add([_item("https://w.example/z"), x]) == (1, 1, 0)
        finally:
            await writer.aclose()
        assert sorted(store.url_states()) == [f"https://w.example/{p}" for p in ("seed", "x", "y", "z")]


def _waiting_on_a_lock(pg_url: str) -> bool:
    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


async def test_a_dead_writer_is_a_store_error_and_close_reaps_it(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        writer = UrlWriter(settings, label="test")
        assert await writer.start()
        pid = writer.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(StoreError, match="writer process died"):
            await writer.add([_item("https://w.example/a")])
        await writer.aclose()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped, not a zombie


async def test_a_writer_that_cannot_open_the_store_leaves_the_host_writing_in_process(tmp_path):
    missing = Settings.load(database_url=f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}")
    writer = UrlWriter(missing, label="test")
    assert not await writer.start()
    assert writer.failed is not None
    await writer.aclose()


def test_no_writer_process_for_an_in_memory_database_or_when_switched_off(sqlite_url):
    assert writer_possible(Settings.load(database_url=sqlite_url))
    assert not writer_possible(Settings.load(database_url="sqlite://"))
    assert not writer_possible(Settings.load(database_url="sqlite:///:memory:"))
    assert not writer_possible(Settings.load(database_url=sqlite_url).with_overrides(
        **{"discovery.writer_process": False}))


def _writer_children() -> list[int]:
    """Live ``python -m harvester.frontier.writer`` children of this process (zombies excluded)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"harvester.frontier.writer" in cmdline:
            found.append(int(stat.parent.name))
    return found


async def _cancel_once_the_child_exists(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` while the writer child it started is still importing (about a second)."""
    while not _writer_children():
        await asyncio.sleep(0.005)
    await _cancelled(task)


async def _cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and see the cancellation come out of it."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def _the_slot_is_free(settings: Settings) -> None:
    again = UrlWriter(settings, label="again")
    assert await again.start()
    await again.aclose()


def _more_than_a_pipe_holds() -> list[DiscoveredUrl]:
    return [_item(f"https://w.example/{i}-{'x' * 100}") for i in range(3000)]


async def test_a_writer_killed_mid_host_leaves_the_host_writing_in_process_and_nothing_lost(make_web, db_url, tmp_path):
    # Slow sitemaps, so the kill lands between two of them, after the child has committed batches.
    specs = [HostSpec("slow", pages=200, sitemap_children=8, latency_s=0.2, feeds=())]
    web = make_web(specs, seed=3)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    through = Settings.load(database_url=db_url).with_overrides(
        **{"discovery.writer_process_after": 0, "discovery.batch_size": 5}
    )
    killed: list[int] = []

    async def kill_the_writer_once_it_has_written(store: FrontierStore) -> None:
        # Once more than one batch (``batch_size`` 5) has been stored since the child appeared, it has answered one:
        # the host sends it the next only then. (Ten rows in all, the earlier sign, were reached under load by the
        # rows written before it, and the child was killed before its first answer: CI, 0 batches counted.)
        before: list[int] = []
        while not killed:
            children = _writer_children()
            rows = len(store.url_states())
            if children and not before:
                before.append(rows)
            if children and rows > before[0] + 5:
                os.kill(children[0], signal.SIGKILL)
                killed.append(children[0])
            await asyncio.sleep(0.02)

    with FrontierStore.open(through, upgrade=True) as store:
        killer = asyncio.ensure_future(kill_the_writer_once_it_has_written(store))
        result = await phases.discover(store, through, profile)
        killer.cancel()
        via_writer = _rows(store)
    assert killed, "the writer process was never seen"
    assert result.counters["writer_process_lost"] == 1
    assert result.counters["writer_process_batches"] >= 1
    assert not _writer_children()
    in_process = Settings.load(database_url=f"sqlite:///{tmp_path / 'direct.db'}").with_overrides(
        **{"discovery.writer_process": False, "discovery.batch_size": 5}
    )
    with FrontierStore.open(in_process, upgrade=True) as store:
        await phases.discover(store, in_process, profile)
        direct = _rows(store)
    assert len(direct) > 150
    assert via_writer.keys() == direct.keys()


async def test_one_writer_process_at_a_time_and_the_slot_comes_back(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        first, second = UrlWriter(settings, label="first"), UrlWriter(settings, label="second")
        assert await first.start()
        assert not await second.start()
        assert second.failed is None, "a taken slot is not a failure: the host asks again later"
        await first.aclose()
        third = UrlWriter(settings, label="third")
        assert await third.start()
        assert await third.add([_item("https://w.example/a")]) == (1, 0, 0)
        await third.aclose()
        await second.aclose()


async def test_a_host_cancelled_while_its_writer_starts_leaves_no_child(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        writer = UrlWriter(settings, label="test")
        await _cancel_once_the_child_exists(asyncio.ensure_future(writer.start()))
        await writer.aclose()
        assert not _writer_children()
        assert not writer.ready
        await _the_slot_is_free(settings)


async def test_a_hung_writer_is_given_up_after_the_batch_timeout(sqlite_url, monkeypatch):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        writer = UrlWriter(settings, label="test")
        assert await writer.start()
        pid = writer.pid
        assert pid is not None
        monkeypatch.setattr(harvester.frontier.writer, "BATCH_TIMEOUT_S", 0.5)
        os.kill(pid, signal.SIGSTOP)
        try:
            # Far more than a pipe holds: the send itself must give up, not only the wait for the answer.
            with pytest.raises(WriterGone, match="no answer from the writer process"):
                await writer.add(_more_than_a_pipe_holds())
            assert not writer.ready
        finally:
            os.kill(pid, signal.SIGKILL)
            await writer.aclose()
        assert not _writer_children()


async def test_a_host_cancelled_while_its_writer_starts_closes_it(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=80)], seed=2)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    settings = Settings.load(database_url=sqlite_url).with_overrides(
        **{"discovery.writer_process_after": 0, "discovery.batch_size": 5}
    )
    with FrontierStore.open(settings, upgrade=True) as store:
        # Cancelled while the host waits for its writer to import and open the store.
        await _cancel_once_the_child_exists(asyncio.ensure_future(phases.discover(store, settings, profile)))
        assert not _writer_children()
        await _the_slot_is_free(settings)


async def test_a_close_cancelled_after_a_cancelled_start_still_reaps_the_child_and_frees_the_slot(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        writer = UrlWriter(settings, label="test")
        await _cancel_once_the_child_exists(asyncio.ensure_future(writer.start()))
        closing = asyncio.ensure_future(writer.aclose())
        await asyncio.sleep(0)  # the close is under way: waiting for the start thread
        await _cancelled(closing)
        await writer.aclose()  # the one closing task, which went on
        assert not _writer_children()
        await _the_slot_is_free(settings)


async def test_closing_after_a_cancelled_batch_to_a_stopped_child_does_not_hang(sqlite_url):
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        writer = UrlWriter(settings, label="test")
        assert await writer.start()
        pid = writer.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # it reads nothing more: the batch fills the pipe and the send blocks
        adding = asyncio.ensure_future(writer.add(_more_than_a_pipe_holds()))
        await asyncio.sleep(0.2)
        await _cancelled(adding)
        await asyncio.wait_for(writer.aclose(), 20)  # the stopped child is killed, the blocked send freed
        assert not _writer_children()
        await _the_slot_is_free(settings)
