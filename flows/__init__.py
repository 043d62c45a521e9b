"""The Prefect layer: flows and tasks that wire harvester's library calls to Prefect. No crawl logic here.

The flows load on first use: ``python -m harvester.flows.engine`` (each work-pool run's first process) imports this
package, and importing Prefect here made that process deaf to SIGTERM for its first 1-2 s (a worker stopped then
left the run Pending for ever). The library's lines reach the runs' logs from ``harvester.flows.tasks``, which
every flow imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harvester.flows.discover import discover_flow
    from harvester.flows.extract import extract_flow
    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

__all__ = ["discover_flow", "extract_flow", "harvest_flow", "recrawl_flow"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'harvester.flows' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"harvester.flows.{name.removesuffix('_flow')}"), name)
    globals()[name] = value
    return value
