"""The page budget: at most ``max_pages_per_host`` pages answered per host per extraction run, whoever fetches them.

The budget is spent where requests are made, at the claim, and counted from the frontier (``fetched_since``:
URLs of the host the site answered since the run began), so it holds across both phases (discovery admits every
URL it finds; nothing it admits is a page fetch), across links found during extraction, across the workers of a
run and across a crashed run's resumption. What the budget leaves unfetched is not refused: those URLs stay
queued and due, are counted as deferred in the run's report, and the next run with room takes them, whether or
not the sitemaps that listed them have changed since: the claim order puts URLs never fetched before revisits that
nothing announced as changed (``frontier.dialects.revisit_rank``), so re-checks of unchanged pages never starve them.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from harvester.runtime import db

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile


def page_budget(settings: Settings, profile: SiteProfile) -> int:
    """The profile's budget, else the settings' default."""
    return profile.max_pages_per_host or settings.max_pages_per_host


class PageBudget:
    """One extraction worker's view of the run's per-host budgets: the room left on each host it holds.

    A host is held by one worker at a time (its lease), so the room read when the host is leased, less what this
    worker claims, is exact until the lease is handed back; the next holder reads it from the frontier again.
    """

    def __init__(self, store: FrontierStore, *, limit: int, since: datetime) -> None:
        self._store = store
        self.limit = limit
        self.since = since
        self._room: dict[str, int] = {}
        self.deferred: dict[str, int] = {}
        """Host -> URLs left due when its budget ran out (what the next run with room takes)."""

    async def open(self, origin: str) -> None:
        """Read what the run has already spent on ``origin`` (earlier attempts, other workers)."""
        spent = await db(self._store.fetched_since, origin, self.since)
        self._room[origin] = max(0, self.limit - spent)

    async def left(self, origin: str) -> int:
        """What the run has left on ``origin`` now, read from the frontier (a host another worker holds)."""
        return max(0, self.limit - await db(self._store.fetched_since, origin, self.since))

    def room(self, origin: str) -> int:
        return self._room.get(origin, self.limit)

    def spend(self, origin: str, pages: int) -> None:
        self._room[origin] = self.room(origin) - pages

    async def defer(self, origin: str) -> int:
        """The host's budget is spent: count what it leaves due, for the report."""
        deferred = await db(self._store.due_on, origin)
        self.deferred[origin] = deferred
        return deferred
