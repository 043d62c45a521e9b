"""Discovery met by the process's stop records every document whose answer is in (issue 31, item 6).

On a stop (``runtime.request_stop``: a SIGTERM, a dead parent) no new request is sent, but an answer that has
arrived is recorded before the phase ends, so the rerun does not ask it again. Before, the feed reader beside the
listing crawl was cancelled with its document in hand, and ``discover_hosts`` returned at the first host's stop,
the other hosts' answers cancelled with the run's loop: the rerun asked them again (tests/flows/test_shutdown.py saw
``feeds/atom.xml`` fetched twice, about 1 run in 5 under load). Real loopback servers count every request; each
test holds one document's answer on an event while another has been answered, then stops.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from typing import Any

import pytest
from aiohttp import web

from harvester import phases
from harvester.errors import Interrupted
from harvester.fetch.slots import HostSlots
from harvester.frontier import FrontierStore
from harvester.phases import discover_feeds, sitemap_entries
from harvester.phases.discover_listings import ListingCrawl
from harvester.runtime import clear_stop, request_stop
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

WAIT_S = 60.0
"""Bound on each wait for an event; met at once when the product works."""

ATOM = ('<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title><id>urn:f</id>'
        "<updated>2024-05-03T00:00:00Z</updated>{}</feed>")
ENTRY = ('<entry><id>urn:x:{n}</id><title>F{n}</title><updated>2024-05-0{n}T00:00:00Z</updated>'
         '<link rel="alternate" href="/story/f-{n}"/></entry>')
URLSET = ('<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{}</urlset>')



def html(body: str, head: str = "") -> web.Response:
    return web.Response(text=f"<html><head>{head}</head><body>{body}</body></html>", content_type="text/html")


def listing_site(asked: Counter[str], held: asyncio.Event, release: asyncio.Event, *, feed: bool) -> Any:
    """A site whose seed links the listing page /topics/a/ (answered once ``release`` is set; ``held`` says it
    was asked), which links /topics/c/: the listing crawl's next request after the stop. ``feed``: the seed names
    /feed.xml too."""

    async def handle(request: web.Request) -> web.Response:
        path = request.path
        asked[path] += 1
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if path == "/":
            head = '<link rel="alternate" type="application/atom+xml" href="/feed.xml">' if feed else ""
            return html('<a href="/topics/a/">a</a>', head)
        if path == "/topics/a/":
            held.set()
            await release.wait()
            return html('<a href="/story/a-1">1</a> <a href="/topics/c/">c</a>')
        if path == "/topics/c/":
            return html('<a href="/story/c-1">1</a>')
        if path == "/feed.xml":
            return web.Response(text=ATOM.format("".join(ENTRY.format(n=n) for n in range(1, 4))),
                                content_type="application/atom+xml")
        if path.startswith("/story/"):
            return html("a story")
        return web.Response(status=404)

    return handle


def crawl_stop_seen(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a listing crawl ends by meeting the stop (at its next request): the moment a reader or another
    host could lose what it holds."""
    seen = threading.Event()
    crawl = ListingCrawl.crawl

    async def spied(self: ListingCrawl) -> None:
        try:
            await crawl(self)
        except Interrupted:
            seen.set()
            raise

    monkeypatch.setattr(ListingCrawl, "crawl", spied)
    return seen


async def until(*events: asyncio.Event | threading.Event) -> None:
    for _ in range(int(WAIT_S / 0.02)):
        if all(event.is_set() for event in events):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never set: {[event for event in events if not event.is_set()]}")


async def stopped_discovery(store: FrontierStore, settings: Settings, profile: SiteProfile,
                            *once: asyncio.Event | threading.Event, release: asyncio.Event) -> int:
    """Start a discovery run, stop the process once ``once`` are all set, then ``release`` the answer held on the
    wire: the discovery ends ``Interrupted``. Returns its run, for the rerun."""
    run_id = store.start_run("discover")
    first = asyncio.create_task(phases.discover(store, settings, profile, run_id=run_id))
    await until(*once)
    request_stop("test: the worker is stopping")
    release.set()
    with pytest.raises(Interrupted):
        await first
    return run_id


