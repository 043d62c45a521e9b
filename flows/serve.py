"""Deployments for local serving without a work pool: ``harvester serve`` or ``python -m flows.serve``.

Registers ``harvest`` (weekly full harvest) and ``recrawl`` (daily incremental re-crawl) with cron schedules,
parameters and tags, then serves their runs (scheduled ones and those started from the Prefect UI).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, cast

from prefect import serve
from prefect.deployments.runner import RunnerDeployment

from flows.harvest import harvest_flow
from flows.healing import HEARTBEAT_S, ensure_healing
from flows.recrawl import recrawl_flow
from harvester.settings import SiteProfile

HARVEST_CRON = "0 2 * * 0"
"""Full harvest: Sundays 02:00."""

RECRAWL_CRON = "0 3 * * *"
"""Incremental re-crawl: daily 03:00."""

TAGS = ["harvester"]


def deployments(
    profile: SiteProfile, *, harvest_cron: str = HARVEST_CRON, recrawl_cron: str = RECRAWL_CRON,
    workers: int = 1, config_file: str | None = None, paused: bool = False,
) -> list[RunnerDeployment]:
    """The two deployments, their default parameters taken from ``profile`` (editable per run in the UI)."""
    common: dict[str, Any] = {
        "profile": profile.model_dump(mode="json"), "workers": workers, "config_file": config_file,
    }
    return [
        cast("RunnerDeployment", harvest_flow.to_deployment(
            name="harvest", cron=harvest_cron, parameters=common, tags=[*TAGS, "harvest", profile.name],
            description="Discover, then extract: the full two-phase harvest.", paused=paused,
        )),
        cast("RunnerDeployment", recrawl_flow.to_deployment(
            name="recrawl", cron=recrawl_cron, parameters={**common, "refresh": False},
            tags=[*TAGS, "recrawl", profile.name], description="Daily conditional re-crawl.", paused=paused,
        )),
    ]


def serve_deployments(profile: SiteProfile, **options: Any) -> None:
    """Register both deployments and the self-healing automations, and serve their runs until interrupted.

    The runs this process starts send heartbeats every ``HEARTBEAT_S`` (unless the environment says otherwise),
    so one whose process vanishes is marked Crashed and scheduled again (``flows.healing``)."""
    os.environ.setdefault("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", str(HEARTBEAT_S))
    asyncio.run(ensure_healing())
    # Older Prefect typed serve's arguments narrower than the deployments it accepts (3.9.1 does not): the
    # ignore holds for both.
    serve(*deployments(profile, **options))  # type: ignore[arg-type, unused-ignore]


if __name__ == "__main__":
    import sys

    serve_deployments(SiteProfile.build(seeds=sys.argv[1:]))
