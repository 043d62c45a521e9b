"""Discovery and extraction end to end against the local test web, on SQLite and PostgreSQL (no Prefect)."""

from __future__ import annotations

import socket
from collections import Counter
from urllib.parse import urlsplit

import hooks_sample
import pytest
from aiohttp import web

from harvester import aharvest, phases
from harvester.frontier import FrontierStore
from harvester.records import Completion, ErrorClass, UrlKind, UrlState
from harvester.runtime import utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import disallowed_hits, duplicates
from harvester.testing.render_traps import TRAP_PREFIXES
from harvester.testing.sites import HostSpec, RobotsSpec

SPECS = [
    HostSpec("a", pages=80, robots=RobotsSpec(disallow=("/private/",)), disallowed_in_sitemap=0.1),
    HostSpec("b", pages=50, latency_s=0.003, sitemap_children=3, traps=True),
]


LOOPBACK = ("127.0.0.1",)
"""A profile's allowance for a test whose site spans several loopback servers: the seed exemption covers the
seed's own port only (tests/hardening/test_address_policy.py)."""


def settings_for(db_url: str, **overrides: object) -> Settings:
    return Settings.load(database_url=db_url).with_overrides(**overrides)


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def robots_and_sitemap(request: web.Request, paths: list[str]) -> web.Response | None:
    """The answer of a one-off site to /robots.txt (naming /sitemap.xml) or /sitemap.xml (listing ``paths`` on
    its own origin); None for any other path."""
    origin = f"http://{request.host}"
    if request.path == "/robots.txt":
        return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
    if request.path == "/sitemap.xml":
        locs = "".join(f"<url><loc>{origin}{path}</loc></url>" for path in paths)
        return web.Response(content_type="application/xml", text=(
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
    return None


async def test_every_allowed_detail_page_is_discovered_without_configuration(make_web, db_url):
    web = make_web(SPECS, seed=3)
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
        known = store.url_states()
    for name in ("a", "b"):
        truth = web.truth[name]
        allowed = set(truth.allowed_detail_urls())
        assert allowed, "the test web must publish details"
        assert allowed <= set(known), f"{name}: missed {sorted(allowed - set(known))[:5]}"
        # Coverage is really mixed: some details are reachable through one source only.
        assert truth.listing_only() and truth.sitemap_only() and truth.feed_only()
        assert not set(truth.disallowed_urls()) & set(known)
    # One canonical form per page: nothing in the frontier that is not a real page of the site.
    pages = {u for n in ("a", "b") for u in web.truth[n].detail_urls()}
    strays = [u for u in known if u not in pages and not urlsplit(u).path.startswith(("/topics/", "/list"))]
    assert len(strays) <= 12, strays  # homepages and listing pages only
    assert result.reports[web.origin("a")]["rejected"].get("disallowed", 0) > 0


async def test_traps_stay_bounded_even_when_followed(make_web, sqlite_url):
    web = make_web([HostSpec("t", pages=30, traps=True, listing_page_size=5)], seed=5)
    settings = settings_for(sqlite_url, **{"discovery.listing_page_budget": 500, "discovery.listing_max_depth": 20})
    # Told that every trap is a listing page, discovery follows them: only the trap filters bound it.
    profile = SiteProfile.build(seeds=tuple(web.seeds), listing_patterns=(r"/calendar/", r"/shop", r"/a/b", r"sid="))
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
        known = list(store.url_states())
    per_kind = Counter()
    for url in known:
        for kind, marker in TRAP_PREFIXES.items():
            if marker in path_of(url):
                per_kind[kind] += 1
    assert per_kind["calendar"] >= 5, per_kind  # control: the traps were really entered
    assert all(count <= 20 for count in per_kind.values()), per_kind
    rejected = result.reports[web.origin("t")]["rejected"]
    assert any(key.startswith("trap:") for key in rejected), rejected


async def test_extraction_fetches_each_page_once_and_never_a_disallowed_one(make_web, db_url):
    web = make_web(SPECS, seed=3)
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        states = store.url_states()
        stats = store.stats().as_dict()
    records = web.records()
    assert duplicates(records) == {}
    assert disallowed_hits(records, web) == []
    fetched = {(r.host, r.path) for r in records if r.status == 200}
    for name in ("a", "b"):
        for url in web.truth[name].allowed_detail_urls():
            assert (name, path_of(url)) in fetched, url
            assert states[url][0] == "done" and states[url][1]
    assert stats["pages"] >= sum(len(web.truth[n].allowed_detail_urls()) for n in ("a", "b"))
    user_agents = {r.user_agent for r in records}
    assert user_agents == {settings.http.user_agent}


async def test_a_rerun_repeats_no_completed_fetch(make_web, sqlite_url):
    web = make_web(SPECS[:1], seed=4)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True):
        await aharvest(settings, profile)
        web.clear_records()
        await aharvest(settings, profile)
    # A new run asks again, conditionally, only what announces changes (sitemaps, feeds): each answers 304.
    # No page, listing or detail, is asked again.
    again = [r for r in web.records() if r.path not in ("/robots.txt",)]
    documents = {path_of(u) for u in web.truth["a"].sitemap_documents() + web.truth["a"].feed_documents()}
    assert {r.path for r in again} == documents, again[:5]
    assert all(r.status == 304 and (r.if_none_match or r.if_modified_since) for r in again), again[:5]


async def test_recrawl_after_a_day_costs_conditional_requests(make_web, sqlite_url):
    web = make_web(SPECS, seed=6)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        day = web.advance_day(changed=0.05, new=0.02, gone=0.01)
        web.clear_records()
        await phases.mark_due(settings, profile)
        found = await phases.discover(store, settings, profile, refresh=True)
        await phases.extract(store, settings, profile)
        states = store.url_states()
    records = web.records()
    by_path = {}
    for r in records:
        by_path.setdefault((r.host, r.path), []).append(r)
    changed = [u for n in day.changed for u in day.changed[n]]
    new = [u for n in day.new for u in day.new[n]]
    gone = [u for n in day.gone for u in day.gone[n]]
    assert changed and new and gone
    for url in changed + new:
        name = web.host_name(url)
        if url in set(web.truth[name].disallowed_urls()):
            continue
        assert any(r.status == 200 for r in by_path.get((name, path_of(url)), [])), f"not refetched: {url}"
    for url in gone:
        if url in states:
            assert states[url][0] == "gone", url
    # Unchanged known pages: asked conditionally and answered 304.
    unchanged = [
        u for n in ("a", "b") for u in web.truth[n].allowed_detail_urls() if u not in set(changed) | set(new)
    ]
    conditional = 0
    for url in unchanged:
        hits = by_path.get((web.host_name(url), path_of(url)), [])
        conditional += any(r.conditional and r.status == 304 for r in hits) or not hits
    assert conditional / len(unchanged) >= 0.99
    # Sitemaps: every one asked conditionally; those answering 304 were not parsed.
    sitemap_hits = [r for r in records if "sitemap" in r.path]
    assert sitemap_hits and all(r.conditional for r in sitemap_hits)
    assert found.counters["sitemaps_parsed"] == sum(1 for r in sitemap_hits if r.status == 200)
    assert found.counters["sitemaps_not_modified"] == sum(1 for r in sitemap_hits if r.status == 304)


async def test_a_hook_that_raises_fails_one_page_only(make_web, sqlite_url):
    web = make_web(SPECS[:1], seed=8)
    victim = web.truth["a"].allowed_detail_urls()[3]
    hooks_sample.EXPLODE_ON.add(victim)
    try:
        settings = settings_for(sqlite_url)
        profile = SiteProfile.build(seeds=tuple(web.seeds), extractor="hooks_sample:title_length")
        with FrontierStore.open(settings, upgrade=True) as store:
            await aharvest(settings, profile)
            states = store.url_states()
            pages = list(store.iter_pages())
            info = store.url_info(victim)
    finally:
        hooks_sample.EXPLODE_ON.discard(victim)
    # Stored like any page, with the hook's error and none of its fields (its next run retries the hook); the rest
    # went on.
    assert info is not None and info.last_error_class == "hook_failed" and "on purpose" in info.last_error
    assert states[victim][0] == "done"
    assert [(page.fields, page.hook_error) for page in pages if page.url == victim] == [
        ({}, {"class": "RuntimeError", "message": "this hook fails on purpose"})]
    others = [u for u in web.truth["a"].allowed_detail_urls() if u != victim]
    assert all(states[u][0] == "done" for u in others)
    assert all("title_length" in page.fields for page in pages if page.url != victim)


@pytest.mark.parametrize(
    "bad", ["ftp://example.org/", "not a url", "", "http://127.0.0.1:99999/", "http://exa mple.org/", "http://h:port/"]
)
def test_an_invalid_seed_is_a_clear_error(bad):
    from harvester.errors import ConfigError

    with pytest.raises(ConfigError, match="seed"):
        SiteProfile.build(seeds=(bad,))


async def test_sitemaps_and_feeds_are_parsed_off_the_event_loop(make_web, sqlite_url, monkeypatch):
    """feedparser takes about half a second per megabyte, and inflating and scanning a 7 MB sitemap ~50 ms: on
    the loop, every other host's discovery would stall that long. Each feed parse (of a feed or of a feed named as
    a sitemap) and each sitemap's preparation run in a worker thread."""
    import threading

    import harvester.discovery.sitemap_xml
    import harvester.phases.discover_feeds
    import harvester.phases.sitemap_entries

    threads: list[tuple[str, threading.Thread]] = []

    def spy(module: object, name: str, label: str) -> None:
        real = getattr(module, name)

        def spied(body: bytes, **kwargs: object) -> object:
            threads.append((label, threading.current_thread()))
            return real(body, **kwargs)

        monkeypatch.setattr(module, name, spied)

    spy(harvester.phases.discover_feeds, "parse_feed", "feed")
    spy(harvester.discovery.sitemap_xml, "parse_feed", "sitemap")
    spy(harvester.phases.sitemap_entries, "prepare_sitemap", "prepare")
    web = make_web([
        HostSpec("a", pages=40, feeds=("rss", "atom")),
        HostSpec("b", pages=40, feeds=("rss",), sitemap_children=0,
                 robots=RobotsSpec(body="User-agent: *\nDisallow:\n\nSitemap: {origin}/feeds/rss.xml\n")),
    ], seed=4)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, SiteProfile.build(seeds=tuple(web.seeds)))
    assert {label for label, _ in threads} == {"feed", "sitemap", "prepare"}, "feeds and sitemaps were read"
    assert result.counters["sitemaps_parsed"] >= 2
    assert threading.current_thread() not in [thread for _, thread in threads]  # the test runs on the loop


