"""Typed run overrides (issue 24, item 5): only settings safe in Prefect's database, each with its setting's bounds;
a secret or an unknown key is a clear error, and Prefect refuses such a run before storing its parameters.

Before: ``overrides`` was a free-form dict; ``database_url`` in it was stored by Prefect in plain text, and a
typo in a group name raised ``KeyError: 'politness'`` inside the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import prepared
from pydantic import ValidationError

from harvester.errors import ConfigError
from harvester.flows.parameters import PLAIN_TEXT_REFUSAL, RunOverrides
from harvester.settings import Settings
from harvester.site_profile import SEED_REFUSAL


@pytest.mark.parametrize("name", sorted(RunOverrides.SETTING))
def test_each_override_is_a_real_setting_with_the_same_bounds(name: str) -> None:
    *groups, leaf = RunOverrides.SETTING[name].split(".")
    model: type = Settings
    for group in groups:
        model = type(getattr(Settings(), group))
    setting = model.model_fields[leaf]
    override = RunOverrides.model_fields[name]
    assert override.metadata == setting.metadata, (override.metadata, setting.metadata)


def test_dotted_and_plain_keys_both_reach_the_settings() -> None:
    typed = RunOverrides.model_validate({"politeness.per_host_start": 3, "timeout_s": 9.5})
    settings = Settings.load().with_overrides(**typed.dotted())
    assert settings.politeness.per_host_start == 3 and settings.http.timeout_s == 9.5


@pytest.mark.parametrize("key", ["database_url", "store.sqlite_busy_timeout_s", "postgres_password"])
def test_a_secret_is_refused_saying_where_it_belongs(key: str) -> None:
    with pytest.raises(ValidationError, match="stored in Prefect's database") as raised:
        RunOverrides.model_validate({key: "postgresql://u:pw@db/x"})
    assert "HARVESTER_DATABASE_URL" in str(raised.value) and key in str(raised.value)


def test_an_unknown_key_names_itself_and_the_valid_ones() -> None:
    with pytest.raises(ValidationError, match=r"unknown override 'politness\.per_host_start'") as raised:
        RunOverrides.model_validate({"politness.per_host_start": 2})
    assert "per_host_start" in str(raised.value).split("valid:")[1]


def test_a_bad_dotted_setting_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"'politness\.per_host_start'.*groups: .*politeness"):
        Settings.load().with_overrides(**{"politness.per_host_start": 2})
    with pytest.raises(ConfigError, match=r"'politeness\.per_host_strat'.*per_host_start"):
        Settings.load().with_overrides(**{"politeness.per_host_strat": 2})


async def test_prefect_refuses_a_run_with_a_secret_before_storing_it(prefect_api, sqlite_url) -> None:
    """The deployment's parameter schema forbids unknown keys: the API refuses the run, so nothing is stored."""
    from prefect import get_client

    from harvester.flows.harvest import harvest_flow

    deployment_id = await (await harvest_flow.ato_deployment(name="parameters-check")).aapply()
    profile = {"name": "p", "seeds": ["http://127.0.0.1:9/"]}
    async with get_client() as client:
        with pytest.raises(Exception, match=r"(?i)validation|unprocessable|database_url"):
            await client.create_flow_run_from_deployment(
                deployment_id, parameters={"profile": profile, "overrides": {"database_url": "sqlite:////tmp/x.db"}}
            )
        runs = await client.read_flow_runs()
        assert not any("sqlite:////tmp/x.db" in str(run.parameters) for run in runs)
        await client.delete_deployment(deployment_id)


REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def checked_deployment(prefect_api: dict[str, str]) -> Iterator[Any]:
    """One deployment of the harvest flow (its parameter schema as the server holds it), for the refusals below."""
    from prefect import get_client

    from harvester.flows.harvest import harvest_flow

    deployment_id = asyncio.run(_apply(harvest_flow))
    yield deployment_id

    async def delete() -> None:
        async with get_client() as client:
            await client.delete_deployment(deployment_id)

    asyncio.run(delete())


