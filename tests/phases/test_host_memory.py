"""Per-host state is bounded by the hosts being served, not by every host a cycle has served (issue 22).

A site of thousands of small hosts must not keep a connection pool (an httpx transport over an aiohttp session and
connector, tens of KB each) for every host it ever asked: the pools open at any moment are those of the hosts
being discovered or extracted, at most ``politeness.max_active_hosts`` per phase.
"""

from __future__ import annotations

import pytest

from harvester import aharvest
from harvester.fetch import http
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

HOSTS = 12
AT_ONCE = 2


@pytest.fixture
def pools_seen(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many host pools were open each time one was opened (``Fetcher.client``)."""
    seen: list[int] = []
    opened = http.Fetcher.client

    def client(self: http.Fetcher, origin: str) -> http.HostClient:
        pool = opened(self, origin)
        seen.append(len(self._clients))
        return pool

    monkeypatch.setattr(http.Fetcher, "client", client)
    return seen


async def test_open_pools_stay_bounded_by_the_active_hosts_of_a_wide_harvest(make_web, sqlite_url, pools_seen):
    web = make_web([HostSpec(f"w{i:02d}", pages=6, latency_s=0.002) for i in range(HOSTS)], seed=22)
    settings = Settings.load(database_url=sqlite_url).with_overrides(
        **{"politeness.max_active_hosts": AT_ONCE})
    cycle = await aharvest(settings, SiteProfile.build(seeds=tuple(web.seeds)))
    assert cycle.extract.counters["state:done"] >= HOSTS * 6  # every host was crawled, pages and all
    assert pools_seen  # pools were opened, and each one counted
    # Discovery and extraction share one client, each serving at most AT_ONCE hosts: a pool per host ever served
    # would reach HOSTS.
    assert max(pools_seen) <= 2 * AT_ONCE, max(pools_seen)
