"""recrawl_flow: the daily incremental re-crawl: conditional rediscovery, then extraction of what is due."""

from __future__ import annotations

from typing import Any

from prefect import State, flow

from harvester.flows.artifacts import ended_with, publish_cycle
from harvester.flows.guards import run_name, tidy_stored_parameters
from harvester.flows.lifeline import RunStopped
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.start import cycle_run
from harvester.phases.cycles import loud, recrawl_steps
from harvester.site_profile import SiteProfile


@flow(name="recrawl", flow_run_name=run_name("recrawl"), validate_parameters=True, on_failure=[tidy_stored_parameters])
async def recrawl_flow(
    profile: SiteProfile, refresh: bool = False, workers: Workers = 1, config_file: str | None = None,
    overrides: RunOverrides | None = None,
) -> dict[str, Any] | State[Any]:
    """Unchanged sitemaps and feeds answer 304 and are not parsed; changed pages are fetched again.

    ``refresh`` treats every known URL and document as due now (still conditionally): for a re-crawl off
    schedule. The run's changes (new, changed, gone, deferred by the budget) are its summary artifact and log
    line; it fails (``NothingFetched``) when no seed host answered anything.
    """
    try:
        async with cycle_run(profile, workers, config_file, overrides) as (settings, profile, steps):
            cycle = await recrawl_steps(steps, settings, profile, refresh=refresh)
    except RunStopped as stopped:  # the lifeline's stop: Crashed saying why (retried), or Cancelled (never)
        return stopped.state
    await publish_cycle("recrawl", profile.name, cycle)
    loud(cycle)  # NothingFetched when no seed host answered, ExtractorFailed when the hook failed on every page
    return ended_with(cycle, {"discover": cycle.discover, "extract": cycle.extract, "changes": cycle.changes})