async def _apply(flow: Any) -> Any:
    return await (await flow.ato_deployment(name="validation-check")).aapply()


PROFILE = {"name": "p", "seeds": ["http://127.0.0.1:9/"]}


@pytest.mark.parametrize(("parameters", "said"), [
    ({"workers": 0}, "workers'. Failure reason: 0 is less than the minimum of 1"),
    ({"workers": -3}, "workers'. Failure reason: -3 is less than the minimum of 1"),
    ({"workers": 65}, "workers'. Failure reason: 65 is greater than the maximum of 64"),
    ({"overrides": {"database_url": "postgresql://u:pw@db/x"}}, "'database_url' should not be valid under "),
    ({"overrides": {"politeness.per_host_limit": 2}}, "'politeness.per_host_limit' is not one of ['connect_timeout_s'"),
    ({"profile": {**PROFILE, "seeds": ["https://a.example/", "ftp://x/"]}},
     f"seeds[1]'. Failure reason: 'ftp://x/' should not be valid under {{'description': 'a seed {SEED_REFUSAL}'}}"),
    ({"profile": {**PROFILE, "seeds": ["example.org/news"]}}, "'example.org/news' should not be valid under"),
])
async def test_the_server_refuses_a_bad_run_in_the_projects_words(checked_deployment, parameters, said) -> None:
    """Refused where the user types it (the UI form, `prefect deployment run`, the API): a 409 before storing."""
    from prefect import get_client

    async with get_client() as client:
        with pytest.raises(Exception, match="409") as refused:
            await client.create_flow_run_from_deployment(checked_deployment, parameters={"profile": PROFILE,
                                                                                      **parameters})
    body = refused.value.response.text  # type: ignore[attr-defined]
    assert said in body, body
    if "database_url" in str(parameters):
        assert PLAIN_TEXT_REFUSAL in body and "pw@db" not in body, body  # the project's words, never the value
    async with get_client() as client:  # control: the same run with good values is accepted
        good = {**PROFILE, "seeds": ["HTTPS://a.example/", "http://127.0.0.1:9/"]}
        run = await client.create_flow_run_from_deployment(checked_deployment, parameters={"profile": good,
                                                                                          "workers": 64})
        await client.delete_flow_run(run.id)


