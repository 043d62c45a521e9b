"""FrontierStore: the durable frontier and the only module that speaks SQL (SQLite or PostgreSQL).

Each public method is one transaction keeping one invariant (``complete_many`` writes outcomes, pages, fetches
and outlinks together or not at all). Synchronous and thread safe (one Engine, a pooled connection per call):
async callers use ``asyncio.to_thread``. Never fetches, never parses pages, never builds Settings.
"""
from __future__ import annotations

from harvester.frontier.hosts import HostsMixin
from harvester.frontier.outcomes import OutcomesMixin
from harvester.frontier.queue import QueueMixin
from harvester.frontier.reports import ReportsMixin
from harvester.frontier.runs import RunsMixin

__all__ = ["FrontierStore"]


class FrontierStore(OutcomesMixin, QueueMixin, HostsMixin, RunsMixin, ReportsMixin):
    """The frontier: URLs, hosts, documents, pages, fetches and runs. Build it with ``FrontierStore.open``.

    One class for callers, one module per concern behind it: ``discovered`` (upserts), ``queue`` (claims and
    leases), ``outcomes`` (completions), ``documents``, ``hosts``, ``runs``, ``reports``; ``base`` holds the engine,
    the dialect and the transaction every concern runs in."""
