"""Two extraction workers on one PostgreSQL frontier: each host is served by one worker at a time, politeness holds
across them, and together they fetch every URL once.

The workers are two concurrent extract flow runs whose profiles differ only in User-Agent, so the test web's
record tells which worker sent each request.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict

import pytest
from conftest import prepared

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import RequestRecord, duplicates, max_in_flight
from harvester.testing.sites import HostSpec

SPECS = [HostSpec(f"h{n}", pages=60, latency_s=0.12) for n in range(6)]
"""About 2-3 s per host. With one active host per worker, one worker alone needs 12-18 s for all six: the second
flow run's start, which Prefect has delayed by up to 6.3 s while the first one fetched, still finds hosts left."""
AGENTS = ("harvester-worker-A/1.0 (+test)", "harvester-worker-B/1.0 (+test)")


def overlapping(records: list[RequestRecord]) -> list[tuple[RequestRecord, RequestRecord]]:
    """Pairs of requests to one host from different workers whose [start, end] intervals overlap."""
    clashes = []
    for first, second in itertools.combinations(records, 2):
        if first.user_agent != second.user_agent and first.start < second.end and second.start < first.end:
            clashes.append((first, second))
    return clashes


@pytest.mark.postgres
async def test_two_workers_on_postgres_share_hosts_one_at_a_time(prefect_api, make_web, pg_url):
    from harvester.flows.extract import extract_flow

    web = make_web(SPECS, seed=41)
    # Each worker serves one host at a time, so the six hosts have to be shared out between them.
    overrides = {**prepared(pg_url), "politeness.max_active_hosts": 1}
    settings = Settings.load(database_url=pg_url).with_overrides(**overrides)
    base = SiteProfile.build(seeds=tuple(web.seeds), name="scale")
    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, base)
    web.clear_records()

    profiles = [base.model_copy(update={"user_agent": agent, "name": f"scale-{n}"}) for n, agent in enumerate(AGENTS)]
    states = await asyncio.gather(*(extract_flow(p, overrides=overrides, return_state=True) for p in profiles))
    assert all(state.is_completed() for state in states), states

    records = web.records()
    assert {r.user_agent for r in records} == set(AGENTS), "control: both workers must have fetched"
    assert duplicates(records) == {}
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in records:
        by_host[record.host].append(record)
    limit = settings.politeness.max_per_host_limit
    for host, hits in sorted(by_host.items()):
        assert max_in_flight(records, host) <= limit, host
        clashes = overlapping(hits)
        assert clashes == [], f"{host}: served by both workers at once: {clashes[:2]}"
    with FrontierStore.open(settings) as store:
        url_states = store.url_states()
    details = [url for spec in SPECS for url in web.truth[spec.name].allowed_detail_urls()]
    assert all(url_states[url][0] == "done" for url in details)
    fetched = {r.url for r in records if r.status == 200}
    assert set(details) <= fetched


def test_overlap_check_catches_two_workers_on_one_host():
    def hit(agent: str, start: float, end: float) -> RequestRecord:
        return RequestRecord("h", "/p", "GET", 200, 10, start, end, 1, None, None, agent)

    assert overlapping([hit(AGENTS[0], 0.0, 1.0), hit(AGENTS[1], 0.5, 1.5)])  # control: a real clash is found
    assert not overlapping([hit(AGENTS[0], 0.0, 1.0), hit(AGENTS[1], 1.0, 2.0), hit(AGENTS[0], 0.2, 0.9)])
