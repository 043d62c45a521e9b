"""A page that was gone and comes back is fetched again, in the run that finds it listed again (issue 30).

Day 1 some pages answer 410 and drop out of the sitemaps, feeds and listings; day 2 they answer again in a new
version, listed where they were with a newer lastmod. The daily re-crawl must ask them that day, store their new
version, count them as changed (they had a stored version) and hand them over in ``export --latest``. A gone URL
still named with no sign of change is asked again only at a growing interval (docs/operations.md §4b).
"""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, FetchResult, UrlKind
from harvester.rules.revisit import classify_outcome
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec
from harvester.testing.schedule import run_at

ORIGIN = "http://127.0.0.1:9"


async def test_a_gone_page_listed_again_is_fetched_stored_counted_and_exported(make_web, db_url, clock):
    web = make_web([HostSpec("a", pages=30), HostSpec("b", pages=20, sitemap_lastmod="published")], seed=7)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="site")
    CLOCK.travel_to(run_at(0))
    with FrontierStore.open(settings, upgrade=True):
        pass
    await aharvest(settings, profile)
    allowed = {url for name in web.names for url in web.truth[name].allowed_detail_urls()}

    gone = web.advance_day(changed=0.0, new=0.0, gone=0.2)
    CLOCK.travel_to(run_at(1))
    cycle = await arecrawl(settings, profile)
    went = gone.all("gone") & allowed
    assert set(cycle.changes["gone_urls"]) == went and went

    back = web.advance_day(changed=0.0, new=0.0, gone=0.0, returned=1.0)
    assert back.all("returned") == gone.all("gone")
    returned = back.all("returned") & allowed
    web.clear_records()
    CLOCK.travel_to(run_at(2))
    cycle = await arecrawl(settings, profile)
    # Announced: back in a sitemap whose lastmod is the page's modification (host a), newer than its gone time.
    announced = {url for url in returned if url.startswith(web.origin("a"))
                 and web.truth["a"].model.by_path[url[len(web.origin("a")):]].in_sitemap}
    asked = {web.url(r.host, r.path) for r in web.records() if r.status == 200}
    assert announced and announced <= asked, sorted(announced - asked)
    assert set(cycle.changes["changed_urls"]) == returned & asked
    assert cycle.changes["gone"] == 0

    # Day 3: the others (named again with no newer lastmod) are asked once their recheck time has come.
    web.advance_day(changed=0.0, new=0.0, gone=0.0)
    web.clear_records()
    CLOCK.travel_to(run_at(3))
    cycle = await arecrawl(settings, profile)
    asked |= {web.url(r.host, r.path) for r in web.records() if r.status == 200}
    assert returned <= asked, sorted(returned - asked)
    with FrontierStore.open(settings) as store:
        latest = {page.url: page for page in store.iter_pages(latest=True)}
    for url in returned:
        assert url in latest and latest[url].change == "changed", url

    # Day 4, nothing changed: the pages that came back are ordinary pages again.
    web.advance_day(changed=0.0, new=0.0, gone=0.0)
    CLOCK.travel_to(run_at(4))
    cycle = await arecrawl(settings, profile)
    assert cycle.changes["changed"] == cycle.changes["gone"] == cycle.changes["missing"] == 0


def test_a_gone_url_still_named_is_asked_again_at_a_growing_interval_not_daily(db_url, clock):
    """A source that keeps naming a dead URL (a stale sitemap, a link on an unchanged page) makes it due again
    only when its recheck time has come, and each answer that it is still gone doubles that time; a newer lastmod
    than the time it was found gone makes it due at once."""
    settings = Settings.load(database_url=db_url)
    url = ORIGIN + "/article/dead"
    found = DiscoveredUrl(url=url, source="sitemap:http://127.0.0.1:9/sitemap.xml", kind=UrlKind.DETAIL)
    start = run_at(0)
    asked: list[int] = []
    with FrontierStore.open(settings, upgrade=True) as store:
        for day in range(0, 16):
            now = start + timedelta(days=day)
            CLOCK.travel_to(now)
            store.add_discovered([found], now=now)
            due = [u for u in store.claim("t", hosts=[ORIGIN], per_host=10, lease_s=60.0, now=now) if u.url == url]
            if due:
                asked.append(day)
                answer = FetchResult(url=url, final_url=url, status=410, started_at=0.0, elapsed_s=0.0)
                outcome = classify_outcome(due[0], answer, None, settings=settings, now=now)
                store.complete("t", Completion(url_id=due[0].id, state=outcome.state, status=410, fetched_at=now,
                                               next_fetch_at=outcome.next_fetch_at, revisit_s=outcome.revisit_s))
        # Found on day 0, gone; then asked on a doubling interval, never daily.
        gaps = [b - a for a, b in pairwise(asked)]
        assert asked[0] == 0 and len(asked) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0], asked

        # A newer lastmod than its gone time makes it due in the very run that reads it.
        now = start + timedelta(days=16, hours=1)
        CLOCK.travel_to(now)
        store.add_discovered([found._replace(lastmod=now - timedelta(hours=1))], now=now)
        assert [u.url for u in store.claim("t", hosts=[ORIGIN], per_host=10, lease_s=60.0, now=now)] == [url]
