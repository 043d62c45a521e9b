"""The page budget: one per host per run across both phases, and nothing it defers is lost (issue 24, 1 and 2).

Before: discovery and extraction each counted the budget from zero (120 stored 148-177 pages a host), and URLs
over it were refused at admission, so once their sitemaps answered 304 no later run ever saw them again.
"""

from __future__ import annotations

from collections import Counter

import pytest

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

SPECS = [HostSpec("a", pages=70, sitemap_children=2), HostSpec("b", pages=45, latency_s=0.002)]
BUDGET = 20


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def stored_by_host(settings: Settings) -> Counter[str]:
    with FrontierStore.open(settings) as store:
        return Counter(page.url.split("/", 3)[2] for page in store.iter_pages(latest=True))


def detail_requests(web, name: str, since: int = 0) -> int:  # type: ignore[no-untyped-def]
    details = set(web.truth[name].detail_urls())
    return sum(1 for r in web.records()[since:] if r.url in details and r.status in (200, 304))


async def test_one_budget_per_host_per_run_and_deferred_urls_are_taken_up_later(make_web, db_url):
    web = make_web(SPECS, seed=11)
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    budgeted = SiteProfile.build(seeds=tuple(web.seeds), max_pages_per_host=BUDGET)

    first = await aharvest(settings, budgeted, workers=2)  # two lease owners: the budget is the run's, not theirs

    for name in ("a", "b"):
        assert detail_requests(web, name) <= BUDGET, name
    netlocs = {web.origin(name).split("//")[1]: name for name in ("a", "b")}
    stored = stored_by_host(settings)
    assert all(stored[netloc] <= BUDGET for netloc in netlocs), stored
    assert all(stored[netloc] == BUDGET for netloc in netlocs), stored  # the budget is used, not wasted
    # What the budget left is known and reported, per host and in total.
    hosts = first.extract.hosts
    deferred = {name: hosts[web.origin(name)]["deferred_by_budget"] for name in ("a", "b")}
    assert all(count > 0 for count in deferred.values()), deferred
    assert first.extract.counters["deferred_by_budget"] == sum(deferred.values())

    # A second budgeted run takes the next BUDGET pages of each host, though nothing the site publishes changed
    # (its sitemaps and feeds now answer 304 and are not parsed again).
    mark = len(web.records())
    await arecrawl(settings, budgeted)
    for name in ("a", "b"):
        assert 0 < detail_requests(web, name, mark) <= BUDGET, name
    stored = stored_by_host(settings)
    assert all(stored[netloc] == 2 * BUDGET for netloc in netlocs), stored

    # A run without a budget takes up everything still deferred: the snapshot is the whole site.
    await arecrawl(settings, SiteProfile.build(seeds=tuple(web.seeds)))
    with FrontierStore.open(settings) as store:
        urls = {page.url for page in store.iter_pages(latest=True)}
    for name in ("a", "b"):
        allowed = set(web.truth[name].allowed_detail_urls())
        assert allowed <= urls, f"{name}: {len(allowed - urls)} deferred pages never fetched"
    assert not duplicates(web.records())


async def test_within_a_budget_announced_changes_then_pages_never_fetched_come_before_unchanged_revisits(
    make_web, db_url
):
    """A budgeted harvest leaves pages deferred; the next day's budgeted re-crawl of a site where a few pages
    changed (announced by their sitemap lastmod) spends each host's budget on those changes first, then on the
    pages never fetched, and only then on re-checking unchanged pages (304s): 3 days in a row, the deferred
    pages are taken up, never starved by revisits (docs/architecture.md, invariants 8 and 10)."""
    from harvester.runtime import CLOCK
    from harvester.testing.schedule import run_at

    web = make_web([HostSpec("a", pages=40, sitemap_only=0.5, feed_only=0.0, listing_only=0.0)], seed=5)
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    budget = 8
    budgeted = SiteProfile.build(seeds=tuple(web.seeds), max_pages_per_host=budget)
    try:
        CLOCK.travel_to(run_at(0))
        await aharvest(settings, budgeted)
        for day in (1, 2, 3):
            with FrontierStore.open(settings) as store:
                fetched_before = {page.url for page in store.iter_pages(kinds=None)}
            change = web.advance_day(changed=0.05 if day == 1 else 0.0, new=0.0, gone=0.0)
            announced = {url for url in change.all("changed") if url in fetched_before
                         and web.truth["a"].model.by_path[url[len(web.origin("a")):]].in_sitemap}
            mark = len(web.records())
            CLOCK.travel_to(run_at(day))
            await arecrawl(settings, budgeted)
            details = set(web.truth["a"].detail_urls())
            asked = [r for r in web.records()[mark:] if r.url in details]
            first = {r.url for r in asked if r.url not in fetched_before}
            rechecked = {r.url for r in asked if r.url in fetched_before}
            never_left = set(web.truth["a"].allowed_detail_urls()) - fetched_before
            assert len(asked) <= budget, day
            assert announced <= rechecked, (day, announced - rechecked)  # announced changes first
            # then the never-fetched: no unchanged page re-checked while one was left
            assert len(first) == min(budget - len(announced), len(never_left)), (day, len(first), len(rechecked))
            if len(never_left) > budget:
                assert rechecked == announced, (day, sorted(rechecked - announced))
    finally:
        CLOCK.reset()


async def test_a_standalone_extract_after_a_budgeted_harvest_reports_its_first_versions_as_new_once(
    make_web, db_url
):
    """``harvester extract`` on its own (no cycle open) is a cycle of its own: the first versions it fetches are
    new in it ("Last cycle"), and in no later cycle."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from harvester.cli_tables import status_of

    web = make_web([HostSpec("a", pages=25), HostSpec("b", pages=20)], seed=9)
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    budgeted = SiteProfile.build(seeds=tuple(web.seeds), max_pages_per_host=5)
    harvested = await aharvest(settings, budgeted)
    assert harvested.changes["new"] == 10 and harvested.changes["deferred"] > 10

    done = subprocess.run([str(Path(sys.executable).parent / "harvester"), "extract", "--db", db_url],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")})
    assert done.returncode == 0, done.stderr[-2000:]
    stored = sum(stored_by_host(settings).values())
    assert stored == 20  # the budget again: 5 more per host
    cycle = status_of(settings)["last_cycle"]
    assert cycle["id"] != harvested.changes["cycle"] and cycle["status"] == "completed", cycle
    assert (cycle["new"], cycle["changed"], cycle["deferred"]) == (10, 0, harvested.changes["deferred"] - 10), cycle

    after = await arecrawl(settings, SiteProfile.build(seeds=tuple(web.seeds)))  # no budget: the rest
    assert after.changes["new"] == harvested.changes["deferred"] - 10, after.changes