async def test_pages_found_only_by_links_and_redirects_are_fetched_in_the_same_run(sqlite_url, serve):
    """A chain of articles each linked only from the one before (longer than the retry rounds), and one that
    answers 301: every page is fetched by the one harvest, not one level per run."""
    from aiohttp import web

    fetched: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        path = request.path
        fetched.append(path)
        origin = f"http://{request.host}"
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if path == "/sitemap.xml":
            return web.Response(content_type="application/xml", text=(
                '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<url><loc>{origin}/articles/story-1</loc></url><url><loc>{origin}/articles/story-old</loc></url>"
                "</urlset>"))
        if path == "/articles/story-old":
            raise web.HTTPMovedPermanently(f"{origin}/articles/story-moved")
        if path.startswith("/articles/story-"):
            n = path.rsplit("-", 1)[1]
            link = f'<a href="/articles/story-{int(n) + 1}">next story</a>' if n.isdigit() and int(n) < 8 else ""
            return web.Response(content_type="text/html", text=(
                f"<html><head><title>Story {n}</title></head><body><main><h1>Story {n}</h1>"
                f"<p>{'Words of story ' + n + '. ' * 40}</p>{link}</main></body></html>"))
        return web.Response(status=404)

    origin = await serve(handle)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        await aharvest(settings, SiteProfile.build(seeds=(origin + "/",)))
    stories = {f"/articles/story-{n}" for n in range(1, 9)} | {"/articles/story-moved"}
    assert stories <= set(fetched), sorted(stories - set(fetched))
    assert settings.politeness.max_attempts + 1 < 8  # the chain is longer than the retry rounds