def run_engine(prefect_api: dict[str, str], flow_run_id: Any) -> None:
    """What a worker does with a run: Prefect's engine in a process of its own, here in this checkout."""
    env = {**prefect_api, "HARVESTER_DATABASE_URL": os.environ["HARVESTER_DATABASE_URL"],
           "PREFECT__FLOW_RUN_ID": str(flow_run_id)}
    done = subprocess.run([sys.executable, "-m", "prefect.engine"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert "Traceback" not in done.stdout[:200], done.stdout[-3000:] + done.stderr[-3000:]


async def test_a_secret_let_through_by_a_client_is_refused_at_start_and_erased(
    checked_deployment, prefect_api, sqlite_url
):
    """A client may switch the server's check off for one run: the run is stored, then fails at its start in the
    project's words, and the secret is erased from its stored parameters."""
    from prefect import get_client

    prepared(sqlite_url)
    secret = {"database_url": "postgresql://u:pw@db/x", "per_host_limit": 2}
    async with get_client() as client:
        answer = await client._client.post(
            f"/deployments/{checked_deployment}/create_flow_run",
            json={"parameters": {"profile": PROFILE, "overrides": secret}, "enforce_parameter_schema": False,
                  "name": "typed-by-hand"},
        )
        flow_run_id = answer.json()["id"]
        assert "pw@db" in str((await client.read_flow_run(flow_run_id)).parameters)  # stored, as the client asked
    run_engine(prefect_api, flow_run_id)
    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
    assert run.state.is_failed(), run.state
    assert PLAIN_TEXT_REFUSAL in (run.state.message or ""), run.state.message
    assert "pw@db" not in str(run.parameters) and run.parameters["overrides"] == {"per_host_limit": 2}
    assert run.name == "typed-by-hand"


async def test_a_name_typed_for_a_run_is_kept_and_prefects_own_is_replaced(checked_deployment, prefect_api, sqlite_url):
    from prefect import get_client

    prepared(sqlite_url)
    async with get_client() as client:
        typed = await client.create_flow_run_from_deployment(checked_deployment, parameters={"profile": PROFILE},
                                                             name="after the fix")
        unnamed = await client.create_flow_run_from_deployment(checked_deployment, parameters={"profile": PROFILE})
    for run in (typed, unnamed):  # the seed refuses connections: each run ends at once, Failed (NothingFetched)
        run_engine(prefect_api, run.id)
    async with get_client() as client:
        assert (await client.read_flow_run(typed.id)).name == "after the fix"
        assert (await client.read_flow_run(unnamed.id)).name == "harvest-p"


async def test_a_missing_config_file_fails_the_run_at_its_start_in_the_projects_words(
    prefect_api, sqlite_url, tmp_path
):
    """What only the worker can check (the file is on its disk) fails the run before any request, its message in
    the run's state and logs in the UI."""
    from prefect.logging.handlers import APILogWorker
    from test_shutdown import run_logs

    from harvester.flows.harvest import harvest_flow
    from harvester.site_profile import SiteProfile

    prepared(sqlite_url)
    missing = tmp_path / "nowhere.toml"
    state = await harvest_flow(SiteProfile.build(**PROFILE), config_file=str(missing), return_state=True)
    assert state.is_failed(), state
    said = f"config file {str(missing)!r} does not exist"
    assert said in (state.message or ""), state.message
    await APILogWorker.drain_all(timeout=10)
    assert said in await run_logs(state.state_details.flow_run_id)


@pytest.mark.parametrize("extra_loggers", [None, "harvester"])
async def test_a_database_that_does_not_answer_is_waited_for_in_the_runs_logs(
    checked_deployment, prefect_api, extra_loggers
) -> None:
    """A run whose database does not answer (a closed port here) says so in its logs in the UI, read from the API,
    once, on a worker that set nothing for it (no ``PREFECT_LOGGING_EXTRA_LOGGERS``) as on one that did. Before, on
    the first, the library's line went to the worker's stdout only: a run Running in silence for 180 s.

    Each case is a site of its own, whose slot (``one_run_per_site``) is removed at the end: the killed run holds
    its slot until its lease runs out (60 s, Prefect's floor), and the second case waited those 60 s for it."""
    from conftest import free_port
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound
    from test_shutdown import run_logs

    from harvester.flows.site_slot import limit_name

    env = {key: value for key, value in prefect_api.items() if key != "PREFECT_LOGGING_EXTRA_LOGGERS"}
    if extra_loggers is not None:
        env["PREFECT_LOGGING_EXTRA_LOGGERS"] = extra_loggers
    env.update(HARVESTER_DATABASE_URL=f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nobody_listens")
    site = f"unanswered-{extra_loggers}"
    async with get_client() as client:
        run = await client.create_flow_run_from_deployment(checked_deployment,
                                                           parameters={"profile": {**PROFILE, "name": site}})
    env["PREFECT__FLOW_RUN_ID"] = str(run.id)
    engine = subprocess.Popen([sys.executable, "-m", "prefect.engine"], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while "waiting up to" not in (said := await run_logs(run.id)):
            assert engine.poll() is None and time.monotonic() < deadline, said
            await asyncio.sleep(0.5)
    finally:
        os.killpg(engine.pid, signal.SIGKILL)
        engine.wait()
        async with get_client() as client:  # the shared server: no slot of a dead run left held
            with contextlib.suppress(ObjectNotFound):
                await client.delete_global_concurrency_limit_by_name(limit_name(site))
    lines = [line for line in said.splitlines() if "waiting up to" in line]
    assert len(lines) == 1, said  # once: not once per handler
    assert "database unavailable, waiting up to 180 s for it" in lines[0] and "nobody_listens" in lines[0], lines
    async with get_client() as client:
        await client.delete_flow_run(run.id)
