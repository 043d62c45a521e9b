"""A host's paged feeds are read beside its listing crawl (issue 22: wall time near the politeness limit).

Before: the listing crawl stopped after each batch until every feed it had found was read to its last page, so a
host's discovery took its pagination chain plus its feed chain, requests each waiting on the one before, while
its limit allowed more at once. Now one reader takes the feeds beside the listing crawl: the chains overlap, and
everything is still found.
"""

from __future__ import annotations

from harvester import aharvest
from harvester.frontier import FrontierStore
from harvester.settings import Settings, SiteProfile
from harvester.testing.record import RequestRecord, max_in_flight
from harvester.testing.sites import HostSpec

LIMIT = 4
SPEC = HostSpec("chains", pages=120, latency_s=0.05, listing_page_size=4, feed_entries=4, feeds=("rss",))


def overlaps(a: list[RequestRecord], b: list[RequestRecord]) -> int:
    return sum(1 for x in a for y in b if x.start < y.end and y.start < x.end)


async def test_feed_pages_are_read_beside_listing_pages_within_the_limit(make_web, sqlite_url):
    web = make_web([SPEC], seed=31)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        pass

    await aharvest(settings, SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT))

    records = web.records()
    feeds = [r for r in records if r.path.startswith("/feeds/")]
    listings = [r for r in records if r.path.startswith("/topics/")]
    assert len(feeds) > 10 and len(listings) > 10, (len(feeds), len(listings))  # two long chains
    assert overlaps(feeds, listings) >= 5  # side by side, not one after the other (before: 0)
    assert max_in_flight(records, "chains") <= LIMIT
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    missing = [url for url in web.truth["chains"].allowed_detail_urls() if states.get(url, ("",))[0] != "done"]
    assert not missing, missing[:5]
