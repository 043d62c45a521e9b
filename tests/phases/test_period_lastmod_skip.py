"""A host whose lastmods proved truthful skips a page only when the lastmod's period ended before our last fetch.

The skip rule (``revisit.may_skip``, the extraction's ``_job``) compared the stored lastmod, the start of the period
a reduced-precision lastmod names, with our last fetch. A page a site edited on 9 December after our 05:00 fetch and
dated "2026-12-09" (midnight), "2026-12" (the 1st) or "2026-12-09T10:00:00" (zone-less: read at UTC+14, 20:00 the
day before) read as unchanged, and the next day's run completed it without a request: the change was missed on the
hosts trusted most (review47). The period's end is stored beside the lastmod (``urls.lastmod_until``), carried on
the claim, and decides.

Daily runs 24 h apart (give or take 5 minutes) on the harvester's clock; the site answers with ETags only (no
Last-Modified to judge the lastmod against), and the server's own log is the judge.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile

DAY0 = datetime(2026, 12, 9, 5, 0, tzinfo=UTC)
"""Day 0's run: 05:00 UTC on 9 December. The edits come at 10:00 that day, after it."""
DATES = {  # path: (day 0's lastmod, day 1's; edited after day 0's run)
    "/day": ("2026-12-09", "2026-12-09", True),  # edited early on the 9th and again after our fetch: same date
    "/month": ("2026-12", "2026-12", True),
    "/zoneless": ("2026-12-08T10:00:00", "2026-12-09T10:00:00", True),  # a UTC site's local time
    "/still": ("2026-12-08", "2026-12-08", False),  # control: its period ended before our fetch, and it is unchanged
}


class Site:
    """The sitemap dates each page as ``DATES`` says; an edited page serves version 2 from day 1."""

    def __init__(self) -> None:
        self.day = 0
        self.asked: Counter[tuple[int, str, int]] = Counter()
        """(day, path, status) of every page request: the server's access log."""

    async def handle(self, request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        path = request.path
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{origin}{p}</loc><lastmod>{dates[self.day]}</lastmod></url>"
                           for p, (*dates, _) in DATES.items())
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
        if path == "/":
            return web.Response(content_type="text/html", text="<html><body><main>home</main></body></html>")
        if path not in DATES:
            return web.Response(status=404)
        version = 2 if self.day and DATES[path][2] else 1
        etag = f'"{path[1:]}-v{version}"'
        if request.headers.get("If-None-Match") == etag:
            self.asked[(self.day, path, 304)] += 1
            return web.Response(status=304, headers={"ETag": etag})
        self.asked[(self.day, path, 200)] += 1
        return web.Response(content_type="text/html", headers={"ETag": etag}, text=(
            f"<html><head><title>{path}</title></head><body><main><article><h1>{path}</h1><p>Version {version} of "
            f"{path}, long enough to be taken for the article body by the extractor.</p></article></main></body>"
            "</html>"))


@pytest.mark.parametrize("shift_s", [-300, 300])
async def test_a_page_edited_in_its_lastmods_period_after_our_fetch_is_fetched_the_next_day(
    db_url, serve, clock, shift_s
):
    site = Site()
    origin = await serve(site.handle)
    settings = settings_for(db_url, **{"revisit.lastmod_spot_check": 0.0})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(DAY0)
        await aharvest(settings, profile)
        assert {path for (day, path, status) in site.asked if day == 0 and status == 200} == set(DATES)  # control
        # The host has proven its lastmod truthful (as twenty announced changes would have): skips are allowed.
        store.add_lastmod_checks({origin: (20, 20)})

        site.day = 1
        CLOCK.travel_to(DAY0 + timedelta(hours=24, seconds=shift_s))
        await arecrawl(settings, profile)
        latest = {page.url[len(origin):]: page.etag for page in store.iter_pages(latest=True)}
        truth = store.lastmod_truthfulness(origin)
    day1 = {path: status for (day, path, status) in site.asked if day == 1}
    assert "/still" not in day1, site.asked  # control: the truthful host's unchanged page is skipped
    edited = [path for path, (*_, changed) in DATES.items() if changed]
    assert {path: day1.get(path) for path in edited} == dict.fromkeys(edited, 200), site.asked
    assert all(latest[path] == f'"{path[1:]}-v2"' for path in edited), latest
    # Each change came with a lastmod whose period reaches past our fetch: a hit, never a miss for the host.
    assert truth == (20 + len(edited), 20 + len(edited)), truth
