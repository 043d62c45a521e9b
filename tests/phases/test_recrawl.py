"""Re-crawl economies end to end against the test web: what a day-2 re-crawl asks for, and what it may leave.

Each economy has a control showing the same setup does request the document when it holds something new.
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

import pytest

from harvester import aharvest, arecrawl, phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def settings_for(db_url: str, **overrides: object) -> Settings:
    return Settings.load(database_url=db_url).with_overrides(**overrides)


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def requests_to(web, name: str) -> Counter[str]:
    """Day-2 requests per path (query included) to host ``name``."""
    return Counter(r.path for r in web.records() if r.host == name)


async def test_a_moved_page_is_recorded_as_moved_and_its_target_fetched(make_web, db_url):
    web = make_web([HostSpec("m", pages=60, sitemap_only=0.0, feed_only=0.0, listing_only=0.0)], seed=11)
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        day = web.advance_day(changed=0.0, new=0.0, gone=0.0, moved=0.05)
        web.clear_records()
        await arecrawl(settings, profile, refresh=True)
        moves = day.moved["m"]
        assert moves  # control: the day really moved pages
        for old, new in moves:
            hops = [r for r in web.records() if r.path == path_of(old)]
            assert [r.status for r in hops] == [301], old  # asked once, answered "moved permanently"
            info = store.url_info(old)
            assert info is not None and info.state == "done" and info.final_url == new, info
            assert info.last_status == 301, info
            target = store.url_info(new)
            assert target is not None and target.state == "done" and target.content_hash, target
            assert "redirect:" + old in store.sources_of(new)
        # The target holds the page: not taken for a duplicate of the address it moved from.
        states = store.url_states()
        assert all(states[new][0] == "done" for _, new in moves)


# --- feeds ----------------------------------------------------------------------------------------------------


async def test_feed_only_pages_beyond_the_head_are_found_through_rfc5005_links(make_web, sqlite_url):
    web = make_web([HostSpec("n", pages=80, feed_paging="next"), HostSpec("r", pages=80, feed_paging="archive"),
                    HostSpec("x", pages=80, feed_paging="none")], seed=3)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        known = set(store.url_states())
    for name in ("n", "r", "x"):
        truth = web.truth[name]
        beyond = set(truth.feed_only()) - set(truth.feed_head_urls())
        assert beyond, f"{name}: every feed-only page is in the head; nothing to test"
        if name == "x":  # control: without RFC 5005 links a feed-only page past the head cannot be found
            assert not beyond & known
        else:
            assert beyond <= known, sorted(beyond - known)[:3]


async def test_a_reread_feed_reads_on_only_while_its_pages_hold_news(make_web, sqlite_url):
    spec = HostSpec("f", pages=120, feed_entries=5, sitemap_only=0.0, listing_only=0.0, feed_only=0.2,
                    feeds=("rss",))
    web = make_web([spec], seed=4)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        first = requests_to(web, "f")
        assert first["/feeds/rss.xml?page=2"] == 1  # the first read walks the pages
        web.advance_day(changed=0.0, new=0.02, gone=0.0)  # 2 new pages: fewer than the 5 the head shows
        web.clear_records()
        await phases.mark_due(settings, profile)
        quiet = await phases.discover(store, settings, profile, refresh=True)
        reads = requests_to(web, "f")
        assert reads["/feeds/rss.xml"] == 1
        assert not [p for p in reads if p.startswith("/feeds/rss.xml?")], reads
        assert quiet.counters["feed_pages_not_needed"] == 1
        # Control: a day with more news than the head shows reads on, and finds every new page.
        day = web.advance_day(changed=0.0, new=0.1, gone=0.0)
        web.clear_records()
        await phases.mark_due(settings, profile)
        await phases.discover(store, settings, profile, refresh=True)
        assert requests_to(web, "f")["/feeds/rss.xml?page=2"] == 1
        known = set(store.url_states())
    listed = set(web.truth["f"].feed_urls())
    assert {u for u in day.new["f"] if u in listed} <= known


async def test_known_archives_are_not_asked_again_and_a_new_one_is(make_web, sqlite_url):
    spec = HostSpec("a", pages=60, feed_entries=8, feed_paging="archive", feeds=("atom",))
    web = make_web([spec], seed=5)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        archives = [p for p in requests_to(web, "a") if "archive=" in p]
        assert len(archives) == 60 // 8
        web.advance_day(changed=0.05, new=0.07, gone=0.0)  # 60 → 64 pages: the eighth archive fills up
        web.clear_records()
        await phases.mark_due(settings, profile)
        found = await phases.discover(store, settings, profile, refresh=True)
    reads = requests_to(web, "a")
    assert [p for p in reads if "archive=" in p] == ["/feeds/atom.xml?archive=8"]
    assert found.counters["feed_archives_known"] >= 1


async def test_known_feeds_are_polled_when_no_page_advertising_them_changed(make_web, sqlite_url):
    spec = HostSpec("q", pages=40, sitemap_only=0.0, listing_only=0.0, feed_only=1.0, disallowed_in_sitemap=0.0,
                    feeds=("rss",))
    web = make_web([spec], seed=6)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        day = web.advance_day(changed=0.0, new=0.1, gone=0.0)
        web.clear_records()
        await phases.mark_due(settings, profile)
        await phases.discover(store, settings, profile, refresh=True)
        known = set(store.url_states())
    home = [r.status for r in web.records() if r.path == "/"]
    assert home == [304]  # control: the only page advertising the feed did not change
    assert requests_to(web, "q")["/feeds/rss.xml"] == 1
    assert set(day.new["q"]) <= known


async def test_a_feed_repeating_another_is_polled_only_after_its_recheck_time(make_web, sqlite_url):
    web = make_web([HostSpec("w", pages=80)], seed=7)  # RSS and Atom list the same entries
    # The default asks a twin every run (an Atom twin ordered by `updated` shows edits); a week spares it.
    settings = settings_for(sqlite_url, **{"discovery.feed_mirror_recheck_s": 7 * 86_400.0})
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        found = await phases.discover(store, settings, profile)
        day1 = requests_to(web, "w")
        assert found.counters["feeds_mirrored"] == 1
        assert day1["/feeds/rss.xml?page=2"] == 1 and day1["/feeds/atom.xml"] == 1
        assert not [p for p in day1 if p.startswith("/feeds/atom.xml?")]  # the twin's older pages: not read
        assert set(web.truth["w"].feed_only()) <= set(store.url_states())
        web.advance_day(changed=0.05, new=0.02, gone=0.0)
        web.clear_records()
        await phases.mark_due(settings, profile)
        await phases.discover(store, settings, profile, refresh=True)
        assert requests_to(web, "w")["/feeds/atom.xml"] == 0
        # Control: once the recheck time has passed, the twin is asked again.
        again = settings.with_overrides(**{"discovery.feed_mirror_recheck_s": 0.0})
        web.clear_records()
        await phases.mark_due(again, profile)
        await phases.discover(store, again, profile, refresh=True)
        assert requests_to(web, "w")["/feeds/atom.xml"] == 1


# --- sitemaps and listings ---------------------------------------------------------------------------------------


async def test_a_child_sitemap_its_index_dates_unchanged_is_not_requested(make_web, db_url):
    web = make_web([HostSpec("s", pages=90, sitemap_children=3)], seed=8)
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    index, *children = web.truth["s"].sitemap_documents()
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        web.advance_day(changed=0.0, new=0.05, gone=0.0)  # new pages join the last child only
        web.clear_records()
        await phases.mark_due(settings, profile)  # even a refresh leaves them alone
        found = await phases.discover(store, settings, profile, refresh=True)
        reads = requests_to(web, "s")
        assert reads[path_of(index)] == 1
        assert reads[path_of(children[-1])] == 1  # control: the child that changed is read
        assert [reads[path_of(child)] for child in children[:-1]] == [0, 0]
        assert found.counters["sitemaps_unchanged_per_index"] == 2
        # Control: without trust in the index, the same children are asked (and answer 304).
        web.clear_records()
        distrust = settings.with_overrides(**{"discovery.sitemap_index_trust_s": 0.0})
        await phases.mark_due(distrust, profile)
        await phases.discover(store, distrust, profile, refresh=True)
    statuses = {r.path: r.status for r in web.records()}
    assert [statuses.get(path_of(child)) for child in children[:-1]] == [304, 304]


async def test_urls_a_reread_sitemap_no_longer_lists_lose_their_lastmod(make_web, db_url):
    web = make_web([HostSpec("g", pages=120, feed_only=0.0, listing_only=0.0)], seed=5)
    # The index is not trusted, so every child is read again (a child whose pages only vanished may keep its date).
    settings = settings_for(db_url, **{"discovery.sitemap_index_trust_s": 0.0})
    profile = SiteProfile.build(seeds=tuple(web.seeds), use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        first = await phases.discover(store, settings, profile)
        assert first.counters["urls_vanished_rechecked"] == 0
        day = web.advance_day(changed=0.0, new=0.0, gone=0.05)
        gone = set(day.gone["g"])
        dated_before = {url for url in gone if (info := store.url_info(url)) is not None and info.lastmod is not None}
        assert dated_before  # control: the vanished pages had a sitemap lastmod
        kept = [url for url, (state, _) in store.url_states().items() if url not in gone and "/p/" in url]
        await phases.mark_due(settings, profile)
        found = await phases.discover(store, settings, profile, refresh=True)
        assert found.counters["urls_vanished_rechecked"] == len(dated_before)
        assert all(store.url_info(url).lastmod is None for url in dated_before)
        still_dated = [url for url in kept if store.url_info(url).lastmod is not None]
        assert len(still_dated) >= len(kept) * 0.8  # pages still listed keep theirs


async def test_continuation_listing_pages_are_read_only_after_a_page_of_news(make_web, sqlite_url):
    spec = HostSpec("l", pages=120, listing_page_size=5, sitemap_only=0.0, feed_only=0.0, listing_only=0.3,
                    feeds=())
    web = make_web([spec], seed=9)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))

    def continuations() -> list[str]:
        return [p for p in requests_to(web, "l") if p.startswith("/topics/") and "page=" in p]

    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        assert continuations()  # the first read walks every listing's pages
        web.advance_day(changed=0.0, new=0.01, gone=0.0)  # one new page: no first page is mostly news
        web.clear_records()
        await phases.mark_due(settings, profile)
        quiet = await phases.discover(store, settings, profile, refresh=True)
        assert continuations() == []
        assert quiet.counters["listing_pages_not_needed"] > 0
        # Control: a day whose news fills a listing's first page reads its next page, and finds the new pages.
        day = web.advance_day(changed=0.0, new=0.3, gone=0.0)
        web.clear_records()
        await phases.mark_due(settings, profile)
        await phases.discover(store, settings, profile, refresh=True)
        assert continuations()
        known = set(store.url_states())
    assert set(web.truth["l"].listing_only()) & set(day.new["l"]) <= known


# --- lastmod ------------------------------------------------------------------------------------------------------


async def test_unchanged_pages_are_skipped_only_where_lastmod_announced_the_changes(make_web, sqlite_url):
    common = dict(pages=300, sitemap_only=0.3, feed_only=0.0, listing_only=0.0, feeds=("rss",))
    web = make_web([HostSpec("t", **common), HostSpec("p", sitemap_lastmod="published", **common)], seed=10)
    settings = settings_for(sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        day = web.advance_day(changed=0.1, new=0.0, gone=0.02)
        web.clear_records()
        await arecrawl(settings, profile, refresh=True)
        states = store.url_states()
        truth_checks = {name: store.lastmod_truthfulness(web.origin(name)) for name in ("t", "p")}
    asked = {(r.host, r.path) for r in web.records()}
    for name in ("t", "p"):
        truth = web.truth[name]
        allowed = set(truth.allowed_detail_urls())
        changed = [u for u in day.changed[name] if u in allowed]
        assert changed and all((name, path_of(u)) in asked for u in changed), name
        assert all(states[u][0] == "gone" for u in day.gone[name] if u in states), name
        unchanged = allowed - set(changed)
        unasked = [u for u in unchanged if (name, path_of(u)) not in asked]
        if name == "t":  # a lastmod that announced every change it was checked on: most unchanged pages skipped
            checks, hits = truth_checks[name]
            assert checks >= 10 and hits == checks, truth_checks
            assert len(unasked) > len(unchanged) // 4, (len(unasked), len(unchanged))
        else:  # control: a lastmod that never moves on edits announced no change; nothing is skipped
            assert truth_checks[name][1] == 0, truth_checks
            assert unasked == []
