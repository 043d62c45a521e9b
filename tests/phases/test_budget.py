"""The page budget: one per host per run across both phases, and nothing it defers is lost (issue 24, 1 and 2).

Before: discovery and extraction each counted the budget from zero (120 stored 148-177 pages a host), and URLs
over it were refused at admission, so once their sitemaps answered 304 no later run ever saw them again.
"""

from __future__ import annotations

from collections import Counter

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.settings import Settings, SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

SPECS = [HostSpec("a", pages=70, sitemap_children=2), HostSpec("b", pages=45, latency_s=0.002)]
BUDGET = 20


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
