"""Sitemaps robots.txt names on other hosts (sitemaps.org cross-submission): read politely, under that host's own
robots.txt, a few per run, and only their entries in the crawl's scope kept.

A hostile robots.txt once had up to ``max_sitemaps_per_host`` (2,000) files fetched from third parties per host
per run. Two real loopback servers count what reaches them; the third party is let past the address policy by the
profile (another port of 127.0.0.1 is refused otherwise: tests/hardening/test_address_policy.py).
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.phases.discover_sitemaps import CROSS_HOST_SITEMAPS
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

NAMED = 40


async def test_sitemaps_on_another_host_are_few_polite_and_kept_in_scope(sqlite_url, serve):
    third: Counter[str] = Counter()
    origins: dict[str, str] = {}

    async def third_party(request: web.Request) -> web.Response:
        third[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private/\n")
        if request.path.endswith(".xml"):
            n = request.path.rsplit("/", 1)[1].removesuffix(".xml")
            locs = f"<url><loc>{origins['seed']}/item/{n}</loc></url><url><loc>{origins['third']}/own/{n}</loc></url>"
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')
        return web.Response(status=404)

    async def seed(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            lines = [f"Sitemap: {origins['third']}/private/secret.xml"]  # disallowed there: never fetched
            lines += [f"Sitemap: {origins['third']}/maps/{n}.xml" for n in range(NAMED)]
            return web.Response(text="User-agent: *\nAllow: /\n" + "\n".join(lines) + "\n")
        return web.Response(content_type="text/html", text="<html><body>home</body></html>")

    origins["third"] = await serve(third_party)
    origins["seed"] = await serve(seed)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        profile = SiteProfile.build(seeds=(origins["seed"] + "/",), allow_addresses=("127.0.0.1",))
        await phases.discover(store, settings, profile)
        states = store.url_states()

    maps = sum(count for path, count in third.items() if path.startswith("/maps/"))
    assert 0 < maps <= CROSS_HOST_SITEMAPS, third  # control: some were read (before: all 40)
    assert all(count == 1 for count in third.values()), third
    assert third["/robots.txt"] == 1 and third["/private/secret.xml"] == 0  # under the host's own robots.txt
    items = [url for url in states if "/item/" in url]
    assert len(items) == maps  # the entries in scope are kept ...
    assert not [url for url in states if url.startswith(origins["third"])]  # ... the third party's own are not


async def test_discoverys_per_host_table_counts_the_requests_to_another_host(sqlite_url, serve):
    """The discover-hosts table lists every host discovery asked, a sitemap's other host too: counting each host
    once (review47b: a shared client listed every host in every task's table), it dropped the hosts that are neither
    the site's origins nor where they moved, and the requests (and failures) sent to a CDN's sitemaps with them."""
    third: Counter[str] = Counter()
    origins: dict[str, str] = {}

    async def third_party(request: web.Request) -> web.Response:
        third[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if request.path == "/maps/0.xml":
            locs = f"<url><loc>{origins['seed']}/item/0</loc></url>"
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')
        return web.Response(status=500)  # a failed sitemap: the table is where its host's failure shows

    async def seed(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {origins['third']}/maps/0.xml\n"
                                     f"Sitemap: {origins['third']}/maps/broken.xml\n")
        return web.Response(content_type="text/html", text="<html><body>home</body></html>")

    origins["third"] = await serve(third_party)
    origins["seed"] = await serve(seed)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        profile = SiteProfile.build(seeds=(origins["seed"] + "/",), allow_addresses=("127.0.0.1",))
        result = await phases.discover(store, settings, profile)

    assert third["/maps/0.xml"] == 1 and third["/maps/broken.xml"] >= 1, third  # control: both were asked
    assert origins["third"] in result.hosts, sorted(result.hosts)