@pytest.mark.parametrize("line", ["Sitemap: /sitemap_index.xml", "Sitemap: http://127.0.0.2:9/sitemap.xml"])
async def test_a_relative_or_foreign_sitemap_line_still_finds_the_sitemaps(make_web, sqlite_url, line):
    """A relative Sitemap line is resolved against robots.txt's URL; one naming only a sitemap that cannot be
    read (here another host that refuses connections) leaves the known paths to probe instead of no sitemap."""
    web = make_web([HostSpec("a", pages=40, feeds=(), robots=RobotsSpec(body=f"User-agent: *\nDisallow:\n\n{line}\n"))],
                   seed=5)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, SiteProfile.build(seeds=tuple(web.seeds)))
        states = store.url_states()
    assert result.counters["sitemaps_parsed"] >= 2  # the index and its children
    assert set(web.truth["a"].sitemap_urls()) <= set(states)


async def test_a_sitemap_on_another_host_named_by_robots_txt_is_read(sqlite_url, serve):
    """sitemaps.org cross-submission: the site's robots.txt names an index on a CDN, whose children live on the
    CDN too (one behind a redirect there). They are read through the CDN's own robots.txt and gate; the site's
    entries are admitted, the CDN's own pages are not (out of scope), a child on a third host is not followed,
    and the site's known paths are never probed."""
    asked: dict[str, list[str]] = {"site": [], "cdn": [], "third": []}
    origins: dict[str, str] = {}

    def xml(body: str) -> web.Response:
        return web.Response(content_type="application/xml", text='<?xml version="1.0" encoding="UTF-8"?>' + body)

    async def site(request: web.Request) -> web.Response:
        asked["site"].append(request.path)
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow: /private/\nSitemap: {origins['cdn']}/maps/index.xml\n")
        return web.Response(status=404)

    async def cdn(request: web.Request) -> web.Response:
        asked["cdn"].append(request.path)
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /secret/\n")
        if request.path == "/maps/index.xml":
            children = [f"{origins['cdn']}/maps/a.xml", f"{origins['cdn']}/maps/old-b.xml",
                        f"{origins['third']}/maps/c.xml", f"{origins['cdn']}/secret/d.xml"]
            return xml('<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                       + "".join(f"<sitemap><loc>{c}</loc></sitemap>" for c in children) + "</sitemapindex>")
        if request.path == "/maps/old-b.xml":
            raise web.HTTPMovedPermanently(location="/maps/b.xml")
        if request.path in ("/maps/a.xml", "/maps/b.xml"):
            name = request.path[6]
            locs = [f"{origins['site']}/{name}/story-{n}" for n in range(3)]
            locs += [f"{origins['site']}/private/{name}", f"{origins['cdn']}/{name}/asset"]
            return xml('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                       + "".join(f"<url><loc>{loc}</loc></url>" for loc in locs) + "</urlset>")
        return web.Response(status=404)

    async def third(request: web.Request) -> web.Response:
        asked["third"].append(request.path)
        return web.Response(status=404)

    for name, handler in (("site", site), ("cdn", cdn), ("third", third)):
        origins[name] = await serve(handler)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(origins["site"] + "/",), use_listings=False, use_feeds=False,
                                allow_addresses=LOOPBACK)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
        states = store.url_states()
    stories = {f"{origins['site']}/{name}/story-{n}" for name in "ab" for n in range(3)}
    assert stories <= set(states)
    assert not [url for url in states if "/private/" in url or url.startswith(origins["cdn"])]
    assert result.counters["sitemaps_parsed"] == 3  # the index and both urlsets
    assert asked["cdn"][0] == "/robots.txt"
    assert "/secret/d.xml" not in asked["cdn"]  # the CDN's robots.txt governs requests to the CDN
    assert asked["third"] == []
    # No known path probed: robots.txt named a sitemap that could be read.
    assert not set(asked["site"]) & set(settings.discovery.known_sitemap_paths)


@pytest.mark.parametrize("status", [429, 503])
async def test_a_sitemap_that_answers_a_transient_error_once_is_asked_again(sqlite_url, serve, status):
    from aiohttp import web

    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            if asked.count("/sitemap.xml") == 1:
                return web.Response(status=status, headers={"Retry-After": "1"})
            locs = "".join(f"<url><loc>{origin}/articles/story-{n}</loc></url>" for n in range(5))
            return web.Response(content_type="application/xml", text=(
                '<?xml version="1.0" encoding="UTF-8"?>'
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        return web.Response(status=404)

    origin = await serve(handle)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, SiteProfile.build(seeds=(origin + "/",), use_listings=False))
        states = store.url_states()
    assert asked.count("/sitemap.xml") == 2
    assert result.counters["sitemap_retries"] == 1
    assert {f"{origin}/articles/story-{n}" for n in range(5)} <= set(states)


async def test_an_unreachable_robots_txt_is_named_as_the_reason_nothing_was_fetched(sqlite_url):
    # A port nobody listens on: connection refused. RFC 9309: disallow all. The report says why.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = settings_for(sqlite_url, **{"politeness.max_attempts": 1})
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, SiteProfile.build(seeds=(f"http://127.0.0.1:{port}/",)))
    assert any("robots.txt unavailable (connect)" in problem for problem in result.problems), result.problems
    assert result.counters["robots_unavailable:connect"] == 1


async def test_urls_handed_back_by_a_parked_host_do_not_keep_extraction_running(sqlite_url, serve):
    """Host a's articles move (301) to host b, whose Crawl-delay parks it: every fetch is refused and handed
    back unfetched, round after round. That is no progress: the run ends (it once went on for ever)."""
    import asyncio

    async def parked(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nCrawl-delay: 5000\n")
        return web.Response(content_type="text/html", text="<html><body><main>b</main></body></html>")

    b = await serve(parked)

    async def moving(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            # A crawl-delay longer than the hand-back of a refused URL: each round finds the last one's due again.
            return web.Response(text=f"User-agent: *\nCrawl-delay: 1.5\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            locs = "".join(f"<url><loc>{origin}/articles/story-about-{n}</loc></url>" for n in range(3))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        if request.path.startswith("/articles/"):
            raise web.HTTPMovedPermanently(b + request.path)
        return web.Response(status=404)

    a = await serve(moving)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(a + "/", b + "/"))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        result = await asyncio.wait_for(phases.extract(store, settings, profile), timeout=60)  # it ends: the point
        states = store.url_states()
        moved = [store.url_info(f"{a}/articles/story-about-{n}") for n in range(3)]
    # The redirects are not followed to a host this worker does not hold (b, parked: another worker's, or a later
    # run's): each article is recorded moved from its 301, and its new address waits in b's queue, handed back
    # a few times at most, never round after round.
    assert result.counters["parked"] <= 3 * (settings.politeness.max_attempts + 1)
    assert all(info is not None and (info.last_status, info.final_url) == (301, f"{b}{info.path}") for info in moved)
    assert all(states[f"{b}/articles/story-about-{n}"][0] == "queued" for n in range(3))


async def test_state_counters_name_the_state_each_url_is_left_in(sqlite_url, serve):
    """A failure below max_attempts leaves the URL queued for another try: counted as queued, not failed. Only
    the last attempt of a URL that never answers counts as failed."""
    asked: Counter[str] = Counter()

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        published = robots_and_sitemap(request, [f"/articles/{name}" for name in ("broken", "flaky", "fine")])
        if published is not None:
            return published
        if request.path == "/articles/broken" or (request.path == "/articles/flaky" and asked[request.path] == 1):
            return web.Response(status=500)
        return web.Response(content_type="text/html",
                            text=f"<html><body><main>the story at {request.path}</main></body></html>")

    origin = await serve(handle)
    settings = settings_for(sqlite_url, **{"politeness.max_attempts": 2, "politeness.backoff_base_s": 0.05})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        result = await phases.extract(store, settings, profile)
        states = store.url_states()
    assert states[f"{origin}/articles/broken"][0] == "failed"
    assert states[f"{origin}/articles/flaky"][0] == "done"
    assert asked["/articles/broken"] == 2
    assert result.counters["state:failed"] == 1  # broken's second attempt; its first left it queued
    assert result.counters["state:queued"] == 2  # broken's and flaky's first attempts
    assert result.counters["state:done"] >= 2


async def test_failures_first_met_in_later_rounds_get_all_their_attempts_in_the_run(sqlite_url, serve):
    """Broken pages found one link deeper each round fail first in different rounds; their retries come due at
    different times. Each still gets every attempt within the run, not only those the first few waits allow."""
    asked: Counter[str] = Counter()
    levels = 5

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        published = robots_and_sitemap(request, ["/news/story-about-level-0"])
        if published is not None:
            return published
        if request.path.startswith("/news/broken-story-about-"):
            return web.Response(status=500)
        if not request.path.startswith("/news/story-about-level-"):
            return web.Response(status=404)
        level = int(request.path.rsplit("-", 1)[1])
        links = f'<a href="/news/broken-story-about-{level}">broken</a>'
        if level + 1 < levels:
            links += f'<a href="/news/story-about-level-{level + 1}">next</a>'
        return web.Response(content_type="text/html", text=f"<html><body><main>{level} {links}</main></body></html>")

    origin = await serve(handle)
    # The five broken pages are the last five to fail in a row, which parks a host by default: this test is about
    # the run's waits for retries, so parking waits for more.
    settings = settings_for(sqlite_url, **{"politeness.max_attempts": 3, "politeness.backoff_base_s": 0.1,
                                           "politeness.backoff_max_s": 0.4, "politeness.park_after_failures": 20})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        result = await phases.extract(store, settings, profile)
        states = store.url_states()
    broken = [f"/news/broken-story-about-{level}" for level in range(levels)]
    assert {path: asked[path] for path in broken} == {path: 3 for path in broken}
    assert all(states[origin + path][0] == "failed" for path in broken)
    assert result.counters["state:failed"] == levels


@pytest.mark.parametrize("named", [False, True])
async def test_an_html_page_for_a_sitemap_is_a_soft_404_not_an_attack(sqlite_url, serve, named):
    """Many sites answer any path with an HTML page. A guessed sitemap path answered so is as good as a 404 (no
    problem reported, no attack counted); one robots.txt names is reported as an HTML page."""
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow:\n" + (f"Sitemap: {origin}/map\n" if named else ""))
        if request.path == "/sitemap_index.xml":
            locs = "".join(f"<url><loc>{origin}/articles/story-{n}</loc></url>" for n in range(3))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        return web.Response(content_type="text/html", text="<!DOCTYPE html>\n<html><body>Not found</body></html>")

    origin = await serve(handle)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
        states = store.url_states()
    assert {f"{origin}/articles/story-{n}" for n in range(3)} <= set(states)
    assert result.counters["rejected:bad_content"] == 0
    assert not [problem for problem in result.problems if "XXE" in problem]
    html_problems = [problem for problem in result.problems if "is an HTML page" in problem]
    assert html_problems == ([f"sitemap {origin}/map is an HTML page, not a sitemap"] if named else [])
    assert "/sitemap.xml" in asked  # control: the soft 404 before the index was asked (probing stops at the index)


@pytest.mark.parametrize(("everything_moved", "sitemap"), [(True, True), (False, True), (False, False)])
async def test_a_seed_that_moved_to_another_host_is_harvested_there(sqlite_url, serve, everything_moved, sitemap):
    """The seed host 301s its pages to another origin (a site that moved): all of them, robots.txt included, or
    only its pages, its own robots.txt and sitemap paths answering 404. That origin joins the crawl's scope,
    recorded in the frontier, so extraction (another Site, as in another task) keeps it. Its robots.txt's sitemap
    is read, or with none its section fronts are; its articles are harvested; the move is reported; the homepage
    is asked once, not twice."""
    asked: Counter[str] = Counter()
    new: list[str] = []

    async def old_site(request: web.Request) -> web.Response:
        if not everything_moved and (request.path == "/robots.txt" or "sitemap" in request.path):
            return web.Response(status=404)
        raise web.HTTPMovedPermanently(location=new[0] + request.path_qs)

    async def new_site(request: web.Request) -> web.Response:
        asked[request.path] += 1
        if request.path == "/robots.txt":
            line = f"Sitemap: {new[0]}/maps/a.xml\n" if sitemap else ""
            return web.Response(text="User-agent: *\nDisallow:\n" + line)
        if request.path == "/maps/a.xml" and sitemap:
            locs = "".join(f"<url><loc>{new[0]}/news/story-{n}-about-things</loc></url>" for n in range(4))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        if request.path == "/":
            return web.Response(content_type="text/html",
                                text='<html><body><nav><a href="/news/">News</a></nav></body></html>')
        if request.path == "/news/":
            links = "".join(f'<a href="/news/story-{n}-about-things">story {n}</a>' for n in range(4))
            return web.Response(content_type="text/html", text=f"<html><body><main>{links}</main></body></html>")
        if request.path.startswith("/news/story-"):
            return web.Response(content_type="text/html",
                                text=f"<html><body><main>the story at {request.path}</main></body></html>")
        return web.Response(status=404)

    old = await serve(old_site)
    new.append(await serve(new_site))
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(old + "/",), use_feeds=False, allow_addresses=LOOPBACK)
    with FrontierStore.open(settings, upgrade=True) as store:
        discovered = await phases.discover(store, settings, profile)
        extracted = await phases.extract(store, settings, profile)
        states = store.url_states()
        assert store.moved_hosts() == {old: new[0]}
    stories = [f"{new[0]}/news/story-{n}-about-things" for n in range(4)]
    assert all(states.get(url, ("missing",))[0] == "done" for url in stories), {url: states.get(url) for url in stories}
    assert extracted.counters["state:done"] >= 4
    assert discovered.counters["seeds_moved"] == 1
    assert any(f"redirects to {new[0]}/" in problem for problem in discovered.problems), discovered.problems
    assert asked["/"] == 1
    assert asked["/maps/a.xml"] == (1 if sitemap else 0)


@pytest.mark.parametrize("skipped", [False, True])
async def test_a_seed_that_moves_after_its_first_harvest_is_followed(sqlite_url, serve, skipped):
    """Harvested once at its old address, the site then moves: every path answers 301 to a new origin. The next
    discovery, asking the homepage it would ask anyway (due again), finds the move, and the new origin's articles
    are harvested (their text names the host: they are not the old pages' duplicates); the new homepage is asked
    once. Also from a frontier that recorded the seed's redirect as out
    of scope (skipped, never due again), as the listing crawl does on its own."""
    moved: list[str] = []
    asked: Counter[str] = Counter()

    def page_for(request: web.Request, stories: int) -> web.Response:
        path = request.path
        if path == "/robots.txt" or "sitemap" in path:
            return web.Response(status=404)
        if path == "/":
            return web.Response(content_type="text/html",
                                text='<html><body><nav><a href="/news/">News</a></nav></body></html>')
        if path == "/news/":
            links = "".join(f'<a href="/news/story-{n}-about-things">story {n}</a>' for n in range(stories))
            return web.Response(content_type="text/html", text=f"<html><body><main>{links}</main></body></html>")
        if path.startswith("/news/story-"):
            return web.Response(content_type="text/html",
                                text=f"<html><body><main>the story at {request.host}{path}</main></body></html>")
        return web.Response(status=404)

    async def old_site(request: web.Request) -> web.Response:
        if moved:
            raise web.HTTPMovedPermanently(location=moved[0] + request.path_qs)
        return page_for(request, 2)

    async def new_site(request: web.Request) -> web.Response:
        asked[request.path] += 1
        return page_for(request, 4)

    old = await serve(old_site)
    new = await serve(new_site)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(old + "/",), use_feeds=False, allow_addresses=LOOPBACK)
    with FrontierStore.open(settings, upgrade=True) as store:
        first = await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        assert first.counters["seeds_moved"] == 0
        moved.append(new)
        store.make_due([old])  # the next day: what was read is due again
        if skipped:  # the listing crawl's own record of an out-of-scope redirect
            listings = store.claim("old-run", hosts=[old], per_host=10, lease_s=60, kinds=(UrlKind.LISTING,))
            (seed,) = [c for c in listings if c.url == old + "/"]
            store.release("old-run", [c.id for c in listings if c is not seed])
            store.complete("old-run", Completion(
                url_id=seed.id, state=UrlState.SKIPPED, fetched_at=utcnow(), status=301,
                error_class=ErrorClass.OUT_OF_SCOPE, error="redirect refused"))
            assert store.url_states()[old + "/"][0] == "skipped"
        second = await phases.discover(store, settings, profile)
        extracted = await phases.extract(store, settings, profile)
        states = store.url_states()
        assert store.moved_hosts() == {old: new}
    stories = [f"{new}/news/story-{n}-about-things" for n in range(4)]
    assert all(states.get(url, ("missing",))[0] == "done" for url in stories), {url: states.get(url) for url in stories}
    assert extracted.counters["state:done"] >= 4
    assert second.counters["seeds_moved"] == 1
    assert asked["/"] == 1


async def test_a_seed_that_redirects_only_for_now_does_not_widen_the_scope(sqlite_url, serve):
    """A 302 (a consent wall, a login, a geo check) is not a move: the other host stays out of scope. Later runs
    ask the seed only when it is due, within the scope, and never the other host again."""
    other: list[str] = []
    asked: Counter[str] = Counter()

    async def wall(request: web.Request) -> web.Response:
        asked["wall" + request.path] += 1
        return web.Response(content_type="text/html", text="<html><body><main>accept cookies</main></body></html>")

    async def site(request: web.Request) -> web.Response:
        asked["site" + request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(status=404)
        raise web.HTTPFound(location=other[0] + "/consent")

    other.append(await serve(wall))
    origin = await serve(site)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_feeds=False, allow_addresses=LOOPBACK)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
        assert store.moved_hosts() == {}
        assert (asked["site/"], asked["wall/consent"]) == (1, 1)  # the first run follows, to see where it leads
        store.make_due([origin])
        await phases.discover(store, settings, profile)  # due: asked as the listing crawl would, within the scope
        assert (asked["site/"], asked["wall/consent"]) == (2, 1)
        await phases.discover(store, settings, profile)  # not due: not asked
        assert (asked["site/"], asked["wall/consent"]) == (2, 1)
        assert store.moved_hosts() == {}
    assert result.counters["seeds_moved"] == 0


async def test_with_nothing_published_the_homepages_sections_lead_to_the_items(sqlite_url, serve):
    """No robots.txt, no sitemap, no feed: the homepage links two-word category paths (one relative, each
    behind a redirect to its slash form) and site furniture. The categories are read as listings and their
    products harvested; the furniture is not asked."""
    asked: Counter[str] = Counter()

    async def shop(request: web.Request) -> web.Response:
        asked[request.path] += 1
        path = request.path
        if path == "/":
            nav = '<a href="/c/shoes">Shoes</a> <a href="c/shirts">Shirts</a> <a href="/about">About</a>'
            nav += ' <a href="/cart">Cart</a> <a href="/privacy-policy">Privacy</a>'
            return web.Response(content_type="text/html", text=f"<html><body><nav>{nav}</nav></body></html>")
        if path in ("/c/shoes", "/c/shirts"):
            raise web.HTTPMovedPermanently(location=path + "/")
        if path in ("/c/shoes/", "/c/shirts/"):
            name = path.split("/")[2]
            items = "".join(f'<li><a href="/p/{name}-item-{n}">{name} {n}</a></li>' for n in range(5))
            return web.Response(content_type="text/html", text=f"<html><body><ul>{items}</ul></body></html>")
        if path.startswith("/p/"):
            return web.Response(content_type="text/html",
                                text=f"<html><body><main>the product {path}</main></body></html>")
        return web.Response(status=404)

    origin = await serve(shop)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, SiteProfile.build(seeds=(origin + "/",)))
        states = store.url_states()
    products = [f"{origin}/p/{name}-item-{n}" for name in ("shoes", "shirts") for n in range(5)]
    assert all(states.get(url, ("missing",))[0] == "done" for url in products), states
    assert not {"/about", "/cart", "/privacy-policy"} & set(asked)


