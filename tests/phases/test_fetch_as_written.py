"""Order-sensitive servers and robots.txt see the URL as the site wrote it (RFC 3986 §6.2.2-normalized), while the
frontier keys it with its query sorted, so two spellings of a page are one entry, fetched once (issue 20, item 2).
"""

from __future__ import annotations

from aiohttp import web

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.rules.urls import canonicalizer_for
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

ARTICLE = ("<html><head><title>{title}</title></head><body><main><h1>{title}</h1><p>" + "Words. " * 60
           + "</p>{links}</main></body></html>")


async def test_pages_are_requested_and_robots_checked_as_the_site_spells_them(sqlite_url, serve):
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.raw_path)
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow: /search?q=\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            locs = ["/item?z=5&amp;a=en", "/item?a=en&amp;z=5", "/search?q=x&amp;a=1", "/item?z=6&amp;a=en&amp;m=%7e"]
            body = "".join(f"<url><loc>{origin}{loc}</loc></url>" for loc in locs)
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>'))
        if request.path == "/item":
            # Reads its parameters in order, as some application servers do: another order is another request.
            if request.query_string not in ("z=5&a=en", "z=6&a=en&m=~", "z=7&a=en"):
                return web.Response(status=400, text="parameters out of order")
            links = '<a href="/item?z=7&amp;a=en">next</a>' if request.query_string.startswith("z=5") else ""
            return web.Response(content_type="text/html", text=ARTICLE.format(title=request.query_string,
                                                                              links=links))
        if request.path == "/search":
            return web.Response(content_type="text/html", text=ARTICLE.format(title="search", links=""))
        return web.Response(status=404)

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), detail_patterns=(r"/item\?",))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        states = store.url_states()
    key = canonicalizer_for(settings.urls)
    # Two spellings of one page: one frontier entry (its key sorts the query), requested once, as first written.
    assert key(origin + "/item?z=5&a=en") == origin + "/item?a=en&z=5"
    assert states[origin + "/item?a=en&z=5"][0] == "done"
    assert [p for p in asked if p.startswith("/item?") and "z=5" in p] == ["/item?z=5&a=en"]
    # Escapes are normalized (RFC 3986 §6.2.2.2: %7e is "~"), the order kept.
    assert "/item?z=6&a=en&m=~" in asked and states[origin + "/item?a=en&m=~&z=6"][0] == "done"
    # robots.txt judges the URL as published: "Disallow: /search?q=" covers /search?q=x&a=1 (sorted: a=1&q=x).
    assert not [p for p in asked if p.startswith("/search")]
    # A link found on a page is requested as written too (z=7&a=en answers 400 otherwise).
    assert "/item?z=7&a=en" in asked and states[origin + "/item?a=en&z=7"][0] == "done"


def test_the_fetch_form_only_reorders_nothing_else():
    """The fetch form is the key with the site's parameter order: same host, path, escapes and dropped
    parameters, so it names the same resource the key does (RFC 3986 §6.2.2, §6.2.3)."""
    c = canonicalizer_for(Settings.load().urls)
    cases = {
        "HTTP://Example.COM:80/a/./b/../c?q=x&a=1#frag": "http://example.com/a/c?q=x&a=1",
        "http://example.com/s?utm_source=feed&b=%7e&a=%41": "http://example.com/s?b=~&a=A",
        "http://example.com/s?b=2&b=1&a=0": "http://example.com/s?b=2&b=1&a=0",
        "http://example.com/one?x=1": "http://example.com/one?x=1",
        "http://example.com": "http://example.com/",
    }
    for raw, fetch in cases.items():
        assert c.fetch_form(raw) == fetch, raw
        assert c(fetch) == c(raw)  # the fetch form canonicalizes to the same key
    assert c.fetch_form("?z=1&a=2", "http://example.com/p?k=1") == "http://example.com/p?z=1&a=2"
