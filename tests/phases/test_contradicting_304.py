"""A 304 that contradicts a lastmod newer than our copy is asked again in full, as far as the host's record allows.

Two servers. One keeps its ETags across edits (a template's) and answers 304 to pages its sitemap dates after our
copy: each such page is asked once more without validators, and its new version is kept. The other stamps every
sitemap entry with the moment it is asked (today's date) and answers 304 truthfully: it is probed a few times
(``revisit.REASK_PROBES`` answers), found to stamp, and its 304s are believed from then on (bar one re-asked a
run), so the daily re-crawl keeps the savings of conditional requests. The verdict is the host's, stored in the
frontier (``hosts.lastmod_reasks``).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.rules.revisit import REASK_PROBES
from harvester.runtime import CLOCK, utcnow
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

PAGES = [f"/articles/{n}" for n in range(8)]


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


class Site:
    """``stamps``: every lastmod is the moment of the request and nothing changes; else pages are edited each day,
    dated so in the sitemap, and keep their ETag (the server answers 304 to the old one)."""

    def __init__(self, *, stamps: bool) -> None:
        self.stamps = stamps
        self.day = 0
        self.unconditional: Counter[int] = Counter()
        """Day -> requests for pages sent without validators."""
        self.conditional: Counter[int] = Counter()

    def lastmod(self) -> str:
        return (utcnow() if self.stamps else run_at(self.day) - timedelta(hours=5)).isoformat()

    def version(self) -> int:
        return 0 if self.stamps else self.day

    async def handle(self, request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{origin}{p}</loc><lastmod>{self.lastmod()}</lastmod></url>" for p in PAGES)
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
        if request.path not in PAGES:
            return web.Response(status=404)
        etag = f'"{request.path[10:]}"'  # kept across edits
        if request.headers.get("If-None-Match") == etag:
            self.conditional[self.day] += 1
            return web.Response(status=304, headers={"ETag": etag})
        self.unconditional[self.day] += 1
        return web.Response(content_type="text/html", headers={"ETag": etag}, text=(
            f"<html><body><main><article><h1>{request.path}</h1><p>Edition {self.version()} of {request.path}, long "
            "enough to be taken for the article body by the extractor.</p></article></main></body></html>"))


async def recrawl_days(
    db_url: str, origin: str, site: Site, days: int, *, budget: int | None = None,
) -> FrontierStore:
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False,
                                max_pages_per_host=budget)
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(0))
    await aharvest(settings, profile)
    for day in range(1, days + 1):
        site.day = day
        CLOCK.travel_to(run_at(day))
        await arecrawl(settings, profile)
    return FrontierStore.open(settings)


async def test_a_304_hiding_an_edit_the_lastmod_announced_is_asked_again_and_the_edit_kept(db_url, serve, clock):
    site = Site(stamps=False)
    origin = await serve(site.handle)
    with await recrawl_days(db_url, origin, site, 2) as store:
        latest = {page.url: page.body for page in store.iter_pages(latest=True)}
        tally = store.reask_tally(origin)
    assert site.conditional[1] == site.conditional[2] == len(PAGES)  # control: every page answered 304 first
    # Day 1: the first contradicting 304s are asked again, up to the probes until their answers came (the rest,
    # read before them, are believed for the day); each found the edit, so from then on every contradicting 304
    # is asked again, once: the lastmod was right each time.
    assert REASK_PROBES <= site.unconditional[1] <= len(PAGES)
    assert site.unconditional[2] == len(PAGES)
    assert all(b"Edition 2 " in latest[origin + p] for p in PAGES), latest
    assert tally == (site.unconditional[1] + len(PAGES),) * 2


async def test_a_host_that_stamps_every_lastmod_is_probed_then_its_304s_are_believed(db_url, serve, clock):
    site = Site(stamps=True)
    origin = await serve(site.handle)
    with await recrawl_days(db_url, origin, site, 3) as store:
        tally = store.reask_tally(origin)
        latest = {page.url: page.body for page in store.iter_pages(latest=True)}
    assert site.unconditional[0] == len(PAGES)  # control: the harvest
    # Day 1: the contradicting 304s are asked again in full until the probes' answers came (no change found) ...
    assert REASK_PROBES <= site.unconditional[1] <= len(PAGES)
    # ... then believed: one a day is still asked again, so the record keeps being tested.
    assert site.unconditional[2] == site.unconditional[3] == 1
    assert site.conditional[1] == site.conditional[2] == site.conditional[3] == len(PAGES)
    assert tally == (site.unconditional[1] + 2, 0)
    assert all(b"Edition 0 " in latest[origin + p] for p in PAGES)


async def test_a_stamping_host_whose_re_asks_wait_for_the_next_run_is_still_judged(db_url, serve, clock):
    """A page budget of one request per page: the day's 304s spend it, so the re-asks they decide go out in the next
    run, whose answers no longer know they were re-asks. Counted when decided, they still judge the host: from the
    third day on, one page a day is asked without validators (the probe), not half the site every other day."""
    site = Site(stamps=True)
    origin = await serve(site.handle)
    with await recrawl_days(db_url, origin, site, 6, budget=len(PAGES)) as store:
        tally = store.reask_tally(origin)
    assert site.unconditional[0] == len(PAGES)  # control: the harvest
    assert site.conditional[1] == len(PAGES) and site.unconditional[1] == 0  # control: the budget held them back
    assert site.unconditional[2] >= REASK_PROBES  # control: day 1's re-asks went out on day 2
    assert site.unconditional[3] <= 1, site.unconditional
    assert [site.unconditional[day] for day in (4, 5, 6)] == [1, 1, 1], site.unconditional
    assert tally[1] == 0 and tally[0] <= len(PAGES) + 4, tally
