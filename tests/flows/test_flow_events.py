"""Events for what changed, on a started Prefect server (issue 23): a re-crawl emits one event carrying its counts,
never one per page, and an automation on that event starts a downstream deployment, as docs/operations.md shows.

Before: nothing downstream could react to a harvest except by polling the frontier.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

from conftest import artifacts_of, prepared

from harvester.cli_tables import status_of
from harvester.flows.events import EVENT_CHANGED
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import CYCLE_COUNTS
from harvester.testing.sites import HostSpec

WAIT_S = 90.0


async def drain_events() -> None:
    from prefect.events.worker import EventsWorker

    drained = EventsWorker.drain_all(timeout=10)
    if inspect.isawaitable(drained):
        await drained


async def site_events(site: str, since: Any) -> list[Any]:
    from prefect import get_client
    from prefect.events.filters import EventFilter, EventOccurredFilter, EventResourceFilter

    await drain_events()
    async with get_client() as client:
        page = await client.read_events(filter=EventFilter(
            occurred=EventOccurredFilter(since=since),
            resource=EventResourceFilter(id=[f"harvester.site.{site}"]),
        ), limit=50)
    return list(page.events)


async def downstream_deployment() -> Any:
    """A deployment to be started by the automation (no worker needed: its run is created, and waits)."""
    from prefect import get_client

    async with get_client() as client:
        flow_id = await client.create_flow_from_name("read-new-pages")
        return await client.create_deployment(flow_id=flow_id, name="on-change")


async def test_a_recrawl_with_changes_emits_one_event_and_an_automation_starts_a_deployment(
    prefect_api, make_web, sqlite_url
):
    from prefect import get_client
    from prefect.automations import Automation
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
    from prefect.events.actions import RunDeployment
    from prefect.events.schemas.automations import EventTrigger, Posture
    from prefect.types._datetime import now

    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

    web = make_web([HostSpec("a", pages=30)], seed=51)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="evented")
    overrides = prepared(sqlite_url)
    assert (await harvest_flow(profile, overrides=overrides, return_state=True)).is_completed()

    deployment_id = await downstream_deployment()
    automation = await Automation(
        name="read-new-pages-of-evented",
        trigger=EventTrigger(
            expect={EVENT_CHANGED}, match={"prefect.resource.id": "harvester.site.evented"},
            posture=Posture.Reactive, threshold=1,
        ),
        actions=[RunDeployment(source="selected", deployment_id=deployment_id, parameters={})],
    ).acreate()
    await asyncio.sleep(2)  # the server's trigger service loads new automations on a short cycle

    before = set(web.truth["a"].allowed_detail_urls())
    day = web.advance_day(changed=0.1, new=0.1, gone=0.05, restyled=0.1)
    since = now("UTC")
    state = await recrawl_flow(profile, refresh=True, overrides=overrides, return_state=True)
    assert state.is_completed(), state

    deadline = time.monotonic() + WAIT_S
    while not (events := await site_events("evented", since)):  # the server persists events in batches
        assert time.monotonic() < deadline, "no event of the re-crawl reached the server"
        await asyncio.sleep(1)
    await asyncio.sleep(2)
    events = await site_events("evented", since)  # and no second one follows
    assert [event.event for event in events] == [EVENT_CHANGED], [e.event for e in events]
    payload = events[0].payload
    assert payload["kind"] == "recrawl" and payload["site"] == "evented"
    # The test web's truth, exactly (gone is never also changed; a restyle is counted apart).
    new = day.all("new") & set(web.truth["a"].allowed_detail_urls())
    truth = {"new": len(new), "changed": len(day.all("changed") & before), "gone": len(day.all("gone") & before),
             "restyled": len(day.all("restyled") & before), "missing": 0, "deferred": 0, "failed": 0}
    assert {key: payload[key] for key in truth} == truth, payload
    assert payload["fetched"] > 0 and payload["duration_s"] > 0 and payload["failures"] == {}, payload
    # The artifact and ``harvester status`` carry the same numbers as the event, every one of them.
    summary = (await artifacts_of([state.state_details.flow_run_id]))["recrawl-summary"].data
    for name in CYCLE_COUNTS:
        assert f"| {name.replace('_', ' ')} | {payload[name]} |" in summary, (name, summary)
    status = status_of(Settings.load(database_url=sqlite_url))["last_cycle"]
    assert {name: status[name] for name in CYCLE_COUNTS} == {name: payload[name] for name in CYCLE_COUNTS}
    assert status["id"] == payload["cycle"]

    deadline = time.monotonic() + WAIT_S
    async with get_client() as client:
        while True:
            runs = await client.read_flow_runs(
                deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
            )
            if runs:
                break
            assert time.monotonic() < deadline, "the automation never started the downstream deployment"
            await asyncio.sleep(1)
        await client.delete_automation(automation.id)
    assert len(runs) == 1, runs