async def test_a_feed_read_beside_the_listing_crawl_is_recorded_when_the_crawl_meets_the_stop(
    sqlite_url, serve, monkeypatch, stopped
):
    """The reader has the feed's answer in hand (parsing it) when the listing crawl meets the stop: the feed is
    recorded before discovery ends, and the rerun does not ask it again."""
    asked: Counter[str] = Counter()
    held, release = asyncio.Event(), asyncio.Event()
    origin = await serve(listing_site(asked, held, release, feed=True))
    crawl_stopped = crawl_stop_seen(monkeypatch)
    parsing = threading.Event()
    parse = discover_feeds.parse_feed

    def parse_when_the_crawl_stopped(body: bytes, **kwargs: Any) -> Any:
        parsing.set()
        crawl_stopped.wait(WAIT_S)
        return parse(body, **kwargs)

    monkeypatch.setattr(discover_feeds, "parse_feed", parse_when_the_crawl_stopped)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_sitemaps=False, listing_patterns=(r"/topics/",),
                                detail_patterns=(r"/story/",))
    with FrontierStore.open(settings, upgrade=True) as store:
        # Stopped once the feed answered, in the reader's hands, and the listing page is on the wire.
        run_id = await stopped_discovery(store, settings, profile, parsing, held, release=release)
        assert crawl_stopped.is_set()  # control: the crawl met the stop while the reader held the feed
        assert asked["/topics/c/"] == 0, asked  # nothing sent after the stop
        assert store.url_states().get(f"{origin}/story/f-1"), "the feed's entries were not recorded"
        clear_stop()
        await phases.discover(store, settings, profile, run_id=run_id)
        states = store.url_states()
    assert asked["/feed.xml"] == 1, asked
    assert asked["/topics/a/"] == 1 and asked["/topics/c/"] == 1, asked  # control: the crawl went on
    assert all(states.get(f"{origin}/story/{name}") for name in ("a-1", "c-1", "f-1", "f-2", "f-3")), states


async def test_every_host_records_what_it_read_before_discovery_ends_on_a_stop(
    sqlite_url, serve, monkeypatch, stopped, caplog
):
    """Two hosts at once: one meets the stop in its listing crawl while the other has its sitemap's answer in
    hand (parsing it). Discovery ends once that sitemap is recorded (its host stopping at its next request), and
    the rerun asks neither host's answered documents again."""
    asked: Counter[str] = Counter()
    held, release = asyncio.Event(), asyncio.Event()
    stopping = origin = await serve(listing_site(asked, held, release, feed=False))
    other: Counter[str] = Counter()

    async def with_sitemap(request: web.Request) -> web.Response:
        path = request.path
        other[path] += 1
        here = f"http://{request.host}"
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {here}/sitemap.xml\n")
        if path == "/sitemap.xml":
            locs = "".join(f"<url><loc>{here}/story/s-{n}</loc></url>" for n in range(1, 4))
            return web.Response(text=URLSET.format(locs), content_type="application/xml")
        return html("a page")

    origin = await serve(with_sitemap)
    sitemap = f"{origin}/sitemap.xml"
    crawl_stopped = crawl_stop_seen(monkeypatch)
    waiting = threading.Event()  # discovery waits for the other host (its log line says so)
    ended = threading.Event()  # ... or it ended without it
    parsing = threading.Event()
    prepare = sitemap_entries.prepare_sitemap

    def prepare_once_discovery_waits(body: bytes, *, url: str, **kwargs: Any) -> Any:
        if url == sitemap:
            parsing.set()
            for _ in range(int(WAIT_S / 0.02)):
                if waiting.is_set() or ended.is_set():
                    break
                threading.Event().wait(0.02)
        return prepare(body, url=url, **kwargs)

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for" in record.getMessage():
                waiting.set()

    monkeypatch.setattr(sitemap_entries, "prepare_sitemap", prepare_once_discovery_waits)
    handler = Waiting()
    logging.getLogger("harvester.phases.discover_host").addHandler(handler)
    caplog.set_level(logging.INFO, logger="harvester.phases.discover_host")
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(stopping + "/", origin + "/"), use_feeds=False,
                                listing_patterns=(r"/topics/",), detail_patterns=(r"/story/",))
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            # Stopped once one host's sitemap answered, in hand, and the other's listing page is on the wire.
            run_id = await stopped_discovery(store, settings, profile, parsing, held, release=release)
            ended.set()
            assert crawl_stopped.is_set()  # control: one host met the stop while the other held its sitemap
            # Recorded when discovery ended: nothing of it runs on past the phase (the process would exit).
            recorded = store.get_document(sitemap)
            assert recorded is not None and recorded.content_hash is not None, recorded
            assert store.url_states().get(f"{origin}/story/s-1"), "the sitemap's entries were not recorded"
            clear_stop()
            await phases.discover(store, settings, profile, run_id=run_id)
            states = store.url_states()
    finally:
        ended.set()
        logging.getLogger("harvester.phases.discover_host").removeHandler(handler)
    assert other["/sitemap.xml"] == 1, other
    assert asked["/topics/a/"] == 1 and asked["/topics/c/"] == 1, asked
    assert all(states.get(f"{origin}/story/s-{n}") for n in range(1, 4)), states


