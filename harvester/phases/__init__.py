"""The two phases per host and the cycles built from them: ``discover`` (robots, sitemaps, feeds and listing pages
into the frontier), ``extract`` (claimed URLs fetched politely, outcomes written), ``harvest`` and ``recrawl``
(their order of steps, written once). Flows, the CLI and library users all call these.

By role: ``discover_phase`` and ``extract_phase`` (the two entry points; ``discover_host`` over
``discover_context``, ``discover_sitemaps`` (with ``sitemap_entries``), ``discover_listings``, ``discover_feeds``,
and ``extract_host``, the per-host work under them, ``completions`` the latter's batched writes), ``runs`` (run and
cycle bookkeeping, ``open_store``), ``results`` (``PhaseResult``, ``Progress``), ``client`` (the polite client a
phase fetches through), ``cycles`` (harvest and recrawl), ``cycle_state`` (what a cycle's two phases share, passed
to both).

May use every package below it: ``fetch``, ``discovery``, ``frontier``, ``rules``, ``extraction``. Must not:
import Prefect (the flows wrap these functions, never the other way round).
"""

from __future__ import annotations

from harvester.phases.client import StoreRobots, polite_client
from harvester.phases.discover_phase import discover
from harvester.phases.extract_phase import extract
from harvester.phases.results import PhaseResult, Progress
from harvester.phases.runs import (
    begin_cycle,
    begin_run,
    close_cycle,
    finish_failed,
    finish_run,
    mark_due,
    note_stopped,
    open_store,
    recover_leases,
    site_hosts,
    site_origins,
)

__all__ = [
    "PhaseResult", "Progress", "StoreRobots", "begin_cycle", "begin_run", "close_cycle", "discover", "extract",
    "finish_failed", "finish_run", "mark_due", "note_stopped", "open_store", "polite_client", "recover_leases",
    "site_hosts", "site_origins",
]
