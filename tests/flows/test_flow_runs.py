"""The four flows complete against the test web on a started Prefect server and leave their artifacts."""

from __future__ import annotations

import json
from typing import Any

from conftest import artifacts_of, child_runs, prepared

from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

SPECS = [HostSpec("a", pages=40), HostSpec("b", pages=30, latency_s=0.002, sitemap_children=3)]


def table(artifact: Any) -> list[dict[str, Any]]:
    data = artifact.data
    return json.loads(data) if isinstance(data, str) else data


async def test_harvest_flow_completes_with_every_artifact(prefect_api, make_web, sqlite_url):
    from harvester.flows.harvest import harvest_flow

    web = make_web(SPECS, seed=11)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="arts")
    state = await harvest_flow(profile, workers=2, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_completed(), state
    result = await state.result()
    # The flow's result is the tasks' small counters, not page bodies.
    allowed = sum(len(web.truth[name].allowed_detail_urls()) for name in ("a", "b"))
    assert result["extract"]["state:done"] >= allowed, result

    children = await child_runs(state.state_details.flow_run_id)
    assert {run.name for run in children} == {"discover-arts", "extract-arts"}
    assert all(run.state.is_completed() for run in children)
    artifacts = await artifacts_of([run.id for run in children])
    assert {"discover-summary", "discover-hosts", "discover-sources", "extract-summary", "extract-hosts",
            "extract-progress"} <= set(artifacts), sorted(artifacts)

    summary = artifacts["extract-summary"].data
    assert "# Extraction of arts" in summary and "| done |" in summary, summary
    hosts = {row["host"]: row for row in table(artifacts["extract-hosts"])}
    assert set(hosts) == {web.origin("a"), web.origin("b")}
    for name in ("a", "b"):
        row = hosts[web.origin(name)]
        assert row["fetched"] >= len(web.truth[name].allowed_detail_urls()), row
        assert 1 <= row["peak_in_flight"] <= row["limit"], row
    sources = table(artifacts["discover-sources"])
    assert {row["source"] for row in sources} >= {"sitemap", "feed", "listing"}, sources
    assert float(artifacts["extract-progress"].data) == 100.0

    records = web.records()
    assert duplicates(records) == {}
    fetched = {r.url for r in records if r.status == 200}
    for name in ("a", "b"):
        assert set(web.truth[name].allowed_detail_urls()) <= fetched


async def test_discover_then_extract_then_recrawl_flows(prefect_api, make_web, sqlite_url):
    from harvester.flows.discover import discover_flow
    from harvester.flows.extract import extract_flow
    from harvester.flows.recrawl import recrawl_flow

    web = make_web(SPECS[:1], seed=12)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="steps")
    overrides = prepared(sqlite_url)

    found = await discover_flow(profile, overrides=overrides, return_state=True)
    assert found.is_completed(), found
    assert not [r for r in web.records() if r.url in set(web.truth["a"].allowed_detail_urls())]
    fetched = await extract_flow(profile, overrides=overrides, return_state=True)
    assert fetched.is_completed(), fetched
    extract_artifacts = await artifacts_of([fetched.state_details.flow_run_id])
    assert {"extract-summary", "extract-hosts", "extract-progress"} <= set(extract_artifacts)

    web.advance_day(changed=0.1, new=0.05, gone=0.05)
    web.clear_records()
    again = await recrawl_flow(profile, refresh=True, overrides=overrides, return_state=True)
    assert again.is_completed(), again
    result = await again.result()
    assert result["changes"]["new"] >= 1 and result["changes"]["gone"] >= 1, result["changes"]
    children = await child_runs(again.state_details.flow_run_id)
    artifacts = await artifacts_of([run.id for run in children])
    assert {"discover-summary", "extract-summary", "extract-hosts"} <= set(artifacts), sorted(artifacts)
    # Day two is conditional: most of the known pages answer 304.
    pages = [r for r in web.records() if r.url in set(web.truth["a"].detail_urls())]
    assert sum(r.status == 304 for r in pages) > sum(r.status == 200 for r in pages), pages[:5]


async def test_a_failed_discover_flow_finishes_its_run_row_as_failed_saying_why(
    prefect_api, make_web, sqlite_url, monkeypatch
):
    """As extract_flow: a host whose task fails (a ConfigError: no retry) fails the flow, and its run row is closed
    ``failed`` with the error; it stayed ``running``, the discovery before it the last ``harvester status`` showed."""
    from harvester import phases
    from harvester.errors import ConfigError
    from harvester.flows.discover import discover_flow
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings

    web = make_web([HostSpec("a", pages=4)], seed=12)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="broken")

    async def discover(*args: Any, **kwargs: Any) -> Any:
        raise ConfigError("the host's discovery broke on purpose")

    monkeypatch.setattr(phases, "discover", discover)
    state = await discover_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_failed(), state
    with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
        last = store.last_run("discover")
    assert last is not None and last["status"] == "failed", last
    assert "the host's discovery broke on purpose" in last["counters"]["error"], last


async def test_a_harvest_whose_reports_fail_at_the_end_still_completes(prefect_api, make_web, sqlite_url, monkeypatch):
    """The Prefect API refuses every artifact (the progress, each phase's summary and tables, the cycle's) and the
    cycle's event: each failure is logged, and the harvest, its work done and written, completes."""
    from harvester.flows import artifacts
    from harvester.flows.harvest import harvest_flow
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings

    refused: list[str] = []

    async def away(*args: Any, key: str | None = None, **kwargs: Any) -> Any:
        refused.append(str(key))
        raise RuntimeError("the Prefect API is away")

    def no_event(**kwargs: Any) -> None:
        refused.append("event")
        raise RuntimeError("the Prefect API is away")

    for name in ("acreate_markdown_artifact", "acreate_table_artifact", "acreate_progress_artifact"):
        monkeypatch.setattr(artifacts, name, away)
    monkeypatch.setattr(artifacts, "emit_event", no_event)
    web = make_web([HostSpec("a", pages=6)], seed=13)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="unreported")
    state = await harvest_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_completed(), state
    assert {"extract-progress", "discover-summary", "extract-summary", "harvest-summary", "event"} <= set(refused)
    with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
        runs = [store.last_run(phase) for phase in ("discover", "extract")]
    assert all(run is not None and run["status"] == "completed" for run in runs), runs