async def test_a_sitemap_asked_ahead_and_answered_is_recorded_when_the_walk_meets_the_stop(sqlite_url, serve, stopped):
    """An index names /a.xml and /b.xml; /b.xml is asked beside /a.xml (ahead of the walk) and answers, then /a.xml
    answers 503 as the stop comes: its retry is not sent, and the walk ends. /b.xml's answer is recorded before
    discovery ends (before, it was dropped with the walk), so the rerun asks it no more; /a.xml it asks again."""
    asked: Counter[str] = Counter()
    b_answered = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        path = request.path
        asked[path] += 1
        here = f"http://{request.host}"
        if path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {here}/index.xml\n")
        if path == "/index.xml":
            children = "".join(f"<sitemap><loc>{here}/{name}.xml</loc></sitemap>" for name in ("a", "b"))
            return web.Response(text=f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{children}'
                                     "</sitemapindex>", content_type="application/xml")
        if path in ("/a.xml", "/b.xml"):
            name = path[1]
            if path == "/a.xml" and asked[path] == 1:
                await b_answered.wait()
                request_stop("test: the worker is stopping")
                return web.Response(status=503)
            locs = "".join(f"<url><loc>{here}/story/{name}-{n}</loc></url>" for n in range(1, 4))
            if path == "/b.xml":
                b_answered.set()
            return web.Response(text=URLSET.format(locs), content_type="application/xml")
        return html("a page")

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(origin + "/",), use_feeds=False, detail_patterns=(r"/story/",))
    with FrontierStore.open(settings, upgrade=True) as store:
        run_id = store.start_run("discover")
        with pytest.raises(Interrupted):
            await phases.discover(store, settings, profile, run_id=run_id)
        assert asked["/a.xml"] == 1 and asked["/b.xml"] == 1, asked  # control: the retry was not sent
        assert store.url_states().get(f"{origin}/story/b-1"), "the sitemap asked ahead was not recorded"
        clear_stop()
        await phases.discover(store, settings, profile, run_id=run_id)
        states = store.url_states()
    assert asked["/b.xml"] == 1, asked
    assert asked["/a.xml"] == 2, asked  # control: the one that failed as the stop came is asked again
    assert all(states.get(f"{origin}/story/{name}-{n}") for name in "ab" for n in range(1, 4)), states


