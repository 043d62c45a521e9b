"""A page moved away one day and back the next is in the snapshot again (a stranger's test: it was in neither URL).

Day 1 ``/x`` answers 200. Day 2 it answers 301 to ``/x-moved``, which the sitemap now lists. Day 3 ``/x`` answers 200
again, ``/x-moved`` answers 301 back to it, and the sitemap lists ``/x`` with its old lastmod. ``/x`` was recorded
moved on day 2, so its own revisit is a moved URL's long one; day 3's redirect to it is the news that it is back, and
it is asked that day. Daily runs 24 h apart on the harvester's clock, SQLite and PostgreSQL, judged by the server's
log and ``export --latest``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

ARTICLE = ("<html lang=en><head><title>Ferry</title></head><body><article><h1>Ferry</h1><p>"
           + "The ferry timetable changes next week for the winter season. " * 8 + "</p></article></body></html>")


@dataclass
class MovingBack:
    day: int = 1
    log: list[tuple[int, str, int]] = field(default_factory=list)

    def live(self) -> str:
        return "/x-moved" if self.day == 2 else "/x"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        origin = f"http://{request.host}"
        path = request.path
        response: web.StreamResponse
        if path == "/robots.txt":
            response = web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap.xml\n")
        elif path == "/sitemap.xml":
            response = web.Response(content_type="application/xml", text=(
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url>'
                f"<loc>{origin}{self.live()}</loc><lastmod>2026-01-05</lastmod></url></urlset>"))
        elif path == self.live():
            if request.headers.get("If-None-Match") == '"v1"':
                response = web.Response(status=304, headers={"ETag": '"v1"'})
            else:
                response = web.Response(content_type="text/html", text=ARTICLE, headers={"ETag": '"v1"'})
        elif path in ("/x", "/x-moved") and self.day >= 2:
            other = "/x" if path == "/x-moved" else "/x-moved"
            response = web.Response(status=301, headers={"Location": origin + other})
        else:
            response = web.Response(status=404, text="not here")
        if path.startswith("/x"):
            self.log.append((self.day, path, response.status))
        return response


async def test_a_page_moved_away_and_back_is_asked_at_its_own_address_and_exported(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    site = MovingBack()
    origin = await serve(site.handle)  # type: ignore[operator]
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    for day in (2, 3, 4):
        site.day = day
        CLOCK.travel_to(run_at(day))
        await arecrawl(settings, profile)
        with FrontierStore.open(settings) as store:
            latest = {page.url.removeprefix(origin) for page in store.iter_pages(latest=True)
                      if page.url_state == "done"}
        assert latest == {site.live()}, (day, latest, site.log)
    day3 = [(path, status) for day, path, status in site.log if day == 3]
    assert ("/x", 200) in day3 or ("/x", 304) in day3, site.log  # asked at its own address the day it came back
    assert len(day3) == len(set(day3)), site.log  # nothing asked twice
    assert [(path, status) for day, path, status in site.log if day == 4] in ([("/x", 304)], []), site.log