@pytest.mark.parametrize(("variant_first", "variant_redirects"), [(True, False), (False, False), (False, True)])
async def test_the_url_a_page_names_canonical_holds_its_content(sqlite_url, serve, variant_first, variant_redirects):
    """A product is listed as /p/shoe and as /p/shoe?colour=blue; both declare /p/shoe canonical. Whichever is
    read first, /p/shoe holds the content and the variant is its duplicate (the first read used to win). A
    variant that redirects (302) to /p/shoe is not /p/shoe: it never takes the content over."""

    async def shop(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if variant_redirects and request.query_string:
            raise web.HTTPFound(location=request.path)
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            urls = [f"{origin}/p/shoe-{n}?colour=blue" for n in range(3)] + [f"{origin}/p/shoe-{n}" for n in range(3)]
            priorities = ("0.9", "0.1") if variant_first else ("0.1", "0.9")
            locs = "".join(f"<url><loc>{url}</loc><priority>{priorities[0] if '?' in url else priorities[1]}"
                           "</priority></url>" for url in urls)
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        canonical = f"{origin}{request.path}"
        return web.Response(content_type="text/html", text=(
            f'<html><head><link rel="canonical" href="{canonical}"><title>{request.path}</title></head>'
            f"<body><main>the product {request.path}</main></body></html>"))

    origin = await serve(shop)
    settings = settings_for(sqlite_url, **{"politeness.per_host_start": 1})
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False))
        states = store.url_states()
        snapshot = [page.url for page in store.iter_pages(latest=True)]
    for n in range(3):
        assert states[f"{origin}/p/shoe-{n}"][0] == "done"
        assert states[f"{origin}/p/shoe-{n}?colour=blue"][0] == "duplicate"
    assert sorted(snapshot) == [f"{origin}/p/shoe-{n}" for n in range(3)]


