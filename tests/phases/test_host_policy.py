"""Politeness state carried across runs through the frontier: a Retry-After outlives the run that heard it, and a
parked host stays parked, with its reason, until its park ends (SQLite and PostgreSQL, real test web)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta

import pytest

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, HostPolicy, Source, UrlKind
from harvester.runtime import CLOCK, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

SMALL = (800, 1200)


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def settings_for(db_url: str, **overrides: object) -> Settings:
    return Settings.load(database_url=db_url).with_overrides(**overrides)


def seed_details(store: FrontierStore, web, names: tuple[str, ...]) -> None:
    """Put the hosts' detail pages straight into the frontier: a discovery run would itself teach the hosts'
    limits (one request at a time on a host that allows one), and these tests need the first burst of run 1."""
    store.add_discovered(
        [
            DiscoveredUrl(url=url, kind=UrlKind.DETAIL, source=Source.SITEMAP.value)
            for name in names
            for url in web.truth[name].allowed_detail_urls()
        ]
    )


def states_of(store: FrontierStore, web, name: str) -> list[str]:
    states = store.url_states()
    return [states[url][0] for url in web.truth[name].allowed_detail_urls()]


def told_429_of(web, name: str) -> set[str]:
    """The URLs of host ``name`` answered 429 so far."""
    return {web.origin(name) + r.path for r in web.records() if r.host == name and r.status == 429}


def queued_not_told(store: FrontierStore, web, name: str, told_429: set[str]) -> set[str]:
    """Host ``name``'s queued detail URLs, bar those told 429 (they wait for their own retry time)."""
    return {u for u, state in zip(web.truth[name].allowed_detail_urls(), states_of(store, web, name), strict=True)
            if state == "queued" and u not in told_429}


def asked_of(web, name: str) -> set[str]:
    """The URLs of host ``name`` asked since the records were cleared, robots.txt aside."""
    return {web.origin(name) + r.path for r in web.records() if r.host == name and r.path != "/robots.txt"}


async def wait_for_policy(store: FrontierStore, origin: str, check, *, within_s: float = 20.0) -> HostPolicy:
    """The store's row once ``check`` holds (polled: the write happens in the running phase)."""
    for _ in range(int(within_s / 0.05)):
        policy = store.host_policy(origin)
        if policy is not None and check(policy):
            return policy
        await asyncio.sleep(0.05)
    raise AssertionError(f"no policy of {origin} matching the check within {within_s}s")


async def test_a_retry_after_heard_in_run_1_holds_in_run_2(make_web, db_url):
    # "a" answers 429 + Retry-After 60 to a second request in flight; "b" is an ordinary host.
    web = make_web(
        [
            HostSpec("a", pages=12, latency_s=0.2, page_bytes=SMALL, max_in_flight=1, retry_after_s=60),
            HostSpec("b", pages=40, latency_s=0.05, page_bytes=SMALL),
        ],
        seed=11,
    )
    a = web.origin("a")
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        seed_details(store, web, ("a", "b"))
        run_1 = asyncio.create_task(phases.extract(store, settings, profile))
        # Run 1 stops while "a" is backed off (a cancelled task, a killed worker, the end of a time slot).
        policy = await wait_for_policy(store, a, lambda p: p.blocked_until is not None)
        heard_at = utcnow()
        run_1.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run_1
        told_429 = told_429_of(web, "a")
        assert told_429
        assert timedelta(seconds=30) < policy.blocked_until - heard_at <= timedelta(seconds=61)
        assert policy.concurrency_limit == 1  # the limit that drew the 429 was halved, and that is kept too
        # Control: "a" still has due work, so only the persisted Retry-After keeps run 2 away from it.
        assert "queued" in states_of(store, web, "a")

        cleared = time.monotonic()  # run 1's last request, cut off by the cancel, may still be answered after this
        web.clear_records()
        await phases.extract(store, settings, profile)
        run_2 = [r for r in web.records() if r.start >= cleared]
        assert [r for r in run_2 if r.host == "a"] == []
        assert set(states_of(store, web, "b")) == {"done"}  # control: run 2 did run, and finished "b"

        # Control: the same due work is fetched at once when the Retry-After is gone.
        store.save_host_policy(replace(store.host_policy(a), blocked_until=None))
        due = queued_not_told(store, web, "a", told_429)
        assert due
        web.clear_records()
        await phases.extract(store, settings, profile)
        assert asked_of(web, "a") >= due


