"""Deployment names that cannot collide, and HARVESTER_HOME on the worker (issue 24, item 7), on a started server.

Before: ``harvester serve`` and ``prefect deploy`` both registered ``harvest/harvest`` and silently overwrote each
other; with HARVESTER_HOME unset, ``prefect deploy`` stored an empty working directory and every run crashed on a
``FileNotFoundError`` naming a temporary path, never the variable.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

from conftest import VENV_BIN, stop_group

SITES = '[sites.lost]\nseeds = ["http://127.0.0.1:9/"]\n'
WAIT_S = 120.0
RETRY_WOULD_ACT_S = 5.0


def run(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


async def test_pool_and_served_deployments_coexist_and_a_worker_without_home_says_so(prefect_api, tmp_path):
    from prefect import get_client

    (tmp_path / "sites.toml").write_text(SITES, encoding="utf-8")
    env = {k: v for k, v in prefect_api.items() if k != "HARVESTER_HOME"}
    env["PATH"] = f"{VENV_BIN}:{os.environ.get('PATH', '')}"
    bin_ = str(VENV_BIN)
    run([f"{bin_}/prefect", "work-pool", "create", "nohome", "--type", "process"], env, tmp_path)
    run([f"{bin_}/harvester", "deployments", "--sites", "sites.toml", "--pool", "nohome", "-o", "d.yaml"], env,
        tmp_path)
    (tmp_path / "flows").symlink_to(Path(__file__).parents[2] / "flows")  # `prefect deploy` loads the entrypoints
    run([f"{bin_}/prefect", "deploy", "--all", "--prefect-file", "d.yaml"], env, tmp_path)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        served = subprocess.Popen([f"{bin_}/harvester", "serve", "--sites", "sites.toml"], env=env, cwd=tmp_path,
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    worker_log = tmp_path / "worker.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen([f"{bin_}/prefect", "worker", "start", "--pool", "nohome"],
                                  env={**env, "PREFECT_WORKER_QUERY_SECONDS": "1"},  # Prefect's 10 s: idle waits
                                  cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        async with get_client() as client:
            deadline = time.monotonic() + WAIT_S
            while True:
                names = {f"{d.name}@{d.work_pool_name}" for d in await client.read_deployments()}
                if "lost-serve@None" in names:
                    break
                assert served.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
                await asyncio.sleep(0.5)
            # Both kinds of both registrations, side by side: neither overwrote the other.
            assert {"lost@nohome", "lost-serve@None"} <= names, sorted(names)
            pooled = await client.read_deployment_by_name("harvest/lost")
            assert pooled.work_pool_name == "nohome"
            created = await client.create_flow_run_from_deployment(pooled.id)
            while True:
                state = (await client.read_flow_run(created.id)).state
                if state is not None and state.is_final():
                    break
                assert time.monotonic() < deadline + WAIT_S, worker_log.read_text()[-3000:]
                await asyncio.sleep(1)
            # A run that crashed before it started is not retried (its worker's set-up would fail again): before,
            # the retry automation sent it Crashed -> Scheduled -> Crashed for ever.
            await asyncio.sleep(RETRY_WOULD_ACT_S)
            assert (await client.read_flow_run(created.id)).state.is_crashed()
            for name in ("harvest/lost", "recrawl/lost", "harvest/lost-serve", "recrawl/lost-serve"):
                await client.delete_deployment((await client.read_deployment_by_name(name)).id)
    finally:
        stop_group(served)
        stop_group(worker)
    assert not state.is_completed(), state
    said = (state.message or "") + worker_log.read_text()
    assert "HARVESTER_HOME is not set on this worker" in said, (state, worker_log.read_text()[-3000:])
