"""One started Prefect server (``prefect server start`` on a free 127.0.0.1 port, temp PREFECT_HOME) shared by
every test in tests/flows, and helpers to read runs and artifacts back through the Prefect client.

A started server records task runs reliably and serves subprocesses (``harvester serve``, ``harvester harvest``);
the temporary server a bare flow call starts does neither well (docs/internals.md).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester.cli import PREFECT_QUIET_DEFAULTS

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).parents[2]
QUIET = {**PREFECT_QUIET_DEFAULTS, "PREFECT_UI_ENABLED": "false"}
"""The CLI's quiet Prefect (no telemetry, warnings only), and no UI for a test's server."""
SERVER_START_TIMEOUT_S = 600.0
"""A bound, not a wait: /health is polled and a server that exits fails at once. 90 s was too short on a shared
2-core machine: at a load of 29 the server had printed its banner and still did not answer after 90 s (135 s to
the error), and every test of tests/flows on that worker errored with it (6 of test_shutdown in a whole run)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(api_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=1) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"prefect server not healthy after {SERVER_START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
    """Stop a subprocess started in its own session (process group), then make sure it is gone."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=timeout)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


def drain_prefect_workers() -> None:
    """Send the buffered logs and events while the server still answers (else they retry into a closed port)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A started Prefect server; this process talks to it (temporary_settings) and ``env`` is for subprocesses."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, **QUIET, "PREFECT_HOME": str(home), "PREFECT_API_URL": api_url}
    log = home / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=home,
        )
    try:
        wait_healthy(api_url, proc, log)
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            yield {**env, "PREFECT_LOGGING_LEVEL": "WARNING"}
            drain_prefect_workers()
    finally:
        stop_group(proc)


async def child_runs(flow_run_id: Any) -> list[Any]:
    """The subflow runs of a flow run (harvest and recrawl call discover and extract as subflows)."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    async with get_client() as client:
        return list(await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        ))


async def artifacts_of(flow_run_ids: list[Any]) -> dict[str, Any]:
    """Artifacts created by these flow runs, by key (the latest version of each)."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=list(flow_run_ids)))
        )
    return {artifact.key: artifact for artifact in found if artifact.key}


async def free_a_dead_runs_site_slot(site: str) -> None:
    """Remove the slot of ``site`` (``one_run_per_site``) that a run killed with SIGKILL still holds, as an operator
    would for a run known dead: its lease would keep the next run of the site waiting for it to run out (60 s,
    Prefect's floor). For a test that reruns at once; the next run creates the limit again."""
    from prefect import get_client

    from harvester.flows.site_slot import limit_name

    async with get_client() as client:
        limit = await client.read_global_concurrency_limit_by_name(limit_name(site))
        assert limit.active_slots == 1, limit  # control: the dead run holds it
        await client.delete_global_concurrency_limit_by_name(limit_name(site))


@pytest.fixture(autouse=True)
def _own_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """``prepared`` sets HARVESTER_DATABASE_URL for the flows run in this process: restored after each test."""
    monkeypatch.delenv("HARVESTER_DATABASE_URL", raising=False)


def prepared(db_url: str) -> dict[str, Any]:
    """Point the flows run in this process at a migrated test database (never the default file), the way a
    worker is pointed at one: by its environment, never by a run parameter (which Prefect would store). Returns
    the run's overrides: none."""
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings

    with FrontierStore.open(Settings.load(database_url=db_url), upgrade=True):
        pass
    os.environ["HARVESTER_DATABASE_URL"] = db_url  # undone after the test by _own_database_url
    return {}


def run(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)  # load 30: minutes
    assert done.returncode == 0, f"{args}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="session")
def deployed(prefect_api: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A process work pool holding site ``stop``'s deployments, written by ``harvester deployments`` and deployed
    by ``prefect deploy`` as docs/operations.md says; the workers are each test's own (``pool``). One for the
    session: the tests of a worker's stops (test_shutdown.py, test_worker_loss.py) share it."""
    home = tmp_path_factory.mktemp("pool-home")
    (home / "flows").symlink_to(REPO / "flows")  # the checkout the workers run from (HARVESTER_HOME)
    (home / "sites.toml").write_text('[sites.stop]\nseeds = ["http://127.0.0.1:9/"]\n', encoding="utf-8")
    name = f"stop-{uuid.uuid4().hex[:6]}"
    env = {key: value for key, value in prefect_api.items() if not key.startswith("HARVESTER_")}
    env["PATH"] = f"{VENV_BIN}:{os.environ.get('PATH', '')}"
    run([str(VENV_BIN / "prefect"), "work-pool", "create", name, "--type", "process"], env, home)
    said = run([str(VENV_BIN / "harvester"), "deployments", "--sites", "sites.toml", "--pool", name, "-o", "d.yaml"],
               env, home)
    run([str(VENV_BIN / "prefect"), "deploy", "--all", "--prefect-file", "d.yaml"], env, home)
    yield {"name": name, "home": home, "env": env, "said": said}
    from prefect import get_client

    with get_client(sync_client=True) as client:  # through the API: three CLI processes cost ~10 s of CPU
        for deployment in ("harvest/stop", "recrawl/stop", "close-crashed-run/healing"):
            client.delete_deployment(client.read_deployment_by_name(deployment).id)


@pytest.fixture
async def pool(deployed: dict[str, Any]) -> dict[str, Any]:
    """The session's pool, with a work queue of this test's own (``queue``) for its runs and its workers. A run a
    test leaves crashed is put back to Scheduled by the retry automation: on the pool's default queue the next
    test's worker started it beside that test's own run (two or three engines loading Prefect at once on 2 cores,
    and each stopped and retried again), and a run stopped at its first instant was still Submitting 30 s later."""
    from prefect import get_client

    queue = f"t-{uuid.uuid4().hex[:8]}"
    async with get_client() as client:
        await client.create_work_queue(name=queue, work_pool_name=deployed["name"])
    return {**deployed, "queue": queue}