async def test_a_parked_host_stays_parked_with_its_reason(make_web, db_url):
    # "p" answers a second request in flight with 429 + Retry-After 3600, beyond backoff_max_s: it is parked.
    web = make_web(
        [
            HostSpec("p", pages=10, latency_s=0.2, page_bytes=SMALL, max_in_flight=1, retry_after_s=3600),
            HostSpec("q", pages=10, page_bytes=SMALL),
        ],
        seed=12,
    )
    p = web.origin("p")
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        seed_details(store, web, ("p", "q"))
        first = await phases.extract(store, settings, profile)
        assert first.counters["parked"] > 0
        told_429 = told_429_of(web, "p")
        policy = store.host_policy(p)
        assert policy is not None and policy.parked_reason is not None
        assert "Retry-After 3600s" in policy.parked_reason
        assert timedelta(minutes=59) < policy.blocked_until - utcnow() <= timedelta(hours=1)
        assert "queued" in states_of(store, web, "p")  # control: work is left that run 2 could take

        web.clear_records()
        found = await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        assert [r for r in web.records() if r.host == "p"] == []  # not even robots.txt
        assert any(r.host == "q" for r in web.records())  # control: run 2 did go out (q's documents, 304s)
        assert any(f"parked ({policy.parked_reason})" in problem for problem in found.problems)
        assert store.host_policy(p).parked_reason == policy.parked_reason

        # Control: once the park has run out, the host gets another chance (and its learned limit of 1).
        store.save_host_policy(replace(store.host_policy(p), blocked_until=utcnow() - timedelta(seconds=1)))
        due = queued_not_told(store, web, "p", told_429)
        assert due
        web.clear_records()
        await phases.extract(store, settings, profile)
        assert asked_of(web, "p") >= due
        assert store.host_policy(p).parked_reason is None


async def test_a_new_cycle_lifts_the_parks_of_the_last_one_but_a_retry_after_park_holds(db_url, clock):
    """A park is "not again this run": a new harvest/recrawl cycle asks the host again whatever its cadence (a
    24 h park made the next daily run skip it). A resumed cycle keeps it; a park whose end the server named
    (Retry-After beyond backoff_max_s) holds until then."""
    settings = settings_for(db_url)
    failing, told, other = "http://127.0.0.1:8101", "http://127.0.0.1:8102", "http://127.0.0.1:8103"
    profile = SiteProfile.build(seeds=(failing + "/", told + "/", other + "/"))
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url=origin + "/a", kind=UrlKind.DETAIL, source=Source.SITEMAP.value)
                              for origin in (failing, told, other)])
        cycle, _, resumed = await phases.begin_cycle(settings, "recrawl", profile)
        assert not resumed
        now = utcnow()
        store.save_host_policy(HostPolicy(origin=failing, parked_reason="5 consecutive failures (connect/protocol/"
                                          "timeout/5xx)", failures=5, blocked_until=now + timedelta(hours=24)))
        store.save_host_policy(HostPolicy(origin=told, parked_reason="Retry-After 172800s exceeds backoff_max_s 120s",
                                          blocked_until=now + timedelta(days=2)))
        again, _, resumed = await phases.begin_cycle(settings, "recrawl", profile)  # killed, run again: resumed
        assert resumed and again == cycle
        assert store.host_policy(failing).parked_reason is not None
        await phases.close_cycle(settings, cycle, [failing, told, other], failed=False)

        CLOCK.travel_to(utcnow() + timedelta(hours=1))  # an hourly cadence (a daily one alike): the next cycle
        _, _, resumed = await phases.begin_cycle(settings, "recrawl", profile)
        assert not resumed
        lifted = store.host_policy(failing)
        assert lifted.parked_reason is None and lifted.blocked_until is None
        assert lifted.failures == 5  # still failing: its first failure parks it again
        assert store.host_policy(told).parked_reason is not None  # the server's word holds
