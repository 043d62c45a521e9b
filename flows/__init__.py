"""The Prefect layer: flows and tasks that wire harvester's library calls to Prefect. No crawl logic here."""

from __future__ import annotations

from harvester.flows.discover import discover_flow
from harvester.flows.extract import extract_flow
from harvester.flows.harvest import harvest_flow
from harvester.flows.logs import send_library_lines_to_runs
from harvester.flows.recrawl import recrawl_flow

send_library_lines_to_runs()

__all__ = ["discover_flow", "extract_flow", "harvest_flow", "recrawl_flow"]
