"""What the harvest and re-crawl flows do before their cycle, in this order and written once: the order is what
makes a run's first instant safe (the lifeline first, so a SIGTERM then still stops the run and says so), a crashed
run's comeback bounded and its leftovers closed, and one run per site at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prefect.runtime import flow_run

from harvester.flows.healing import check_attempt, close_earlier_attempts, close_leftovers_at_start
from harvester.flows.lifeline import parent_lifeline
from harvester.flows.parameters import RunOverrides, Workers
from harvester.flows.site_slot import one_run_per_site
from harvester.flows.steps import SubflowSteps
from harvester.flows.tasks import load_settings, run_profile
from harvester.settings import Settings
from harvester.site_profile import SiteProfile


@asynccontextmanager
async def cycle_run(
    profile: SiteProfile, workers: Workers, config_file: str | None, overrides: RunOverrides | None,
) -> AsyncIterator[tuple[Settings, SiteProfile, SubflowSteps]]:
    """The run's settings, its profile with the run's overrides written in, and its subflow steps, inside the
    lifeline and the site's slot; the cycle runs in the ``async with``, its artifacts after it."""
    async with parent_lifeline():  # first: a SIGTERM at the run's first instant stops it too, and says so
        check_attempt(flow_run.run_count)  # a crashed run comes back (flows.healing), a bounded number of times
        if flow_run.run_count > 1:
            await close_earlier_attempts(flow_run.id)
        await close_leftovers_at_start()  # what any ended run left Running, with or without a worker to close it
        settings = load_settings(config_file, overrides)
        profile = run_profile(profile, overrides)
        async with one_run_per_site(profile.name):
            yield settings, profile, SubflowSteps(profile, workers, config_file, overrides)
