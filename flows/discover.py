"""discover_flow: phase one, one task per host (robots, sitemaps, feeds, listing pages into the frontier)."""

from __future__ import annotations

from typing import Any

from prefect import flow

from harvester import phases
from harvester.flows.artifacts import publish, site_scope
from harvester.flows.parameters import RunOverrides
from harvester.flows.tasks import discover_host, load_settings, run_profile
from harvester.runtime import siblings
from harvester.site_profile import SiteProfile


@flow(name="discover", flow_run_name="discover-{profile.name}", validate_parameters=True)
async def discover_flow(
    profile: SiteProfile, refresh: bool = False, config_file: str | None = None, overrides: RunOverrides | None = None,
    handover: str | None = None,
) -> dict[str, Any]:
    """Find the site's URLs from what it publishes; ``refresh`` re-asks every document (conditionally).
    ``handover`` is set by the harvest and recrawl flows (the key of the cycle's state, ``phases.cycle_state``);
    leave it empty."""
    settings = load_settings(config_file, overrides)
    profile = run_profile(profile, overrides)
    run_id = await phases.begin_run(settings, "discover", profile)
    origins = phases.site_hosts(settings, profile)
    # A host whose task fails (its retries spent) cancels the others and the flow fails with that first error, as
    # extract_flow's workers do: ``asyncio.gather`` left the other hosts' discovery running after the flow ended.
    # The process's stop cancels none: each host records what it has on the wire and stops at its next request
    # (cancelled when the first host met it, their answers were lost and the rerun asked them again).
    try:
        results = await siblings({f"discover {origin}": discover_host(profile, origin, run_id, refresh, config_file,
                                                                      overrides, handover) for origin in origins})
    except Exception as failed:  # a stop (``Interrupted``, a BaseException) leaves the run to be resumed
        await phases.finish_failed(settings, run_id, failed)
        raise
    result, stats = await phases.finish_run(settings, run_id, "discover", results)
    await publish(result, title=f"Discovery of {profile.name}", run_id=run_id, stats=stats,
                  hosts=await site_scope(settings, profile))
    return result.counters
