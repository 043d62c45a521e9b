"""Per-host pipelining (issue 22): a host's extraction starts when its own discovery ends, not every host's.

Before: extraction began only once discovery had finished on every host, so a host with a Crawl-delay whose
sitemaps were read in a second waited for the slowest host's listing crawl before its first page. Now each host is
handed over as its discovery ends; the two phases never overlap on one host, and politeness (the per-host limit,
the Crawl-delay) holds across the handover: both phases go through one polite client.

Issue 31: a host is handed over once its sitemaps are read, beside the rest of its discovery (its listing crawl
and feeds, chains of pages one after another), since both phases fetch through the host's one gate: before, a host
whose feed had 33 pages left three of its four slots idle for seconds before its first detail page.
"""

from __future__ import annotations

import asyncio

import pytest

from harvester import aharvest
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import RequestRecord, duplicates, max_in_flight, min_interval
from harvester.testing.sites import HostSpec, RobotsSpec

CRAWL_DELAY_S = 0.2
LIMIT = 2
HEAD_START_S = 1.0
SPECS = [
    # Slow to discover: many listing pages, sitemaps and feed pages at 0.4 s each.
    HostSpec("slow", pages=40, latency_s=0.3, listing_page_size=2),
    # Quick to discover (few documents), slow to extract: every request 0.2 s apart.
    HostSpec("delayed", pages=30, robots=RobotsSpec(crawl_delay=CRAWL_DELAY_S), sitemap_children=1),
    HostSpec("quick", pages=40),
]


async def test_a_hosts_extraction_starts_when_its_own_discovery_ends_and_stays_polite(make_web, db_url):
    web = make_web(SPECS, seed=23)
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)

    await aharvest(settings, profile)

    records = web.records()
    names = [spec.name for spec in SPECS]
    details = {name: set(web.truth[name].detail_urls()) for name in names}

    def of(name: str, *, detail: bool) -> list[RequestRecord]:
        return [r for r in records if r.host == name and (r.url in details[name]) == detail]

    slow_discovery_ends = max(r.end for r in of("slow", detail=False))
    for name in ("delayed", "quick"):
        extraction = of(name, detail=True)
        assert extraction, name
        # Its extraction began while the slow host was still being discovered ...
        # (by seconds: run one after the other, it began 0.1 s after; the margin leaves room for a loaded machine)
        assert min(r.start for r in extraction) < slow_discovery_ends - HEAD_START_S, name
    for name in names:
        extraction = of(name, detail=True)
        read_first = [r for r in of(name, detail=False) if "sitemap" in r.path or r.path == "/robots.txt"]
        # ... and only once its robots.txt and sitemaps were read (their lastmod verdicts in the frontier) ...
        assert max(r.end for r in read_first) <= min(r.start for r in extraction), name
    # ... while the rest of a host's discovery goes on beside it: the slow host's listing pages and feed pages.
    slow_extraction_starts = min(r.start for r in of("slow", detail=True))
    assert slow_extraction_starts < slow_discovery_ends - HEAD_START_S, (slow_extraction_starts, slow_discovery_ends)

    # Politeness spans both phases: never more than the limit in flight, Crawl-delay kept across the handover.
    assert all(max_in_flight(records, name) <= LIMIT for name in names)
    gap = min_interval(records, "delayed")
    assert gap is not None and gap >= CRAWL_DELAY_S * 0.95, gap

    assert duplicates(records) == {}
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    for name in names:
        missing = [url for url in web.truth[name].allowed_detail_urls() if states.get(url, ("",))[0] != "done"]
        assert not missing, (name, missing[:5])


async def test_discovery_ending_while_a_round_runs_leaves_no_host_behind(make_web, sqlite_url, monkeypatch):
    """CI found this on a loaded machine: discovery ended while an extraction round (which had looked for open hosts
    before) was running, the run saw "discovery over, nothing claimable left" and ended with the last host's URLs
    queued. Here the end lands exactly there: after the round's last look, before its verdict."""
    from harvester import phases
    from harvester.phases import extract_phase
    from harvester.phases.cycle_state import CycleState
    from harvester.phases.handover import Handover

    web = make_web([HostSpec("late", pages=12)], seed=29)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    details = set(web.truth["late"].allowed_detail_urls())
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)  # the URLs are due, the host not yet handed over
        real, rounds = extract_phase.run_hosts, []
        ready = Handover()

        async def round_then_discovery_ends(*args, **kwargs):  # type: ignore[no-untyped-def]
            stats = await real(*args, **kwargs)
            rounds.append(ready.open_hosts())
            if len(rounds) == 6:  # past the idle rounds a due-but-closed host costs
                ready.end()
            return stats

        monkeypatch.setattr(extract_phase, "run_hosts", round_then_discovery_ends)
        await phases.extract(store, settings, profile, cycle=CycleState(handover=ready))
        states = store.url_states()
    assert rounds[:6] == [frozenset()] * 6, "the control: nothing was open before the end"
    left = sorted(url for url in details if states[url][0] != "done")
    assert left == [], left[:5]


async def test_a_stop_during_discovery_lets_extraction_write_what_it_had_in_flight(make_web, sqlite_url):
    """A stop mid-harvest (``runtime.request_stop``: what ``harvester.flows.lifeline`` asks when a runner dies) while
    discovery still runs beside extraction: the harvest ends ``Interrupted`` and every page the site answered is
    written. The phase that meets the stop first must leave the other to drain: cancelling it lost its answers in
    flight (tests/flows/test_lifeline.py saw them fetched twice by the rerun on a loaded machine)."""
    from harvester.errors import Interrupted
    from harvester.runtime import clear_stop, request_stop

    web = make_web([HostSpec("slow", pages=80, latency_s=0.5, listing_page_size=2),
                    HostSpec("quick", pages=40, latency_s=0.4, sitemap_children=1)], seed=31)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        pass
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT)
    quick = set(web.truth["quick"].detail_urls())
    slow_listings = set(web.truth["slow"].listing_urls())

    def started(urls: set[str]) -> list[RequestRecord]:
        return [r for r in web.records() if r.url in urls]

    async def stop_mid_extraction() -> None:
        while len(started(quick)) < 4:
            await asyncio.sleep(0.02)
        request_stop("the test's stop")

    stopper = asyncio.create_task(stop_mid_extraction())
    try:
        with pytest.raises(Interrupted):
            await aharvest(settings, profile)
    finally:
        clear_stop()
        stopper.cancel()
    records = web.records()
    asked_listings = {r.url for r in records if r.url in slow_listings}
    assert asked_listings < slow_listings, "the control: discovery of 'slow' was still on"
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    asked = {r.url for r in records if r.url in quick}
    lost = sorted(url for url in asked if states[url][0] != "done")
    assert asked and lost == [], lost
