"""A deleted page put back is asked the run its lists name it again (a stranger's trial: it waited a day).

Day 1 ``/articles/3`` is live and listed. Day 2 it answers 404 and its list (the sitemap, the feed or the listing
page) stops naming it: that run asks it (it vanished) and finds it gone. Day 3 it is back with its old bytes and the
list names it again with its old lastmod: nothing but the re-listing says so, and the run must ask it, count it
restored and have it in ``export --latest`` (through the library, and through the CLI). The other side of the
trade: a stale sitemap that never stops naming a deleted page costs a 404 at the gone recheck's growing interval,
not one a day. Daily runs 24 h apart on the harvester's clock
(and a few minutes either side), SQLite and PostgreSQL, judged by the server's log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
from aiohttp import web
from daily_cli import cli_on
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, threaded_site

ARTICLES = (1, 2, 3)
DEAD = "/articles/3"
HTML = {"Content-Type": "text/html; charset=utf-8"}


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def article(n: int) -> str:
    return (f"<html lang=en><head><title>Article {n}</title></head><body><article><h1>Article {n}</h1><p>"
            + f"Article {n} tells of the harbour, the ferries and the winter timetable. " * 8
            + "</p></article></body></html>")


@dataclass
class Site:
    """``/articles/3`` live on ``live`` days; named by ``via`` (the sitemap, the feed or the listing page) on
    ``listed`` days, never by the others. Article 1's lastmod moves every ``touch_every`` days: the sitemap is read
    in full then, and answers 304 (naming nothing) between. It always names articles 1 and 2, so their shape is known
    for a detail's."""

    live: set[int]
    listed: set[int]
    via: str = "sitemap"
    touch_every: int = 1
    day: int = 1
    log: list[tuple[int, int]] = field(default_factory=list)

    def names(self, where: str) -> list[int]:
        return [n for n in ARTICLES if n != 3 or (self.day in self.listed and where == self.via)]

    def answer(self, request: Asked) -> Answer:
        """The site's answer (``threaded_site``'s form; ``handle`` serves it through aiohttp)."""
        origin, path, etag_asked = request.origin, request.path, request.headers.get("if-none-match")
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, f"User-agent: *\nSitemap: {origin}/sitemap.xml\n".encode()
        if path == "/sitemap.xml":
            touched = max(1, self.day - self.day % self.touch_every)
            etag = f'"s{touched}-{len(self.names("sitemap"))}"'
            if etag_asked == etag:
                return 304, {"ETag": etag}, b""
            entries = "".join(f"<url><loc>{origin}/articles/{n}</loc><lastmod>2026-01-{touched if n == 1 else 5:02d}"
                              "T00:00:00Z</lastmod></url>" for n in self.names("sitemap"))
            return 200, {"Content-Type": "application/xml", "ETag": etag}, (
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>').encode()
        if path == "/feed.xml":
            items = "".join(f"<item><title>Article {n}</title><link>{origin}/articles/{n}</link></item>"
                            for n in self.names("feed"))
            return 200, {"Content-Type": "application/rss+xml"}, (
                f'<?xml version="1.0"?><rss version="2.0"><channel><title>A</title><link>{origin}/</link>'
                f"<description>A</description>{items}</channel></rss>").encode()
        if path == "/list/":
            links = "".join(f"<li><a href='/articles/{n}'>Article {n}</a></li>" for n in self.names("listing"))
            return 200, HTML, (f"<html><head><title>All articles</title></head><body><ul>{links}</ul></body>"
                               "</html>").encode()
        if path == DEAD:
            status = 200 if self.day in self.live else 404
            self.log.append((self.day, status))
            if status == 404:
                return 404, HTML, b"not found"
            if etag_asked == '"a3"':
                return 304, {"ETag": '"a3"'}, b""
            return 200, {**HTML, "ETag": '"a3"'}, article(3).encode()
        if path == "/":
            return 200, HTML, b"<html><head><title>A</title></head><body><p>Welcome.</p></body></html>"
        if path.startswith("/articles/"):
            return 200, HTML, article(int(path.rsplit("/", 1)[1])).encode()
        return 404, HTML, b"not here"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        status, headers, body = self.answer(Asked(request.path_qs, {k.lower(): v for k, v in request.headers.items()}))
        return web.Response(status=status, headers=headers, body=body)


def profile_for(origin: str, via: str) -> SiteProfile:
    if via == "listing":
        return SiteProfile.build(seeds=(f"{origin}/list/",), use_feeds=False)
    if via == "feed":
        return SiteProfile.build(seeds=(f"{origin}/", f"{origin}/feed.xml"), use_listings=False)
    return SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)


