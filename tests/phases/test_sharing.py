"""Fair sharing with a worker that starts late (issue 32): workers start at different times (a slow start on a
loaded machine, a dozen workers brought up one by one), and the first to look has leased every host of a small
site by then. Before, the late one found every host held and idled until the others were done; now a holder
over its share hands a host back between two requests, once that host's requests in flight have ended, and the
late worker takes it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from harvester import FrontierStore, phases
from harvester.phases.leases import fair_take, over_share
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import max_in_flight
from harvester.testing.sites import HostSpec

LIMIT = 2
AGENTS = [f"harvester-late-{n}/1.0 (+http://127.0.0.1/contact)" for n in range(2)]
WAIT_S = 120.0


async def test_a_worker_started_after_another_took_every_host_gets_a_share(make_web, db_url, caplog):
    caplog.set_level(logging.DEBUG, logger="harvester")
    specs = [HostSpec(f"l{n}", pages=120, latency_s=0.04) for n in range(4)]
    web = make_web(specs, seed=23)
    settings = Settings.load(database_url=db_url, politeness={"max_active_hosts": 64})
    profiles = [SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=LIMIT, user_agent=agent) for agent in AGENTS]
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profiles[0])
        web.clear_records()
        details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}

        def asked_by_first() -> Counter[str]:
            return Counter(r.host for r in web.records() if r.url in details and r.user_agent == AGENTS[0])

        first = asyncio.create_task(phases.extract(store, settings, profiles[0], worker=0))
        # The event the late start needs: the first worker holds every host (each has had its requests).
        deadline = time.monotonic() + WAIT_S
        while not all(asked_by_first()[spec.name] >= 3 for spec in specs):
            assert not first.done() and time.monotonic() < deadline, asked_by_first()
            await asyncio.sleep(0.02)
        second = asyncio.create_task(phases.extract(store, settings, profiles[1], worker=1))
        results = await asyncio.wait_for(asyncio.gather(first, second), WAIT_S)
        states = store.url_states()

    records = [r for r in web.records() if r.url in details]
    by_agent = Counter(r.user_agent for r in records if r.status == 200)
    assert by_agent[AGENTS[1]] >= len(details) / 10, by_agent  # the late worker got a share
    assert results[0].counters["hosts_shared_out"] >= 1, results[0].counters
    assert [url for url in details if states[url][0] != "done"] == []
    assert all(max_in_flight(records, spec.name) <= LIMIT for spec in specs), [
        max_in_flight(records, spec.name) for spec in specs]
    twice = {url: n for url, n in Counter(r.url for r in records).items() if n > 1}
    assert twice == {}
    # A hand-back is logged as what it is, once per host handed back; no lease lapsed, so none is said to have.
    handed = [r for r in caplog.records if r.getMessage().startswith("handed host ")]
    assert len(handed) == sum(r.counters["hosts_shared_out"] for r in results), [r.getMessage() for r in handed]
    assert all(r.levelno == logging.INFO and "with 1 other worker(s)" in r.getMessage() for r in handed), [
        (r.levelname, r.getMessage()) for r in handed]
    turned = [r.getMessage() for r in caplog.records if "handed back: its turn stops" in r.getMessage()]
    assert turned, "the control: a host handed back had a request stopped"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "lease" in r.getMessage()] == []


def test_a_holder_is_over_its_share_only_while_another_worker_could_take_a_host():
    """The rule behind the hand-back, alone: over the share of the hosts with work, split among the workers
    there are, and holding more than one (a last host is never handed back: the other would only take it over)."""
    assert over_share(active=4, with_work=4, others=1)
    assert not over_share(active=2, with_work=4, others=1)
    assert not over_share(active=4, with_work=4, others=0)  # alone
    assert not over_share(active=1, with_work=1, others=2)
    assert over_share(active=3, with_work=6, others=2)  # three on six hosts: two each
    # A late worker's take: its share, by steps, of what is there.
    assert fair_take(room=64, with_work=4, others=1, mine=0) == 1
    assert fair_take(room=64, with_work=4, others=1, mine=1) == 1
    assert fair_take(room=64, with_work=4, others=1, mine=2) == 0
