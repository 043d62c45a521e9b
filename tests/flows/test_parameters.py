"""Typed run overrides (issue 24, item 5): only settings safe in Prefect's database, each with its setting's bounds;
a secret or an unknown key is a clear error, and Prefect refuses such a run before storing its parameters.

Before: ``overrides`` was a free-form dict; ``database_url`` in it was stored by Prefect in plain text, and a
typo in a group name raised ``KeyError: 'politness'`` inside the run.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from flows.parameters import RunOverrides
from harvester.errors import ConfigError
from harvester.settings import Settings


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
    typed = RunOverrides.model_validate({"politeness.per_host_limit": 3, "timeout_s": 9.5})
    settings = Settings.load().with_overrides(**typed.dotted())
    assert settings.politeness.per_host_limit == 3 and settings.http.timeout_s == 9.5


@pytest.mark.parametrize("key", ["database_url", "store.sqlite_busy_timeout_s", "postgres_password"])
def test_a_secret_is_refused_saying_where_it_belongs(key: str) -> None:
    with pytest.raises(ValidationError, match="stored in Prefect's database") as raised:
        RunOverrides.model_validate({key: "postgresql://u:pw@db/x"})
    assert "HARVESTER_DATABASE_URL" in str(raised.value) and key in str(raised.value)


def test_an_unknown_key_names_itself_and_the_valid_ones() -> None:
    with pytest.raises(ValidationError, match=r"unknown override 'politness\.per_host_limit'") as raised:
        RunOverrides.model_validate({"politness.per_host_limit": 2})
    assert "per_host_limit" in str(raised.value).split("valid:")[1]


def test_a_bad_dotted_setting_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"'politness\.per_host_limit'.*groups: .*politeness"):
        Settings.load().with_overrides(**{"politness.per_host_limit": 2})
    with pytest.raises(ConfigError, match=r"'politeness\.per_host_limt'.*per_host_limit"):
        Settings.load().with_overrides(**{"politeness.per_host_limt": 2})


async def test_prefect_refuses_a_run_with_a_secret_before_storing_it(prefect_api, sqlite_url) -> None:
    """The deployment's parameter schema forbids unknown keys: the API refuses the run, so nothing is stored."""
    from prefect import get_client

    from flows.harvest import harvest_flow

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