@pytest.mark.parametrize(("via", "shift_s"), [("sitemap", 0.0), ("sitemap", -300.0), ("sitemap", 300.0),
                                              ("listing", 0.0), ("feed", 0.0)])
async def test_a_deleted_page_named_again_is_asked_restored_and_exported_that_run(
    db_url: str, serve: Callable[..., object], clock: None, via: str, shift_s: float,
) -> None:
    site = Site(live={1, 3, 4}, listed={1, 3, 4}, via=via)
    origin = await serve(site.handle)  # type: ignore[operator]
    settings = settings_for(db_url)
    profile = profile_for(origin, via)
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    site.day = 2
    CLOCK.travel_to(run_at(2))
    await arecrawl(settings, profile)
    assert (2, 404) in site.log, site.log  # it vanished from its list: asked, and found gone

    site.day = 3
    CLOCK.travel_to(run_at(3, shift_s=shift_s))
    cycle = await arecrawl(settings, profile)
    assert [(day, status) for day, status in site.log if day == 3] in ([(3, 200)], [(3, 304)]), site.log
    assert cycle.changes["restored"] == 1, cycle.changes
    with FrontierStore.open(settings) as store:
        latest = {page.url for page in store.iter_pages(latest=True)}
    assert origin + DEAD in latest

    site.day = 4  # an ordinary page again: asked no more than any page
    CLOCK.travel_to(run_at(4, shift_s=shift_s))
    await arecrawl(settings, profile)
    assert len([day for day, _ in site.log if day == 4]) <= 1, site.log


@pytest.mark.parametrize("touch_every", [1, 3])
async def test_a_stale_sitemap_naming_a_deleted_page_every_day_costs_no_daily_404(
    db_url: str, serve: Callable[..., object], clock: None, touch_every: int,
) -> None:
    """Listed every day, though it answers 404 from day 2: asked at the gone recheck's growing interval. Each full
    read of the sitemap names it again, never *again after a read that did not*: read in full daily, or every third
    day with 304s between (a 304 names nothing, and leaves the read that named it the last full one)."""
    days = range(2, 12)
    site = Site(live={1}, listed={1, *days}, touch_every=touch_every)
    origin = await serve(site.handle)  # type: ignore[operator]
    settings = settings_for(db_url)
    profile = profile_for(origin, "sitemap")
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    for day in days:
        site.day = day
        CLOCK.travel_to(run_at(day, shift_s=-300.0 if day % 2 else 300.0))
        await arecrawl(settings, profile)
    asked = [day for day, status in site.log if status == 404]
    assert asked[0] == 2, site.log
    # Each answer that it is still gone doubles the wait (2, 4, 8, ...): every gap longer than the one before.
    gaps = [b - a for a, b in pairwise(asked)]
    assert len(asked) >= 3 and all(b > a for a, b in pairwise(gaps)), site.log


def test_through_the_cli_the_page_put_back_is_restored_and_exported_the_next_day(db_url: str, clock: None,
                                                                                  tmp_path: Path) -> None:
    """The stranger's days as the CLI tells them: ``restored: 1`` on day 3's summary, and in ``export --latest``."""
    site = Site(live={1, 3}, listed={1, 3})
    cli = cli_on(db_url)
    with threaded_site(site.answer) as origin:
        CLOCK.travel_to(run_at(1))
        cli("db", "upgrade")
        cli("harvest", f"{origin}/")
        for day in (2, 3):
            site.day = day
            CLOCK.travel_to(run_at(day))
            out = cli("recrawl")
        exported = tmp_path / "latest.jsonl"
        cli("export", "--latest", "--output", str(exported))
    assert "restored: 1" in out, out
    assert [(day, status) for day, status in site.log if day == 3] in ([(3, 200)], [(3, 304)]), site.log
    assert origin + DEAD in {json.loads(line)["url"] for line in exported.read_text().splitlines()}
