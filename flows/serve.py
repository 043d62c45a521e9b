"""Deployments: served by this process (``harvester serve``), or for a process work pool (``harvester deployments``
writes their ``prefect.yaml``).

Each site has a ``harvest`` (weekly full harvest) and a ``recrawl`` (daily incremental re-crawl) deployment with cron
schedules, parameters and tags. Served ones are named ``<site>-serve`` (``harvest/shop-serve``), work-pool ones
``<site>`` (``harvest/shop``), so ``harvester serve`` and ``prefect deploy`` never overwrite each other.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import suppress
from typing import Any, cast

import yaml
from prefect.deployments.runner import RunnerDeployment
from prefect.runner import Runner
from prefect.schedules import Cron

from harvester.flows.engine import COMMAND as ENGINE_COMMAND
from harvester.flows.harvest import harvest_flow
from harvester.flows.healing import CLOSER_DEPLOYMENT, HEARTBEAT_S, close_crashed_run, ensure_healing
from harvester.flows.recrawl import recrawl_flow
from harvester.flows.shutdown import drain_on_sigterm
from harvester.flows.sites import HARVEST_CRON, RECRAWL_CRON, SiteSpec

__all__ = ["HARVEST_CRON", "RECRAWL_CRON", "deployments", "pool_yaml", "serve_sites", "served_name"]

TAGS = ["harvester"]
KINDS = {"harvest": "flows/harvest.py:harvest_flow", "recrawl": "flows/recrawl.py:recrawl_flow"}
DESCRIPTIONS = {"harvest": "Discover, then extract: the full two-phase harvest.",
                "recrawl": "Daily conditional re-crawl (304s, not downloads)."}


JOB_VARIABLES: dict[str, Any] = {
    "command": ENGINE_COMMAND,
    "env": {"PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S), "PREFECT_LOGGING_EXTRA_LOGGERS": "harvester"},
}
"""How a worker runs a harvester run: through ``engine`` (a stopped worker's run drains and reports), with
heartbeats (``harvester.flows.healing``) and the library's own log lines sent to the run's logs in the UI."""


POLL_S = 2
"""How often ``harvester serve`` and a worker ask for runs due (one small query).

A scheduled run starts on time only when its process was started before its time: the server holds the run's start
(Running) until then, so a process started early waits. Prefect's runner and worker take a run at most 10 s early
(prefetch) and look every 10 s (``PREFECT_RUNNER_POLL_FREQUENCY``, ``PREFECT_WORKER_QUERY_SECONDS``), so a run
could be seen 0-10 s before its time, less than a loaded machine takes to start a flow-run process (4-8 s
measured): runs began 4-16 s late. Looking every ``POLL_S`` with ``PREFETCH_S`` ahead starts each process well
before its time."""

PREFETCH_S = 30
"""How far ahead of its time a run's process is started (it then waits, holding its memory, until the time)."""

SERVE_ENVIRONMENT = {
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": str(HEARTBEAT_S), "PREFECT_LOGGING_EXTRA_LOGGERS": "harvester",
    "PREFECT_RUNNER_POLL_FREQUENCY": str(POLL_S), "PREFECT_WORKER_PREFETCH_SECONDS": str(PREFETCH_S),
}
"""Defaults ``harvester serve`` sets for itself and the runs it starts (the environment wins)."""


def served_name(site: str) -> str:
    """``<site>-serve``: never a work-pool deployment's name (``<site>``)."""
    return f"{site}-serve"


def _parameters(site: SiteSpec, kind: str, config_file: str | None) -> dict[str, Any]:
    parameters: dict[str, Any] = {"profile": site.profile.model_dump(mode="json"), "workers": site.workers}
    if config_file is not None:
        parameters["config_file"] = config_file
    if kind == "recrawl":
        parameters["refresh"] = False
    return parameters


def _cron(site: SiteSpec, kind: str) -> str:
    return site.harvest_cron if kind == "harvest" else site.recrawl_cron


def _description(site: SiteSpec, kind: str) -> str:
    """The kind's description with its schedule and time zone in words: the UI shows a cron without its zone
    beside a next run in the browser's time."""
    return f"{DESCRIPTIONS[kind]} Scheduled `{_cron(site, kind)}` in time zone {site.timezone}."


def deployments(site: SiteSpec, *, config_file: str | None = None, paused: bool = False) -> list[RunnerDeployment]:
    """The site's two served deployments, their default parameters its profile (editable per run in the UI)."""
    out = []
    for kind, flow in (("harvest", harvest_flow), ("recrawl", recrawl_flow)):
        out.append(cast("RunnerDeployment", flow.to_deployment(
            name=served_name(site.profile.name), schedule=Cron(_cron(site, kind), timezone=site.timezone),
            parameters=_parameters(site, kind, config_file), tags=[*TAGS, kind, site.profile.name],
            description=_description(site, kind), paused=paused,
        )))
    return out


def serve_sites(sites: list[SiteSpec], *, config_file: str | None = None) -> None:
    """Register every site's deployments and the self-healing automations, and serve their runs until interrupted.

    The runs this process starts send heartbeats every ``HEARTBEAT_S`` (unless the environment says otherwise),
    so one whose process vanishes is marked Crashed and scheduled again (``healing``), and send the library's
    own log lines (a database being waited for, a host parked) to their logs in the UI."""
    for key, value in SERVE_ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    served = [deployment for site in sites for deployment in deployments(site, config_file=config_file)]
    served.append(cast("RunnerDeployment", close_crashed_run.to_deployment(name=served_name("healing"))))
    runner = Runner(pause_on_shutdown=True, query_seconds=float(os.environ["PREFECT_RUNNER_POLL_FREQUENCY"]),
                    prefetch_seconds=float(os.environ["PREFECT_WORKER_PREFETCH_SECONDS"]))
    for deployment in served:
        runner.add_deployment(deployment)
    asyncio.run(ensure_healing())  # after the closer's deployment is registered: its automation runs it
    drain_on_sigterm(runner)  # SIGTERM stops the runs gracefully, then the runner (harvester.flows.shutdown)
    with suppress(KeyboardInterrupt):
        asyncio.run(runner.start())


def pool_yaml(sites: list[SiteSpec], *, pool: str = "harvester", config_file: str | None = None) -> str:
    """A ``prefect.yaml`` with every site's two deployments on the process work pool ``pool``, for
    ``prefect deploy --all --prefect-file <it>``; each run enters ``$HARVESTER_HOME`` on its worker first."""
    document: dict[str, Any] = {
        "name": "harvester",
        "pull": [{"harvester.flows.home.enter_home": {}}],
        "deployments": [
            {
                "name": site.profile.name, "entrypoint": KINDS[kind], "description": _description(site, kind),
                "tags": [*TAGS, kind, site.profile.name],
                "schedules": [{"cron": _cron(site, kind), "timezone": site.timezone}],
                "parameters": _parameters(site, kind, config_file),
                "work_pool": {"name": pool, "work_queue_name": "default", "job_variables": JOB_VARIABLES},
            }
            for site in sites for kind in KINDS
        ] + [{
            "name": CLOSER_DEPLOYMENT.split("/")[1], "entrypoint": "flows/healing.py:close_crashed_run",
            "description": "Run by harvester's healing automation when a run is marked Crashed.",
            "work_pool": {"name": pool, "work_queue_name": "default", "job_variables": JOB_VARIABLES},
        }],
    }
    header = ("# Written by `harvester deployments --sites`; deploy: prefect deploy --all --prefect-file <this>\n"
              "# Settings and secrets come from each worker's HARVESTER_* environment, never from here.\n")
    return header + str(yaml.safe_dump(document, sort_keys=False, width=120))


if __name__ == "__main__":
    import sys

    from harvester.site_profile import SiteProfile

    serve_sites([SiteSpec(SiteProfile.build(seeds=sys.argv[1:]))])
