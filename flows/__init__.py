"""The Prefect layer: flows and tasks that wire harvester's library calls to Prefect. No crawl logic here."""

from __future__ import annotations

from flows.discover import discover_flow
from flows.extract import extract_flow
from flows.harvest import harvest_flow
from flows.logs import send_library_lines_to_runs
from flows.recrawl import recrawl_flow

send_library_lines_to_runs()

__all__ = ["discover_flow", "extract_flow", "harvest_flow", "recrawl_flow"]
