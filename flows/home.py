"""The pull step of the work-pool deployments (flows/prefect.yaml, ``harvester deployments``): enter the harvester
checkout named by ``HARVESTER_HOME`` on the worker, or fail saying so.

Prefect's own ``set_working_directory: "{{ $HARVESTER_HOME }}"`` resolved the variable when ``prefect deploy`` ran,
on the deploying machine: unset there, the deployment held an empty path and every run crashed on a
``FileNotFoundError`` naming a temporary directory, never the variable. This step reads the variable when the run
starts, on the worker that runs it, where the checkout is.
"""

from __future__ import annotations

import os
from pathlib import Path

from harvester.errors import ConfigError

VARIABLE = "HARVESTER_HOME"


def enter_home() -> dict[str, str]:
    """Change into ``$HARVESTER_HOME`` (a directory holding ``flows/``); returns it as ``directory``."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        raise ConfigError(
            f"{VARIABLE} is not set on this worker: set it to the harvester checkout the deployments run from "
            f"(the directory holding flows/), e.g. `export {VARIABLE}=/srv/harvester`, and restart the worker"
        )
    home = Path(value).expanduser()
    if not (home / "flows").is_dir():
        raise ConfigError(
            f"{VARIABLE}={value} is not a harvester checkout on this worker (no flows/ directory there): point it at "
            f"the directory holding flows/ and restart the worker"
        )
    os.chdir(home)
    return {"directory": str(home)}
