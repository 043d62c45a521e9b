"""What a run's page in Prefect says, on a started server: the parent flow's own summary of the cycle (changes,
fetches, what the budget deferred) and its log line; a budget that holds across both phases and every worker;
and a harvest that fetched nothing ending Failed with the reason (issue 24: items 1, 2, 3 and 6).

Before: the budget leaked (discovery and extraction each counted from zero) and hid URLs for good; a re-crawl's
changes existed only in the flow's return value, which Prefect does not persist; an unreachable seed ended green.
"""

from __future__ import annotations

import inspect
import socket
from collections import Counter
from typing import Any

from conftest import artifacts_of, prepared

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

SPECS = [HostSpec("a", pages=40, sitemap_children=2), HostSpec("b", pages=30, latency_s=0.002)]


async def run_logs(flow_run_id: Any) -> list[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker

    drained = APILogWorker.drain_all(timeout=10)  # logs reach the server in batches
    if inspect.isawaitable(drained):  # inside a running loop it is a coroutine
        await drained
    async with get_client() as client:
        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [log.message for log in logs]


def stored(db_url: str) -> set[str]:
    with FrontierStore.open(Settings.load(database_url=db_url)) as store:
        return {page.url for page in store.iter_pages(latest=True)}


async def test_a_budget_holds_across_phases_and_workers_and_defers_instead_of_hiding(
    prefect_api, make_web, sqlite_url
):
    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

    web = make_web(SPECS, seed=41)
    overrides = prepared(sqlite_url)
    budget = 5
    state = await harvest_flow(SiteProfile.build(seeds=tuple(web.seeds), name="budgeted", max_pages_per_host=budget),
                               workers=2, overrides=overrides, return_state=True)
    assert state.is_completed(), state
    per_host = Counter(url.split("/")[2] for url in stored(sqlite_url))
    assert sorted(per_host.values()) == [budget, budget], per_host
    summary = (await artifacts_of([state.state_details.flow_run_id]))["harvest-summary"].data
    deferred = int(summary.split("| deferred | ")[1].split(" |")[0])
    allowed = sum(len(web.truth[name].allowed_detail_urls()) for name in ("a", "b"))
    assert deferred >= allowed - 2 * budget, summary

    # The next run without a budget takes up every deferred URL, though the unchanged sitemaps answer 304.
    again = await recrawl_flow(SiteProfile.build(seeds=tuple(web.seeds), name="budgeted"), overrides=overrides,
                               return_state=True)
    assert again.is_completed(), again
    urls = stored(sqlite_url)
    for name in ("a", "b"):
        missing = set(web.truth[name].allowed_detail_urls()) - urls
        assert not missing, f"{name}: {len(missing)} deferred pages never fetched"
    assert duplicates(web.records()) == {}


async def test_a_recrawls_changes_are_on_its_own_run_page(prefect_api, make_web, sqlite_url):
    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

    web = make_web(SPECS[:1], seed=42)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="daily")
    overrides = prepared(sqlite_url)
    assert (await harvest_flow(profile, overrides=overrides, return_state=True)).is_completed()
    before = set(web.truth["a"].allowed_detail_urls())
    day = web.advance_day(changed=0.1, new=0.05, gone=0.05)

    state = await recrawl_flow(profile, refresh=True, overrides=overrides, return_state=True)
    assert state.is_completed(), state
    run_id = state.state_details.flow_run_id
    artifacts = await artifacts_of([run_id])
    assert {"recrawl-summary", "recrawl-hosts"} <= set(artifacts), sorted(artifacts)
    summary = artifacts["recrawl-summary"].data
    assert "# Recrawl of daily" in summary and "| found by discovery | " in summary
    counts = {name: int(summary.split(f"| {name} | ")[1].split(" |")[0]) for name in ("new", "changed", "gone")}
    assert counts["new"] == len(day.all("new") & set(web.truth["a"].allowed_detail_urls())), (counts, summary)
    assert counts["gone"] == len(day.all("gone") & before), (counts, summary)  # never also changed
    assert counts["changed"] == len(day.all("changed") & before), (counts, summary)
    for url in sorted(day.all("new") & set(web.truth["a"].allowed_detail_urls()))[:3]:
        assert f"- {url}" in summary, summary
    lines = [line for line in await run_logs(run_id) if line.startswith("recrawl of daily:")]
    assert len(lines) == 1 and f"{counts['new']} new, {counts['changed']} changed" in lines[0], lines


async def test_a_harvest_that_fetched_nothing_fails_with_the_reason(prefect_api, sqlite_url):
    from harvester.flows.harvest import harvest_flow

    with socket.socket() as sock:  # a port nothing listens on: the unedited placeholder seed's situation
        sock.bind(("127.0.0.1", 0))
        seed = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    overrides = {**prepared(sqlite_url), "http.connect_timeout_s": 1.0}
    state = await harvest_flow(SiteProfile.build(seeds=(seed,), name="placeholder"), overrides=overrides,
                               return_state=True)
    assert state.is_failed(), state
    assert "no seed host answered" in (state.message or ""), state.message
    summary = (await artifacts_of([state.state_details.flow_run_id]))["harvest-summary"].data
    assert "Failed: no seed host answered" in summary, summary
    assert "## Discovery problems" in summary and "robots.txt" in summary, summary  # per-host problems too