async def test_a_host_waiting_out_its_crawl_delay_does_not_hold_the_stop(  # type: ignore[no-untyped-def]
    sqlite_url, serve, stopped, monkeypatch,
):
    """Discovery waits on a stop for the hosts with answers in hand, never for one waiting for its slot: its wait
    (an hour's Crawl-delay here) ends at the stop, and the request it waited for is never sent."""
    waiting = asyncio.Event()
    acquire = HostSlots.acquire

    async def spied(self: HostSlots, host: Any) -> bool:
        if host.gate.wait_s(time.monotonic()) not in (None, 0.0):  # a wait for the next allowed time begins
            waiting.set()
        return await acquire(self, host)

    monkeypatch.setattr(HostSlots, "acquire", spied)
    asked: Counter[str] = Counter()
    held, release = asyncio.Event(), asyncio.Event()
    stopping = await serve(listing_site(asked, held, release, feed=False))
    slow_asked: Counter[str] = Counter()
    robots_read = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        slow_asked[request.path] += 1
        here = f"http://{request.host}"
        if request.path == "/robots.txt":
            robots_read.set()
            return web.Response(text=f"User-agent: *\nCrawl-delay: 3600\nAllow: /\nSitemap: {here}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            return web.Response(text=URLSET.format(f"<url><loc>{here}/story/s-1</loc></url>"),
                                content_type="application/xml")
        return html("a page")

    origin = await serve(slow)
    settings = Settings.load(database_url=sqlite_url, politeness={"max_crawl_delay_s": 3600})
    profile = SiteProfile.build(seeds=(stopping + "/", origin + "/"), use_feeds=False,
                                listing_patterns=(r"/topics/",), detail_patterns=(r"/story/",))
    with FrontierStore.open(settings, upgrade=True) as store:
        run_id = store.start_run("discover")
        discovery = asyncio.create_task(phases.discover(store, settings, profile, run_id=run_id))
        await until(held, robots_read, waiting)
        request_stop("test")
        release.set()
        async with asyncio.timeout(WAIT_S):  # without the wake: an hour, the sitemap's Crawl-delay
            with pytest.raises(Interrupted):
                await discovery
    assert slow_asked == Counter({"/robots.txt": 1})


class _StoppedWhileHolding:
    """A host's discovery met by the stop with a listing page claimed and not read (a page whose turn met
    ``check_stop``, a continuation or a facet variant waiting behind the batch): what ``discover_hosts`` is given."""

    def __init__(self, store: FrontierStore, origin: str) -> None:
        from harvester.owners import make_owner

        self.origin = origin
        self.host = type("Host", (), {"owner": make_owner(f"discover:{origin}"), "store": store})()

    def homes(self) -> list[str]:
        return [self.origin]

    async def run(self) -> None:
        from harvester.records import UrlKind

        claimed = await asyncio.to_thread(self.host.store.claim, self.host.owner, hosts=[self.origin], per_host=5,
                                          lease_s=300, kinds=(UrlKind.LISTING,))
        assert claimed, "control: the listing page is held"
        raise Interrupted("the test's stop")


async def test_a_hosts_discovery_stopped_with_a_listing_page_claimed_hands_its_lease_back(sqlite_url):
    """The stop says "leases given back", and a SIGINTed harvest left a listing page leased to the discovery owner
    of its host (tests/test_cli_progress.py under load: {'leased': 1}, the lease's owner ``...:discover:...``)."""
    from harvester.phases.discover_host import discover_hosts
    from harvester.records import DiscoveredUrl, UrlKind

    origin = "http://127.0.0.1:9"
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/topics/?page=2", UrlKind.LISTING, "listing:x")])
        item = _StoppedWhileHolding(store, origin)
        with pytest.raises(Interrupted):
            await discover_hosts(None, [origin], lambda _: item, lambda _: None, at_once=1)  # type: ignore[arg-type]
        assert "leased" not in store.state_counts(), store.state_counts()
