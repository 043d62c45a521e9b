"""docs/operations.md's walkthrough, run as written (issue 23): from zero to three scheduled sites on a process work
pool with two workers. The commands and the sites file are read from the document itself; only addresses change
(the test web's seeds, this test's PostgreSQL database, the started server, this checkout), and the server is the
session's. Then each site's first harvest, started with `prefect deployment run`, completes on those workers.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from conftest import VENV_BIN, stop_group

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing.sites import HostSpec

DOC = Path(__file__).parents[2] / "docs" / "operations.md"
REPO = Path(__file__).parents[2]
RUN_WAIT_S = 240.0


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def walkthrough() -> tuple[list[str], str]:
    """The Steps section's shell commands (comments dropped) and its sites file."""
    section = DOC.read_text(encoding="utf-8").split("### Steps", 1)[1]
    shell = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    toml = re.search(r"```toml\n(.*?)```", section, flags=re.S)
    assert shell and toml, "docs/operations.md lost its walkthrough"
    commands = [line.strip() for line in shell.group(1).splitlines() if line.strip() and not line.startswith("#")]
    return commands, toml.group(1)


async def test_the_operations_walkthrough_runs_as_written(prefect_api, make_web, pg_url, tmp_path):
    from prefect import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterTags, FlowRunFilter, FlowRunFilterId

    web = make_web([HostSpec("news", pages=15), HostSpec("shop", pages=12), HostSpec("docs", pages=10)], seed=91)
    commands, sites = walkthrough()
    for name in ("news", "shop", "docs"):
        sites = sites.replace(f"https://{name}.example/", web.seeds[web.names.index(name)])
    (tmp_path / "sites.toml").write_text(sites, encoding="utf-8")
    shutil.copytree(REPO / "flows", tmp_path / "flows")  # the checkout the workers run from (HARVESTER_HOME)
    mine = {"HARVESTER_DATABASE_URL": pg_url, "PREFECT_API_URL": prefect_api["PREFECT_API_URL"],
            "HARVESTER_HOME": str(tmp_path)}
    env = {key: value for key, value in prefect_api.items() if not key.startswith("HARVESTER_")}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    workers: list[subprocess.Popen[bytes]] = []
    started: list[str] = []
    try:
        for line in commands:
            if line.startswith("export "):
                for key, _, value in (part.partition("=") for part in shlex.split(line)[1:]):
                    env[key] = mine.get(key, value)
            elif line.startswith("prefect server start"):
                continue  # the session's server
            elif line.endswith("&"):
                log = (tmp_path / f"worker{len(workers)}.log").open("wb")
                workers.append(subprocess.Popen(shlex.split(line[:-1]), env=env, cwd=tmp_path, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True))
            else:
                done = subprocess.run(shlex.split(line), env=env, cwd=tmp_path, capture_output=True, text=True,
                                      timeout=180)
                assert done.returncode == 0, f"{line}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
                if line.startswith("prefect deployment run"):
                    started.append(re.search(r"UUID: ([0-9a-f-]{36})", done.stdout).group(1))  # type: ignore[union-attr]
        assert len(workers) == 2 and len(started) == 3

        async with get_client() as client:
            deployments = await client.read_deployments(
                deployment_filter=DeploymentFilter(tags=DeploymentFilterTags(all_=["harvester"])))
            names = {f"{d.name}:{sorted(d.tags)}": d for d in deployments}
            for site in ("news", "shop", "docs"):
                for kind in ("harvest", "recrawl"):
                    key = f"{site}:{sorted(['harvester', kind, site])}"
                    assert key in names, sorted(names)
                    assert names[key].schedules and names[key].work_pool_name == "harvester"
            shop = names[f"shop:{sorted(['harvester', 'harvest', 'shop'])}"]
            assert shop.schedules[0].schedule.cron == "0 1 * * 6"
            assert shop.schedules[0].schedule.timezone == "Europe/Berlin"
            assert "overrides" in shop.parameter_openapi_schema["properties"]

            deadline = time.monotonic() + RUN_WAIT_S
            while True:
                runs = await client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=started)))
                if all(run.state is not None and run.state.is_final() for run in runs):
                    break
                assert time.monotonic() < deadline, [(r.name, r.state) for r in runs] + [
                    (tmp_path / f"worker{i}.log").read_text()[-2000:] for i in range(2)]
                await asyncio.sleep(1)
        assert all(run.state.is_completed() for run in runs), [(r.name, r.state) for r in runs]
    finally:
        for worker in workers:
            stop_group(worker)
    with FrontierStore.open(Settings.load(database_url=pg_url)) as store:
        states = store.url_states()
    for name in ("news", "shop", "docs"):
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls()), name


def test_enter_home_names_the_variable_when_it_is_unset_or_wrong(monkeypatch: Any, tmp_path: Path) -> None:
    import pytest

    from harvester.errors import ConfigError
    from harvester.flows.home import enter_home

    monkeypatch.delenv("HARVESTER_HOME", raising=False)
    with pytest.raises(ConfigError, match="HARVESTER_HOME is not set on this worker"):
        enter_home()
    monkeypatch.setenv("HARVESTER_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"HARVESTER_HOME=.* is not a harvester checkout"):
        enter_home()
    (tmp_path / "flows").mkdir()
    monkeypatch.chdir(REPO)
    assert enter_home() == {"directory": str(tmp_path)} and Path.cwd() == tmp_path
