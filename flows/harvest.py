"""harvest_flow: discover, then extract (the UI's "run everything" button)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.steps import SubflowSteps
from harvester.phases.cycles import harvest_steps
from harvester.settings import SiteProfile


@flow(name="harvest", flow_run_name="harvest-{profile.name}", validate_parameters=True)
async def harvest_flow(
    profile: SiteProfile, workers: int = 1, config_file: str | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A full two-phase harvest of one site profile; rerunning it resumes from the frontier."""
    cycle = await harvest_steps(SubflowSteps(profile, workers, config_file, overrides))
    return {"discover": cycle.discover, "extract": cycle.extract}
