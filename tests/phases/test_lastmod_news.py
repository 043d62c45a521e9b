"""A change a feed announces while extraction holds the page is not dropped by the completion that lands after it.

A host goes to extraction once its sitemaps are read, while its feeds are still being read beside it. Discovery makes
a known URL due on a newer lastmod only when it is DONE; a URL extraction has leased keeps its state, and its
completion (a skip on the lastmod read at claim, a 304, an unchanged 200) then wrote the URL DONE with its next
revisit: the announced change waited for that revisit, days later (a kill -9 week once ended a day with a page so
stale). The completion now compares the lastmod it was decided on with the stored one, in its UPDATE: one that grew
since the claim and is newer than our copy leaves the URL due at once.

The interleaving is forced, not hoped for: the feed is answered only once extraction has decided to skip the page,
and that skip is handed to the writer only once discovery has recorded the feed's news.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from datetime import timedelta

from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.frontier.discovered import Discovered
from harvester.phases.completions import CompletionBatcher
from harvester.runtime import CLOCK, utcnow
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

WAIT_S = 120.0
"""Generous bound on each forced step (a loaded machine); the steps wait on events, never on time."""
ARTICLES = ("/articles/told", "/articles/a", "/articles/b", "/articles/c")
TOLD = ARTICLES[0]


class Site:
    """Day 0 publishes every article (sitemap lastmod day 0). Overnight ``/articles/told`` changes; the sitemap (a
    nightly file) still says day 0, and the Atom feed announces it with ``updated`` on day 1."""

    def __init__(self) -> None:
        self.day = 0
        self.asked: Counter[tuple[int, str]] = Counter()
        self.skip_decided = threading.Event()
        self.news_recorded = threading.Event()
        self.hold_feed = False
        self.told_id: int | None = None

    def lastmod(self, path: str, *, feed: bool) -> str:
        day = 1 if (self.day and feed and path == TOLD) else 0
        return (run_at(day) - timedelta(hours=5)).isoformat()

    def version(self, path: str) -> int:
        return self.day if path == TOLD else 0

    async def handle(self, request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        path = request.path
        self.asked[(self.day, path)] += 1
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{origin}{p}</loc><lastmod>{self.lastmod(p, feed=False)}</lastmod></url>"
                           for p in ARTICLES)
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
        if path == "/feed.atom":
            if self.hold_feed:  # answered once extraction has decided on the page, from the day's first claim
                assert await asyncio.to_thread(self.skip_decided.wait, WAIT_S), "extraction never skipped the page"
            entries = "".join(
                f"<entry><id>{origin}{p}</id><title>{p}</title><link href='{origin}{p}'/>"
                f"<updated>{self.lastmod(p, feed=True)}</updated></entry>" for p in ARTICLES)
            return web.Response(content_type="application/atom+xml", text=(
                "<?xml version='1.0'?><feed xmlns='http://www.w3.org/2005/Atom'><id>x</id><title>News</title>"
                f"<updated>{self.lastmod(TOLD, feed=True)}</updated>{entries}</feed>"))
        if path in ARTICLES:
            v = self.version(path)
            etag = f'"{path[10:]}-v{v}"'
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers={"ETag": etag})
            text = (f"<html><head><title>{path}</title></head><body><main><article><h1>{path}</h1><p>Edition {v} "
                    f"of {path}, long enough to be taken for the article body by the extractor.</p></article>"
                    "</main></body></html>")
            return web.Response(content_type="text/html", headers={"ETag": etag}, text=text)
        if path == "/":
            return web.Response(content_type="text/html", text=(
                "<html><head><link rel='alternate' type='application/atom+xml' href='/feed.atom'></head>"
                "<body><main>home</main></body></html>"))
        return web.Response(status=404)


def force_the_interleaving(monkeypatch, site: Site, told_url: str) -> None:
    """The skip of ``told_url`` waits for discovery to have recorded the feed's newer lastmod for it, and
    ``Site.handle`` answers the feed only once that skip was decided (the URL leased, its completion in hand)."""
    put, add = CompletionBatcher.put, Discovered.add_discovered

    async def held_put(self, completion, outlinks):  # type: ignore[no-untyped-def]
        if completion.url_id == site.told_id and completion.status is None and not site.skip_decided.is_set():
            site.skip_decided.set()
            assert await asyncio.to_thread(site.news_recorded.wait, WAIT_S), "discovery never recorded the news"
        await put(self, completion, outlinks)

    def noted_add(self, batch, *, now=None):  # type: ignore[no-untyped-def]
        result = add(self, batch, now=now)
        if site.day and any(item.url == told_url and item.lastmod is not None and item.lastmod > run_at(1)
                            - timedelta(hours=6) for item in batch):
            site.news_recorded.set()
        return result

    monkeypatch.setattr(CompletionBatcher, "put", held_put)
    monkeypatch.setattr(Discovered, "add_discovered", noted_add)


async def test_a_change_announced_while_the_page_is_leased_is_not_dropped_by_its_skip(
    db_url, serve, clock, monkeypatch
):
    site = Site()
    origin = await serve(site.handle)
    told = origin + TOLD
    settings = settings_for(db_url, **{"revisit.lastmod_spot_check": 0.0, "politeness.per_host_start": 1})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        await aharvest(settings, profile)
        assert {p for (d, p) in site.asked if d == 0} >= {*ARTICLES, "/feed.atom"}, site.asked
        held = store.url_info(told)
        assert held is not None and held.state == "done", held
        site.told_id = store.url_id(told)
        # The host has proven its lastmod truthful (as ten announced changes would have): skips are allowed.
        store.add_lastmod_checks({origin: (20, 20)})

        site.day, site.hold_feed = 1, True
        force_the_interleaving(monkeypatch, site, told)
        CLOCK.travel_to(run_at(1))
        await arecrawl(settings, profile)
        assert site.skip_decided.is_set() and site.news_recorded.is_set()  # control: the race was played out
        info = store.url_info(told)
        assert info is not None
        latest = {page.url: page.etag for page in store.iter_pages(latest=True)}
        fetched_new = latest.get(told) == '"told-v1"'
        # The news survived the skip: the page was fetched in this run, or it is due now for the next one.
        assert fetched_new or (info.state in ("done", "queued") and info.next_fetch_at is not None
                               and info.next_fetch_at <= utcnow()), (info, latest.get(told))

        # The next scheduled look (minutes later) holds the announced version.
        site.hold_feed = False
        CLOCK.travel_to(run_at(1) + timedelta(minutes=10))
        await arecrawl(settings, profile)
        latest = {page.url: page.etag for page in store.iter_pages(latest=True)}
    assert latest[told] == '"told-v1"', (latest, site.asked)
    assert all(latest[origin + p] == f'"{p[10:]}-v0"' for p in ARTICLES[1:])
