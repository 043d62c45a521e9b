"""harvest_flow: discover, then extract (the UI's "run everything" button)."""

from __future__ import annotations

from typing import Any

from prefect import State, flow

from harvester.flows.artifacts import ended_with, publish_cycle
from harvester.flows.guards import run_name, tidy_stored_parameters
from harvester.flows.lifeline import RunStopped
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.start import cycle_run
from harvester.phases.cycles import harvest_steps, loud
from harvester.site_profile import SiteProfile


@flow(name="harvest", flow_run_name=run_name("harvest"), validate_parameters=True, on_failure=[tidy_stored_parameters])
async def harvest_flow(
    profile: SiteProfile, workers: Workers = 1, config_file: str | None = None, overrides: RunOverrides | None = None
) -> dict[str, Any] | State[Any]:
    """A full two-phase harvest of one site profile; rerunning it resumes from the frontier.

    Fails (``NothingFetched``) when no seed host answered anything, after its summary is published."""
    try:
        async with cycle_run(profile, workers, config_file, overrides) as (settings, profile, steps):
            cycle = await harvest_steps(steps, settings, profile)
    except RunStopped as stopped:  # the lifeline's stop: Crashed saying why (retried), or Cancelled (never)
        return stopped.state
    await publish_cycle("harvest", profile.name, cycle)
    loud(cycle)  # NothingFetched when no seed host answered, ExtractorFailed when the hook failed on every page
    return ended_with(cycle, {"discover": cycle.discover, "extract": cycle.extract, "changes": cycle.changes})
