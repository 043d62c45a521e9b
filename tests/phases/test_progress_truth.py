"""What extraction's progress says (the figure the flows log as "N of M due URLs done" and put in the
``extract-progress`` artifact) against what the loopback site was asked: never 100% while work is left, and a run
that ends part-way shows what it reached.

Stranger 47b: a stuck run logged "5 of 5 due URLs done (100%)" with a page hanging and only 4 done, a cancelled one
"40 of 40 (100%)" with 12 pages never asked: ``done`` was what had been claimed (a run claims in batches, ahead of its
requests), and the denominator grew with it.
"""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from harvester import aharvest
from harvester.errors import Interrupted
from harvester.extraction import Page
from harvester.frontier import FrontierStore
from harvester.owners import make_owner, retire_owner
from harvester.phases.budget import PageBudget, page_budget
from harvester.phases.extract_host import ExtractWork
from harvester.phases.extract_phase import ProgressTally
from harvester.phases.results import Progress
from harvester.records import DiscoveredUrl, UrlKind
from harvester.rules.admission import Site
from harvester.runtime import clear_stop, request_stop, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec


async def test_progress_stays_below_100_while_pages_are_in_flight_or_due(make_web, db_url):
    web = make_web([HostSpec("a", pages=12, latency_s=0.25, max_in_flight=1)], seed=471)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="slow")
    seen: list[Progress] = []

    async def report(progress: Progress) -> None:
        seen.append(progress)

    with FrontierStore.open(settings, upgrade=True):
        await aharvest(settings, profile, on_progress=report)
    ticks = [progress for progress in seen if not progress.final]
    assert ticks, "a run of ~3 s reports at least once a second"
    for progress in ticks:
        in_flight = sum(host.in_flight for host in progress.hosts.values())
        answered = sum(host.fetched for host in progress.hosts.values())
        assert progress.done <= answered, (progress.done, answered)  # done is what was answered, not claimed
        if in_flight:  # a page's, or (before any page is due) discovery's: nothing known is 0 of 0, never 100%
            assert progress.percent < 100, (progress.done, progress.total)
            assert progress.done < progress.total or progress.done == progress.total == 0, (progress.done,
                                                                                           progress.total)
    final = [progress for progress in seen if progress.final]
    assert len(final) == 1 and final[0].percent == 100.0, final


def test_nothing_known_yet_is_0_percent_until_the_last_snapshot() -> None:
    """A tick before any page is due (discovery reading robots.txt) said 100%: 0 of 0. Only the last snapshot of a
    run with nothing to do is all done."""
    assert Progress(done=0, total=0, hosts={}).percent == 0.0
    assert Progress(done=0, total=0, hosts={}, final=True).percent == 100.0
    assert Progress(done=3, total=4, hosts={}).percent == 75.0


async def test_a_stopped_run_reports_what_it_reached(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=30, latency_s=0.02)], seed=472)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="stopped")
    asked = 0

    def stop_after_five(page: Page) -> dict[str, object]:
        nonlocal asked
        asked += 1
        if asked == 5:
            request_stop("test: the run is cancelled")
        return {}

    seen: list[Progress] = []

    async def report(progress: Progress) -> None:
        seen.append(progress)

    try:
        with pytest.raises(Interrupted), FrontierStore.open(settings, upgrade=True):
            await aharvest(settings, profile, extractor=stop_after_five, on_progress=report)
    finally:
        clear_stop()
    final = [progress for progress in seen if progress.final]
    assert len(final) == 1, seen
    reached = final[0]
    assert 5 <= reached.done < 20, reached.done  # answered before the stop: a few past the fifth, drained
    assert reached.done < reached.total and reached.percent < 100, (reached.done, reached.total)


async def test_what_is_due_is_read_once_per_period_and_estimated_in_between(sqlite_url):
    """The due count grows with the frontier (~1.5 s for a million due URLs on SQLite): read every one-second tick,
    a large site kept each worker reading most of the time (review 47b). Read once per ``DUE_EVERY_S``, the figure
    in between is that reading less what the worker claimed or finished since; once that is spent (nothing due as
    far as it knows) it is read again at the tick's pace."""
    origin = "http://127.0.0.1:9"
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    reads: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        if statement.lstrip().upper().startswith("SELECT COUNT(*)") and "FROM queue" in statement:
            reads.append(statement)

    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/p/{n}", UrlKind.DETAIL, "sitemap") for n in range(10)])
        work = ExtractWork(store, settings, Site(settings, profile, keep_reports=False), owner=make_owner("extract-0"),
                           run_id=None, hook=None,
                           budget=PageBudget(store, limit=page_budget(settings, profile), since=utcnow()))
        tally = ProgressTally(store, work, dict)
        event.listen(Engine, "before_cursor_execute", count)
        try:
            first = await tally.snapshot()
            ticks = [await tally.snapshot() for _ in range(5)]
            work.finished_total += 4  # four answered since the reading: they came out of what was due
            after = await tally.snapshot()
            work.finished_total += 6  # the reading is spent: asked again at the tick's pace (the store says 10 due)
            spent = await tally.snapshot()
            for _ in range(600):  # a tick's pace (or 20 times the last read, on a loaded machine): waited for
                if len(reads) > 1:
                    break
                await asyncio.sleep(0.05)
                spent = await tally.snapshot()
        finally:
            event.remove(Engine, "before_cursor_execute", count)
            work.leave()
            retire_owner(work.owner)
    assert (first.done, first.total) == (0, 10)
    assert all((t.done, t.total) == (0, 10) for t in ticks)
    assert (after.done, after.total) == (4, 10)
    assert len(reads) == 2, len(reads)  # the first snapshot's, and the spent one's: none for the six between
    assert (spent.done, spent.total) == (10, 20)