async def test_the_target_of_a_permanent_redirect_is_downloaded_once(sqlite_url, serve):
    """A sitemap lists old addresses that 301 to new ones. The answer the redirect led to is the target's page:
    the target is recorded from it, not asked again."""
    asked: Counter[str] = Counter()

    async def site(request: web.Request) -> web.Response:
        asked[request.path] += 1
        published = robots_and_sitemap(request, [f"/old/story-{n}" for n in range(3)])
        if published is not None:
            return published
        if request.path.startswith("/old/"):
            raise web.HTTPMovedPermanently(location=request.path.replace("/old/", "/new/"))
        return web.Response(content_type="text/html",
                            text=f"<html><body><main>the story at {request.path}</main></body></html>")

    origin = await serve(site)
    settings = settings_for(sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False))
        states = store.url_states()
        pages = {page.url for page in store.iter_pages()}
    assert pages == {f"{origin}/new/story-{n}" for n in range(3)}
    assert all(states[f"{origin}/new/story-{n}"][0] == "done" for n in range(3))
    assert [asked[f"/new/story-{n}"] for n in range(3)] == [1, 1, 1]


async def test_a_paginated_lists_items_are_harvested_whatever_their_shape(sqlite_url, serve):
    """No sitemap; a feed whose entries have another shape; the homepage links a paginated list (rel=next) of
    /article/<page>-<n> items, a shape no generic rule knows. Every item is harvested; the furniture is not."""
    asked: Counter[str] = Counter()

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        path = request.path
        if path == "/robots.txt" or "sitemap" in path:
            return web.Response(status=404)
        if path == "/":
            return web.Response(content_type="text/html", text=(
                '<html><head><link rel="alternate" type="application/atom+xml" href="/feed.atom"></head><body>'
                '<a href="/list?page=1">News</a> <a href="/about">About</a> <a href="/privacy-policy">Privacy</a>'
                "</body></html>"))
        if path == "/feed.atom":
            entries = "".join(
                f'<entry><id>urn:x:{n}</id><title>F{n}</title><updated>2024-05-0{n}T00:00:00Z</updated>'
                f'<link rel="alternate" href="/feedart/{n}"/></entry>' for n in range(1, 4))
            return web.Response(content_type="application/atom+xml", text=(
                '<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title><id>urn:f</id>'
                f"<updated>2024-05-03T00:00:00Z</updated>{entries}</feed>"))
        if path == "/list":
            number = int(request.query.get("page", "1"))
            links = "".join(f'<a href="/article/{number}-{n}">item {number}-{n}</a> ' for n in range(1, 6))
            after = f'<a rel="next" href="/list?page={number + 1}">next</a>' if number < 4 else ""
            return web.Response(content_type="text/html", text=f"<html><body><main>{links}</main>{after}</body></html>")
        return web.Response(content_type="text/html",
                            text=f"<html><body><main>the page at {path}</main></body></html>")

    origin = await serve(handle)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",))
    with FrontierStore.open(settings, upgrade=True) as store:
        discovered = await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        states = store.url_states()
    items = [f"{origin}/article/{number}-{n}" for number in range(1, 5) for n in range(1, 6)]
    assert all(states.get(url, ("missing",))[0] == "done" for url in items), {url: states.get(url) for url in items}
    assert all(states.get(f"{origin}/feedart/{n}", ("missing",))[0] == "done" for n in range(1, 4))
    assert discovered.counters["links_as_items"] == 20
    assert asked["/about"] == 0 and asked["/privacy-policy"] == 0


