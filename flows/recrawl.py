"""recrawl_flow: the daily incremental re-crawl: conditional rediscovery, then extraction of what is due."""

from __future__ import annotations

from typing import Any

from prefect import flow
from prefect.runtime import flow_run

from harvester.flows.artifacts import publish_cycle
from harvester.flows.guards import run_name, tidy_stored_parameters
from harvester.flows.healing import check_attempt, close_earlier_attempts, close_leftovers_at_start
from harvester.flows.lifeline import parent_lifeline
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.site_slot import one_run_per_site
from harvester.flows.steps import SubflowSteps
from harvester.flows.tasks import load_settings, run_profile
from harvester.phases.cycles import loud, recrawl_steps
from harvester.settings import SiteProfile


@flow(name="recrawl", flow_run_name=run_name("recrawl"), validate_parameters=True, on_failure=[tidy_stored_parameters])
async def recrawl_flow(
    profile: SiteProfile, refresh: bool = False, workers: Workers = 1, config_file: str | None = None,
    overrides: RunOverrides | None = None,
) -> dict[str, Any]:
    """Unchanged sitemaps and feeds answer 304 and are not parsed; changed pages are fetched again.

    ``refresh`` treats every known URL and document as due now (still conditionally): for a re-crawl off
    schedule. The run's changes (new, changed, gone, deferred by the budget) are its summary artifact and log
    line; it fails (``NothingFetched``) when no seed host answered anything.
    """
    async with parent_lifeline():  # first: a SIGTERM at the run's first instant stops it too, and says so
        check_attempt(flow_run.run_count)  # a crashed run comes back (flows.healing), a bounded number of times
        if flow_run.run_count > 1:
            await close_earlier_attempts(flow_run.id)
        await close_leftovers_at_start()  # what any ended run left Running, with or without a worker to close it
        settings = load_settings(config_file, overrides)
        profile = run_profile(profile, overrides)
        steps = SubflowSteps(profile, workers, config_file, overrides)
        async with one_run_per_site(profile.name):
            cycle = await recrawl_steps(steps, settings, profile, refresh=refresh)
    await publish_cycle("recrawl", profile.name, cycle)
    loud(cycle)  # NothingFetched when no seed host answered, ExtractorFailed when the hook failed on every page
    return {"discover": cycle.discover, "extract": cycle.extract, "changes": cycle.changes}
