"""A harvest run from the CLI against a Prefect server has the same log lines on its run page as a deployment run
(ops48 item 2), read back through the API as the UI reads them."""

from __future__ import annotations

import subprocess

from conftest import VENV_BIN, prepared
from test_shutdown import run_logs
from test_stop_message import answer

from harvester.testing.threaded_site import threaded_site


async def test_a_harvest_from_the_cli_against_a_server_leaves_its_summary_in_the_runs_logs(prefect_api, sqlite_url,
                                                                                         tmp_path):
    """``harvester harvest`` with PREFECT_API_URL set (ops48 item 2): the CLI made Prefect quiet for the terminal
    (PREFECT_LOGGING_LEVEL=WARNING), which also dropped the run's INFO lines before any handler: its run page had
    no summary line and no "Finished in state", where a deployment run's has both. The terminal stays as quiet."""
    from prefect import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    prepared(sqlite_url)
    env = {key: value for key, value in prefect_api.items() if key != "PREFECT_LOGGING_LEVEL"}  # as the operator's
    with threaded_site(answer) as origin:
        done = subprocess.run([str(VENV_BIN / "harvester"), "harvest", origin + "/", "--db", sqlite_url,
                               "--name", "cli48"], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    async with get_client() as client:
        named = FlowRunFilter(name=FlowRunFilterName(any_=["harvest-cli48"]))
        runs = await client.read_flow_runs(flow_run_filter=named)
    assert len(runs) == 1, runs
    said = await run_logs(runs[0].id)
    assert "harvest of cli48: 1 new" in said, said
    assert "Finished in state Completed" in said, said
    assert "harvest of cli48" not in done.stderr and "Finished in state" not in done.stderr, done.stderr[-3000:]
