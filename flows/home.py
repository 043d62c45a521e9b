"""The pull step of the work-pool deployments (flows/prefect.yaml, ``harvester deployments``): enter the harvester
checkout named by ``HARVESTER_HOME`` on the worker, or fail saying so.

Prefect's own ``set_working_directory: "{{ $HARVESTER_HOME }}"`` resolved the variable when ``prefect deploy`` ran,
on the deploying machine: unset there, the deployment held an empty path and every run crashed on a
``FileNotFoundError`` naming a temporary directory, never the variable. This step reads the variable when the run
starts, on the worker that runs it, where the checkout is.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

from harvester.errors import ConfigError

VARIABLE = "HARVESTER_HOME"


def enter_home() -> dict[str, str]:
    """Change into ``$HARVESTER_HOME`` (a directory holding ``flows/``); returns it as ``directory``."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        raise _crash(
            f"{VARIABLE} is not set on this worker: set it to the harvester checkout the deployments run from "
            f"(the directory holding flows/), e.g. `export {VARIABLE}=/srv/harvester`, and restart the worker"
        )
    home = Path(value).expanduser()
    if not (home / "flows").is_dir():
        raise _crash(
            f"{VARIABLE}={value} is not a harvester checkout on this worker (no flows/ directory there): point it at "
            f"the directory holding flows/ and restart the worker"
        )
    os.chdir(home)
    return {"directory": str(home)}


def _crash(message: str) -> ConfigError:
    """The run's logs and state in the UI say it, not only the worker's stdout: written here, at once, since the
    process ends right after. The worker's own "Process exited with status code: 1" comes later and is refused, the
    run being over; a run that never started is not retried (``healing``), so this is what the UI shows."""
    flow_run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if flow_run_id:
        from prefect import get_client
        from prefect.client.schemas.actions import LogCreate
        from prefect.states import Crashed

        with suppress(Exception), get_client(sync_client=True) as client:  # the error is raised whatever happens here
            client.create_logs([LogCreate(name="harvester.flows.home", level=logging.ERROR, message=message,
                                          timestamp=datetime.now(UTC), flow_run_id=UUID(flow_run_id))])
            client.set_flow_run_state(UUID(flow_run_id), Crashed(message=message))
    return ConfigError(message)
