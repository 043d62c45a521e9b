"""One run of a site at a time: the weekly harvest and the daily re-crawl of one site never overlap.

The frontier's host leases already keep two runs from fetching one host at once, but two runs of a site would
still fight for its hosts, each half done, both shown running. Here each harvest or re-crawl holds the slot of a
global concurrency limit of 1 named after the site (``harvester-site-<name>``, created on first use) for its whole
cycle. A late run **waits** for the slot (logged once, with the limit's name), then runs: what it finds due then
is what the earlier run left. Waiting, not skipping, because a skipped daily re-crawl is a day of changes missed.
The slot is a lease renewed while the run lives, so a run whose process dies frees it within ``LEASE_S``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from prefect import get_client, get_run_logger
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.asyncio import concurrency
from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

from harvester.runtime import check_stop

LEASE_S = 60.0
"""How long a dead run's slot outlives it (a live run renews its lease well within this)."""

WAIT_POLL_S = 1.0
"""How often a waiting run looks whether the slot is free (one small API read)."""


def limit_name(site: str) -> str:
    """``harvester-site-<site>``, with anything Prefect's names refuse replaced."""
    return "harvester-site-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", site)


async def ensure_limit(name: str) -> bool:
    """Create the limit (1 slot) unless it exists; two runs racing to create it both end up using it. True when
    its slot is held now (by another run: this one has not asked yet)."""
    async with get_client() as client:
        try:
            held = await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with suppress(ObjectAlreadyExists):
                await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
            return False
    return held.active_slots >= held.limit


@asynccontextmanager
async def one_run_per_site(site: str) -> AsyncIterator[None]:
    """Hold the site's slot for the body; wait for it while another run of the site holds it.

    The wait is looked at, not timed: Prefect logged an ERROR with a ``TimeoutError`` traceback for every
    acquisition given a timeout that ran out, on an expected wait, and on a loaded machine a free slot took longer
    than a short timeout, so a run said it waited for another that did not exist. Looking also lets a run told to
    stop while it waits (SIGTERM, ``lifeline``) end at once (``Interrupted``) instead of after the grace."""
    name = limit_name(site)
    if await ensure_limit(name):
        get_run_logger().info("another run of %s holds %s: waiting for it to end", site, name)
        while await ensure_limit(name):
            check_stop()
            await asyncio.sleep(WAIT_POLL_S)
    check_stop()
    async with concurrency(name, occupy=1, lease_duration=LEASE_S, strict=True):
        yield
