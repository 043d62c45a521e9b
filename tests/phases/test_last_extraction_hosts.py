"""``harvester status`` "Last extraction": each host's line is that extraction run's own requests (detail pages),
never discovery's through the same polite client (robots.txt, sitemaps and their probes, feeds, listing pages),
for every host, including one the extraction never asked (issue 30)."""

from __future__ import annotations

from datetime import timedelta

from harvester import arecrawl
from harvester.cli_tables import status_of
from harvester.runtime import CLOCK
from harvester.testing import HostSpec, RobotsSpec
from harvester.testing.schedule import run_at


async def test_each_hosts_line_counts_the_extractions_own_requests_only(harvested_on_day_0):
    # b names no sitemap in robots.txt: discovery probes the usual places, and those answer 404.
    listings_only = HostSpec("b", pages=20, sitemap_only=0.0, listing_only=0.6, robots=RobotsSpec(sitemaps=False))
    web, settings, profile = await harvested_on_day_0([HostSpec("a", pages=30), listings_only], seed=4)
    web.advance_day(changed=0.1, new=0.05, gone=0.1)
    # Day 1, and again later that day when nothing is due: discovery asks robots.txt, sitemaps and listing pages
    # through the client it shares with extraction, which asks for pages only on day 1.
    for moment in (run_at(1), run_at(1) + timedelta(hours=2)):
        web.clear_records()
        CLOCK.travel_to(moment)
        await arecrawl(settings, profile)
        hosts = status_of(settings)["last_extract"]["hosts"]
        for name in web.names:
            details = {page.path for page in web.truth[name].model.pages}
            asked = [r for r in web.records() if r.host == name and r.path in details]
            line = hosts.get(web.origin(name), {})
            own = {"fetched": len(asked), "not_modified": sum(1 for r in asked if r.status == 304),
                   "gone": sum(1 for r in asked if r.status in (404, 410))}
            assert {key: line.get(key, 0) for key in own} == own, (name, moment, line)
            assert line.get("gone", 0) <= line.get("fetched", 0)
        if moment != run_at(1):
            assert all(line.get("fetched", 0) == 0 for line in hosts.values()), hosts
