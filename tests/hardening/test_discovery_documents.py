"""Discovery documents that teach nothing are not asked again every run (issue 31, item 6).

A sitemap that answers in full and cannot be used (billion laughs, an external entity, a gzip bomb past the cap)
was stored without the answer's validators and asked again after ``robots.error_cache_s`` (10 minutes): in full,
in every daily run. Now it keeps the validators (its next ask is conditional) and waits a growing interval.
Real loopback servers count every request; the days pass on the harvester's clock (``runtime.CLOCK``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

from aiohttp import web

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.rules.revisit_documents import unreadable_wait_s
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

LAUGHS = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;">]>'
          b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&lol2;</loc></url></urlset>')
XXE = (b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
       b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>&x;</loc></url></urlset>')
GOOD = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>{}/story</loc></url></urlset>'
DAYS = 10
DAY0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)


async def test_an_unusable_sitemap_is_asked_conditionally_and_ever_less_often(sqlite_url, serve, clock):
    full: Counter[str] = Counter()
    conditional: Counter[str] = Counter()
    asked_on: dict[str, list[int]] = {"/laughs.xml": [], "/xxe.xml": []}
    day = [0]

    async def handle(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {origin}/laughs.xml\n"
                                     f"Sitemap: {origin}/xxe.xml\nSitemap: {origin}/good.xml\n")
        if request.path in asked_on:
            asked_on[request.path].append(day[0])
        if request.path == "/laughs.xml":  # validators, honoured: a conditional ask costs a 304
            if request.headers.get("If-None-Match") == '"laughs-1"':
                conditional[request.path] += 1
                return web.Response(status=304, headers={"ETag": '"laughs-1"'})
            full[request.path] += 1
            return web.Response(body=LAUGHS, content_type="application/xml", headers={"ETag": '"laughs-1"'})
        if request.path == "/xxe.xml":  # no validators: only the interval saves requests
            full[request.path] += 1
            return web.Response(body=XXE, content_type="application/xml")
        if request.path == "/good.xml":
            return web.Response(text=GOOD.format(origin), content_type="application/xml")
        return web.Response(text="<html><body>page</body></html>", content_type="text/html")

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        for day[0] in range(DAYS):
            CLOCK.travel_to(DAY0 + timedelta(days=day[0]))
            await phases.discover(store, settings, profile)
        states = store.url_states()

    assert f"{origin}/story" in states  # control: the good sitemap was read
    assert full["/laughs.xml"] == 1, (full, conditional)  # before: 10 full downloads
    assert conditional["/laughs.xml"] >= 1
    expected, at = [0], 0  # waits of 1, 2, 4, 8 days after each unusable answer
    while (at := at + round(unreadable_wait_s(len(expected)) / 86400)) < DAYS:
        expected.append(at)
    assert asked_on["/laughs.xml"] == expected and asked_on["/xxe.xml"] == expected, asked_on  # before: every day
    assert expected == [0, 1, 3, 7]


async def test_a_redirected_sitemap_path_is_asked_once_a_run_and_its_target_conditionally(sqlite_url, serve, clock):
    """robots.txt answers 404, so the known paths are probed; ``/sitemap.xml`` redirects to
    ``/sitemap_index.xml``, itself a known path. Before: the target was asked again directly in the same run
    (twice a run), and every run in full (validators went on the redirect's first hop only)."""
    asked: list[tuple[int, str, bool]] = []
    day = [0]

    async def handle(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        conditional = bool(request.headers.get("If-None-Match") or request.headers.get("If-Modified-Since"))
        asked.append((day[0], request.path, conditional))
        if request.path == "/sitemap.xml":
            raise web.HTTPMovedPermanently(f"{origin}/sitemap_index.xml")
        if request.path == "/sitemap_index.xml":
            if request.headers.get("If-None-Match") == '"index-1"':
                return web.Response(status=304, headers={"ETag": '"index-1"'})
            index = f"<sitemap><loc>{origin}/sitemap-1.xml</loc></sitemap>"
            return web.Response(content_type="application/xml", headers={"ETag": '"index-1"'}, text=(
                f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{index}</sitemapindex>'))
        if request.path == "/sitemap-1.xml":
            if request.headers.get("If-None-Match") == '"one-1"':
                return web.Response(status=304, headers={"ETag": '"one-1"'})
            return web.Response(text=GOOD.format(origin), content_type="application/xml", headers={"ETag": '"one-1"'})
        if request.path == "/":
            return web.Response(text="<html><body>home</body></html>", content_type="text/html")
        return web.Response(status=404)

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        for day[0] in range(3):
            CLOCK.travel_to(DAY0 + timedelta(days=day[0]))
            await phases.discover(store, settings, profile)
        assert f"{origin}/story" in store.url_states()  # control: the chain was read

    for d in range(3):
        targets = [conditional for when, path, conditional in asked if when == d and path == "/sitemap_index.xml"]
        assert len(targets) == 1, (d, asked)  # once a run (before: twice)
        assert targets[0] is (d > 0), (d, asked)  # conditional after the first run (before: never)


async def test_a_redirected_robots_txt_target_is_asked_conditionally_every_later_run(sqlite_url, serve, clock):
    """robots.txt moved (301 to /robots-real.txt): the next runs asked /robots.txt conditionally and its target,
    the file whose validators were stored, in full every time (validators went on the first hop only)."""
    asked: list[tuple[int, str, int]] = []
    day = [0]

    async def handle(request: web.Request) -> web.Response:
        response: web.Response
        if request.path == "/robots.txt":
            raise web.HTTPMovedPermanently(f"http://{request.host}/robots-real.txt")
        if request.path == "/robots-real.txt":
            if request.headers.get("If-None-Match") == '"r1"':
                response = web.Response(status=304, headers={"ETag": '"r1"'})
            else:
                response = web.Response(text="User-agent: *\nDisallow: /private/\n", headers={"ETag": '"r1"'})
        else:
            response = web.Response(text="<html><body>home</body></html>", content_type="text/html")
        asked.append((day[0], request.path, response.status))
        return response

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_sitemaps=False, use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        for day[0] in range(3):
            CLOCK.travel_to(DAY0 + timedelta(days=day[0]))
            await phases.discover(store, settings, profile)

    targets = [(when, status) for when, path, status in asked if path == "/robots-real.txt"]
    assert targets == [(0, 200), (1, 304), (2, 304)], asked  # before: 200 every run


CHILD = """
import asyncio, sys
from harvester import phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

async def main(db, seed):
    settings = Settings.load(database_url=f"sqlite:///{db}")
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, SiteProfile.build(
            seeds=(seed,), use_sitemaps=False, use_feeds=False, listing_patterns=(r"/topics/",),
            detail_patterns=(r"/story/",)))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_listing_page_read_before_a_kill_is_not_asked_again(sqlite_url, serve, tmp_path):
    """Two listing pages of one batch: one answers at once, the other hangs. The one read is written at once, so
    a kill -9 while the other is in flight repeats only that one. Before, a batch was written after its slowest
    page: the page read long before the kill was lost with it and asked again."""
    import subprocess
    import sys

    asked: Counter[str] = Counter()
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        if request.path == "/":
            links = '<a href="/topics/fast/">fast</a> <a href="/topics/slow/">slow</a>'
            return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
        if request.path.startswith("/topics/"):
            if request.path == "/topics/slow/":
                await release.wait()  # in flight until the kill (answered in the rerun)
            name = request.path.split("/")[2]
            links = "".join(f'<a href="/story/{name}-{i}">{i}</a>' for i in range(3))
            return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
        if request.path.startswith("/story/"):
            return web.Response(text="<html><body>a story</body></html>", content_type="text/html")
        return web.Response(status=404)

    origin = await serve(handle)
    db = tmp_path / "killed.db"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), origin + "/"])
    settings = Settings.load(database_url=f"sqlite:///{db}")
    fast = f"{origin}/topics/fast/"
    try:
        written = False
        for _ in range(400):  # waits on the event itself: the fast page written while the slow one hangs
            await asyncio.sleep(0.05)
            if asked["/topics/slow/"] and db.exists():
                with FrontierStore.open(settings) as store:
                    written = store.url_states().get(fast, ("",))[0] == "done"
                if written:
                    break
    finally:
        child.kill()
        child.wait()
        release.set()
    assert asked["/topics/fast/"] == 1 and asked["/topics/slow/"] == 1, asked
    assert written, "the page read was not written while its batch's other page was in flight"

    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, SiteProfile.build(
            seeds=(origin + "/",), use_sitemaps=False, use_feeds=False, listing_patterns=(r"/topics/",),
            detail_patterns=(r"/story/",)))
        states = store.url_states()
    assert asked["/topics/fast/"] == 1, asked  # not asked again
    assert asked["/topics/slow/"] == 2, asked  # the one in flight is (control)
    assert all(states.get(f"{origin}/story/{name}-{i}") for name in ("fast", "slow") for i in range(3)), states
