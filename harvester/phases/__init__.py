"""The two phases per host and the cycles built from them: ``discover`` (robots, sitemaps, feeds and listing pages
into the frontier), ``extract`` (claimed URLs fetched politely, outcomes written), ``harvest`` and ``recrawl``
(their order of steps, written once). Flows, the CLI and library users all call these.

May use every package below it: ``fetch``, ``discovery``, ``frontier``, ``rules``, ``extraction``. Must not:
import Prefect (the flows wrap these functions, never the other way round).
"""

from __future__ import annotations

from harvester.phases._core import (
    PhaseResult,
    Progress,
    StoreRobots,
    begin_cycle,
    begin_run,
    close_cycle,
    discover,
    extract,
    finish_run,
    mark_due,
    polite_client,
    recover_leases,
    site_hosts,
)

__all__ = [
    "PhaseResult", "Progress", "StoreRobots", "begin_cycle", "begin_run", "close_cycle", "discover", "extract",
    "finish_run", "mark_due", "polite_client", "recover_leases", "site_hosts",
]
