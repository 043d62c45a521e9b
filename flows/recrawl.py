"""recrawl_flow: the daily incremental re-crawl: conditional rediscovery, then extraction of what is due."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.steps import SubflowSteps
from flows.tasks import load_settings
from harvester.phases.cycles import recrawl_steps
from harvester.settings import SiteProfile


@flow(name="recrawl", flow_run_name="recrawl-{profile.name}", validate_parameters=True)
async def recrawl_flow(
    profile: SiteProfile, refresh: bool = False, workers: int = 1, config_file: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Unchanged sitemaps and feeds answer 304 and are not parsed; changed pages are fetched again.

    ``refresh`` treats every known URL and document as due now (still conditionally): for a re-crawl off
    schedule. Reports which URLs appeared and which vanished during this re-crawl.
    """
    settings = load_settings(config_file, overrides or {})
    steps = SubflowSteps(profile, workers, config_file, overrides)
    cycle = await recrawl_steps(steps, settings, profile, refresh=refresh)
    return {"discover": cycle.discover, "extract": cycle.extract, "changes": cycle.changes}
