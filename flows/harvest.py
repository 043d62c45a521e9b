"""harvest_flow: discover, then extract (the UI's "run everything" button)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.discover import discover_flow
from flows.extract import extract_flow
from harvester.settings import SiteProfile


@flow(name="harvest", flow_run_name="harvest-{profile.name}", validate_parameters=True)
async def harvest_flow(
    profile: SiteProfile, workers: int = 1, config_file: str | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A full two-phase harvest of one site profile; rerunning it resumes from the frontier."""
    discovered = await discover_flow(profile, refresh=False, config_file=config_file, overrides=overrides)
    extracted = await extract_flow(profile, workers=workers, config_file=config_file, overrides=overrides)
    return {"discover": discovered, "extract": extracted}
