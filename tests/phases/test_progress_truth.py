"""What extraction's progress says (the figure the flows log as "N of M due URLs done" and put in the
``extract-progress`` artifact) against what the loopback site was asked: never 100% while work is left, and a run
that ends part-way shows what it reached.

Stranger 47b: a stuck run logged "5 of 5 due URLs done (100%)" with a page hanging and only 4 done, a cancelled one
"40 of 40 (100%)" with 12 pages never asked: ``done`` was what had been claimed (a run claims in batches, ahead of its
requests), and the denominator grew with it.
"""

from __future__ import annotations

import pytest

from harvester import aharvest
from harvester.errors import Interrupted
from harvester.extraction import Page
from harvester.frontier import FrontierStore
from harvester.phases.results import Progress
from harvester.runtime import clear_stop, request_stop
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
        if in_flight:
            assert progress.done < progress.total and progress.percent < 100, (progress.done, progress.total)
    final = [progress for progress in seen if progress.final]
    assert len(final) == 1 and final[0].percent == 100.0, final


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
