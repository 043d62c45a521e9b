"""The Prefect event each harvest and re-crawl emits when it ends: one per run, never one per page.

Downstream work reacts to these instead of polling: an automation that triggers on ``harvester.site.changed``
for a site's resource (``harvester.site.<name>``) can run a deployment that reads the new pages
(docs/operations.md shows one). Events carry counts, not URLs: the run's summary artifact lists examples and the
frontier has them all.
"""

from __future__ import annotations

from typing import Any

from harvester.phases.cycles import Cycle, cycle_failure
from harvester.store_results import CYCLE_COUNTS

EVENT_CHANGED = "harvester.site.changed"
"""A cycle found new, changed or gone pages: what a downstream automation waits for."""
EVENT_UNCHANGED = "harvester.site.unchanged"
EVENT_FAILED = "harvester.site.failed"
"""No seed host answered anything (``NothingFetched``), or every page request failed (``EveryRequestFailed``)."""


def cycle_event(
    kind: str, site: str, cycle: Cycle[Any], *, totals: dict[str, int], duration_s: float
) -> dict[str, Any]:
    """The one event a cycle emits (never one per page): its name says the outcome, so an automation can trigger
    on it without reading the payload; the payload carries the cycle's counts (``FrontierStore.cycle_counts``, the
    numbers the CLI, ``status`` and the artifacts show), failures by class and the duration. A cycle that only
    restyled pages (bytes changed outside their main text) is ``unchanged``; the payload still counts them."""
    changes = cycle.changes
    failure = cycle_failure(cycle)
    if failure is not None:
        name = EVENT_FAILED
    elif changes["new"] or changes["changed"] or changes["gone"] or changes.get("moved") or changes.get("restored"):
        name = EVENT_CHANGED
    else:
        name = EVENT_UNCHANGED
    return {
        "event": name,
        "resource": {"prefect.resource.id": f"harvester.site.{site}", "prefect.resource.name": site,
                     "harvester.kind": kind},
        "payload": {
            "site": site, "kind": kind, "cycle": changes.get("cycle"),
            **{name: changes.get(name, 0) for name in CYCLE_COUNTS},
            "failures": {key[6:]: n for key, n in sorted(totals.items()) if key.startswith("error:")},
            "duration_s": round(duration_s, 3), "reason": failure,
        },
    }