@pytest.mark.parametrize("seed", ["/sitemap_index.xml", "/feed.xml"])
async def test_a_seed_naming_a_sitemap_or_feed_is_read_as_one(sqlite_url, serve, seed):
    """The operator seeds the site's sitemap index (or feed), which robots.txt does not name: it is read once, as
    what it is, its entries harvested; it is not queued as a listing page, and no known path is probed."""
    asked: Counter[str] = Counter()

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        origin = f"http://{request.host}"
        path = request.path
        if path == "/sitemap_index.xml":
            return web.Response(content_type="application/xml", text=(
                '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<sitemap><loc>{origin}/maps/posts.xml</loc></sitemap></sitemapindex>"))
        if path == "/maps/posts.xml":
            locs = "".join(f"<url><loc>{origin}/news/story-about-{n}</loc></url>" for n in range(3))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        if path == "/feed.xml":
            items = "".join(
                f"<item><title>{n}</title><link>{origin}/news/story-about-{n}</link></item>" for n in range(3))
            return web.Response(content_type="application/rss+xml", text=(
                f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>{items}</channel></rss>'))
        if path.startswith("/news/story-about-"):
            return web.Response(content_type="text/html", text=f"<html><body><main>{path}</main></body></html>")
        return web.Response(status=404)

    origin = await serve(handle)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(origin + seed,))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        states = store.url_states()
        assert store.url_info(origin + seed) is None  # not a page of the frontier
    assert all(states[f"{origin}/news/story-about-{n}"][0] == "done" for n in range(3))
    assert asked[seed] == 1
    assert asked["/sitemap.xml"] == (1 if seed == "/feed.xml" else 0)  # probed only where no sitemap was read
    # A profile that reads no sitemaps (or feeds) says so of such a seed instead of dropping it in silence.
    off = SiteProfile.build(seeds=(origin + seed,), use_sitemaps=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, off)
    kind = "sitemap" if "sitemap" in seed else "feed"
    assert f"{origin}: the seed {origin}{seed} is a {kind}, which this profile does not read" in result.problems


async def test_a_sitemap_cut_at_the_protocol_limit_is_a_problem_the_operator_sees(sqlite_url, serve):
    """URLs left unread are named among the run's problems (which the CLI prints), not only in the report."""
    async def handle(request: web.Request) -> web.Response:
        published = robots_and_sitemap(request, [f"/news/story-about-{n}" for n in range(8)])
        return published if published is not None else web.Response(status=404)

    origin = await serve(handle)
    settings = settings_for(sqlite_url, **{"discovery.max_sitemap_urls": 5})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        result = await phases.discover(store, settings, profile)
    assert [problem for problem in result.problems if "over the protocol's limits" in problem] == [
        f"sitemap {origin}/sitemap.xml is over the protocol's limits, only its first part was read: "
        "more than 5 URLs: the rest of the file dropped"
    ]


async def test_completions_written_after_a_failed_attempt_keep_their_canonical_takeover(sqlite_url):
    """A page's completion whose write failed is stashed and written by the retry; the holder it takes over (the
    holder names it canonical) is demoted then too, though the failed write's demotion pairs were not kept."""
    from harvester.phases.completions import write_unwritten
    from harvester.phases.cycle_state import Unwritten
    from harvester.records import DiscoveredUrl, PageRecord

    origin = "https://shop.test"
    variant, clean = f"{origin}/p/x?colour=blue", f"{origin}/p/x"
    settings = settings_for(sqlite_url)
    now = utcnow()

    def page(url: str) -> PageRecord:
        return PageRecord(final_url=url, status=200, content_type="text/html", content_hash="h1", body=b"<html/>",
                          canonical_url=clean)

    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url, UrlKind.DETAIL, "sitemap:x", depth=1) for url in (variant, clean)])
        ids = {c.url: c.id for c in store.claim("w", hosts=[origin], per_host=10, lease_s=60)}
        store.complete("w", Completion(url_id=ids[variant], state=UrlState.DONE, fetched_at=now, status=200,
                                       content_hash="h1", page=page(variant)))
        unwritten = Unwritten()
        unwritten.keep("w", [(Completion(
            url_id=ids[clean], state=UrlState.DONE, fetched_at=now, status=200, content_hash="h1", page=page(clean),
        ), [])])
        assert await write_unwritten(store, unwritten, run_id=None) == 1
        assert unwritten.batches == []
        states = store.url_states()
        assert states[clean][0] == "done"
        assert states[variant][0] == "duplicate"
        assert store.url_info(variant).duplicate_of == ids[clean]


