"""``harvester serve`` on a started Prefect server: both deployments with their cron schedules, and runs created
through the API with edited parameters (as the UI's form does), served by that process."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import VENV_BIN, prepared, stop_group

from harvester.flows.serve import HARVEST_CRON, RECRAWL_CRON
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec
from harvester.testing.web import TestWeb

RUN_TIMEOUT_S = 150.0


@pytest.fixture
def served(prefect_api: dict[str, str], make_web: Any, sqlite_url: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """``harvester serve`` in its own process group, its runs writing to a migrated SQLite file."""
    web = make_web([HostSpec("s", pages=25), HostSpec("t", pages=20)], seed=31)
    prepared(sqlite_url)
    env = {**prefect_api, "HARVESTER_DATABASE_URL": sqlite_url, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(  # our own console script, no shell
            [str(VENV_BIN / "harvester"), "serve", "http://127.0.0.1:9/", "--name", "served"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path,
        )
    try:
        yield {"web": web, "db_url": sqlite_url, "log": log, "proc": proc}
    finally:
        stop_group(proc)


async def deployment(name: str, proc: subprocess.Popen[bytes], log: Path) -> Any:
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    deadline = time.monotonic() + 90
    async with get_client() as client:
        while True:
            try:
                return await client.read_deployment_by_name(name)
            except ObjectNotFound:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, f"{name} never registered:\n{log.read_text()[-3000:]}"
                await asyncio.sleep(0.5)


async def finished(flow_run_id: Any, log: Path) -> Any:
    from prefect import get_client

    deadline = time.monotonic() + RUN_TIMEOUT_S
    async with get_client() as client:
        while True:
            run = await client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final():
                return run
            assert time.monotonic() < deadline, f"run still {run.state}:\n{log.read_text()[-3000:]}"
            await asyncio.sleep(0.5)


async def test_serve_registers_both_deployments_and_serves_an_edited_run(served):
    from prefect import get_client

    web: TestWeb = served["web"]
    harvest = await deployment("harvest/served-serve", served["proc"], served["log"])
    recrawl = await deployment("recrawl/served-serve", served["proc"], served["log"])
    await deployment("close-crashed-run/healing-serve", served["proc"], served["log"])  # the closing automation's
    assert [s.schedule.cron for s in harvest.schedules] == [HARVEST_CRON]
    assert [s.schedule.cron for s in recrawl.schedules] == [RECRAWL_CRON]
    assert {"harvester", "harvest"} <= set(harvest.tags) and {"harvester", "recrawl"} <= set(recrawl.tags)
    assert harvest.parameters["profile"]["name"] == "served"
    # The UI's form is built from this schema: the profile is a typed object with validation bounds.
    schema = harvest.parameter_openapi_schema
    assert "profile" in schema["properties"] and "profile" in schema.get("required", [])

    # A run created as the UI form does: defaults taken, the profile's name and seeds edited.
    profile = {**harvest.parameters["profile"], "name": "edited", "seeds": web.seeds}
    async with get_client() as client:
        created = await client.create_flow_run_from_deployment(harvest.id, parameters={"profile": profile})
    run = await finished(created.id, served["log"])
    assert run.state.is_completed(), f"{run.state}:\n{served['log'].read_text()[-3000:]}"
    assert run.name == "harvest-edited"
    records = web.records()
    assert duplicates(records) == {}
    with FrontierStore.open(Settings.load(database_url=served["db_url"])) as store:
        states = store.url_states()
    for name in ("s", "t"):
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls())


async def test_an_invalid_parameter_is_rejected_or_fails_clearly(served):
    from prefect import get_client

    harvest = await deployment("harvest/served-serve", served["proc"], served["log"])
    async with get_client() as client:
        # Outside the JSON schema's bounds: the API refuses to create the run.
        with pytest.raises(Exception, match=r"(?i)validation"):
            await client.create_flow_run_from_deployment(
                harvest.id, parameters={"profile": {**harvest.parameters["profile"], "per_host_limit": 0}}
            )
        # Not an http(s) URL: refused too, naming the seed.
        with pytest.raises(Exception, match=r"'ftp://x' should not be valid under .*absolute http\(s\) URL"):
            await client.create_flow_run_from_deployment(
                harvest.id, parameters={"profile": {**harvest.parameters["profile"], "seeds": ["ftp://x"]}}
            )
        # Schema-valid, but an IPv4 spelling only the run's own check knows: it fails before any crawl, naming it.
        created = await client.create_flow_run_from_deployment(
            harvest.id, parameters={"profile": {**harvest.parameters["profile"], "seeds": ["http://0177.0.0.1/"]}}
        )
    run = await finished(created.id, served["log"])
    assert run.state.is_failed(), run.state
    assert "http://0177.0.0.1/" in (run.state.message or ""), run.state.message
    assert "write '127.0.0.1'" in (run.state.message or ""), run.state.message
