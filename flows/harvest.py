"""harvest_flow: discover, then extract (the UI's "run everything" button)."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from flows.artifacts import publish_cycle
from flows.exclusive import one_run_per_site
from flows.healing import check_attempt
from flows.lifeline import parent_lifeline
from flows.parameters import RunOverrides
from flows.steps import SubflowSteps
from flows.tasks import load_settings
from harvester.phases.cycles import harvest_steps, loud
from harvester.settings import SiteProfile


@flow(name="harvest", flow_run_name="harvest-{profile.name}", validate_parameters=True)
async def harvest_flow(
    profile: SiteProfile, workers: int = 1, config_file: str | None = None, overrides: RunOverrides | None = None
) -> dict[str, Any]:
    """A full two-phase harvest of one site profile; rerunning it resumes from the frontier.

    Fails (``NothingFetched``) when no seed host answered anything, after its summary is published."""
    check_attempt(flow_run.run_count)  # a crashed run comes back through flows.healing, a bounded number of times
    settings = load_settings(config_file, overrides)
    async with parent_lifeline(), one_run_per_site(profile.name):
        cycle = await harvest_steps(SubflowSteps(profile, workers, config_file, overrides), settings, profile)
    await publish_cycle("harvest", profile.name, cycle)
    loud(cycle)  # NothingFetched when no seed host answered, ExtractorFailed when the hook failed on every page
    return {"discover": cycle.discover, "extract": cycle.extract, "changes": cycle.changes}