async def test_a_moved_sites_old_robots_txt_sitemap_is_followed_to_the_new_home(sqlite_url, serve):
    """The old host still answers its own robots.txt, naming its sitemap, which 301s to the new home like every
    other path. That sitemap is asked beside the seed (before the move is known, when the new home is still out
    of the scope); once the seed shows the move it is asked again and followed: its stories are found."""
    new: list[str] = []

    async def old_site(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: http://{request.host}/maps/a.xml\n")
        raise web.HTTPMovedPermanently(location=new[0] + request.path_qs)

    async def new_site(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow:\n")
        if request.path == "/maps/a.xml":
            locs = "".join(f"<url><loc>{new[0]}/news/story-{n}-about-things</loc></url>" for n in range(4))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        if request.path == "/":
            return web.Response(content_type="text/html", text="<html><body>home</body></html>")
        return web.Response(status=404)

    old = await serve(old_site)
    new.append(await serve(new_site))
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=(old + "/",), use_feeds=False, use_listings=False, allow_addresses=LOOPBACK)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        states = store.url_states()
    stories = {f"{new[0]}/news/story-{n}-about-things" for n in range(4)}
    assert stories <= set(states), sorted(states)


async def test_the_next_request_goes_out_while_the_previous_page_is_extracted(make_web, sqlite_url):
    """One request at a time on the host, and a hook that returns only once the host has been asked the next
    detail page: every page but the last sees it asked. A worker that waited for the parse and the store
    before its next request would see none (the hook would give up waiting each time).

    Discovery runs to its end first: this web has feed-only details, and a page a feed queues after the host's
    turn found its queue empty is asked at the host's next turn, once the pages in hand are written (a concurrent
    harvest under load asked the last page only after the slow hook gave up, fresh-clone CI at 1db3b0a)."""
    web = make_web([HostSpec("a", pages=12, page_bytes=(800, 1200), disallowed_in_sitemap=0.0)], seed=8)
    details = {path_of(u) for u in web.truth["a"].allowed_detail_urls()}
    hooks_sample.NEXT_REQUEST_SENT = lambda n: sum(1 for r in web.records() if r.path in details) >= n
    hooks_sample.NEXT_SENT_FIRST.clear()
    try:
        settings = settings_for(sqlite_url, **{"politeness.per_host_start": 1, "politeness.max_per_host_limit": 1})
        profile = SiteProfile.build(seeds=tuple(web.seeds), extractor="hooks_sample:waits_for_next_request")
        with FrontierStore.open(settings, upgrade=True) as store:
            await phases.discover(store, settings, profile)
            await phases.extract(store, settings, profile)
        verdicts = list(hooks_sample.NEXT_SENT_FIRST)
    finally:
        hooks_sample.NEXT_REQUEST_SENT = None
    assert len(verdicts) == len(details)
    assert verdicts[:-1] == [True] * (len(details) - 1)
