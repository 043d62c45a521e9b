"""``deferred`` is every detail URL that was due in the cycle and left for the next run, whatever held it back: a
host parked part way (its retries pushed back, its claims handed back), the page budget. Stranger 44 saw a day where
the parked host left 16 detail URLs queued and the cycle said ``deferred: 6``: only what was due at the very moment
the cycle closed was counted, not the retries the run had pushed a few seconds into the future.

The truth is the loopback server's: the URLs due (every page of the sitemap, asked with ``refresh``) less the URLs
the run finished with (an answer it kept, or a page failed every attempt of the run: counted ``failed``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from test_failed_and_duplicates_return import _first_harvest, _page

from harvester import aharvest, arecrawl
from harvester.cli_tables import status_of
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at

LASTMOD = datetime(2026, 1, 1, 12, tzinfo=UTC).isoformat()
PAGES = 30
MAX_ATTEMPTS = 3


async def test_deferred_counts_every_due_url_a_parked_host_left_queued(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    day = [1]

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        # Day 2: every page answers 500 (the host breaks overnight); it parks after a few failures in a row.
        return {f"/p/{n}": (500 if day[0] == 2 else 200, _page(f"P{n}", f"page {n}"), LASTMOD, None)
                for n in range(PAGES)}

    harvested = await _first_harvest(
        serve, db_url, pages, day, harvest=False,
        # Retries and handed-back claims are due again seconds later: after the cycle closed, not when it closed.
        overrides={"politeness.backoff_base_s": 2.0, "politeness.backoff_max_s": 4.0,
                   "politeness.max_attempts": MAX_ATTEMPTS, "politeness.park_after_failures": 4})
    settings, profile, log = harvested.settings, harvested.profile, harvested.log
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    assert sum(1 for d, _, s in log if d == 1 and s == 200) == PAGES

    day[0] = 2
    CLOCK.travel_to(run_at(2))
    cycle = await arecrawl(settings, profile, refresh=True)
    asked: dict[str, int] = {}
    for d, path, _ in log:
        if d == 2 and path.startswith("/p/"):
            asked[path] = asked.get(path, 0) + 1
    # Finished with this run: a page failed on every attempt (``failed``); none answered anything else.
    finished = {path for path, n in asked.items() if n >= MAX_ATTEMPTS}
    left = PAGES - len(finished)
    assert asked and left > 0, asked  # control: the host was asked, then parked part way
    status = status_of(settings)
    queued = status["hosts"][harvested.origin]["states"].get("queued", 0)
    assert queued == left, (status["hosts"][harvested.origin], left, asked)
    assert cycle.changes["deferred"] == left, (cycle.changes["deferred"], left, asked)
    assert status["last_cycle"]["deferred"] == left
    with FrontierStore.open(settings) as store:
        assert store.cycle_counts(cycle.changes["cycle"])["deferred"] == left
