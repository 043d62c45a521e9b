"""The library's cycle steps as Prefect subflows, so ``harvest_flow`` and ``recrawl_flow`` run the order of steps
written once in ``harvester.phases.cycles`` (the library's ``harvest()`` and ``recrawl()`` run the same order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harvester.flows.discover import discover_flow
from harvester.flows.extract import extract_flow
from harvester.flows.parameters import RunOverrides
from harvester.settings import SiteProfile


@dataclass(frozen=True, slots=True)
class SubflowSteps:
    """Each phase as its own flow run (a task per host or worker, its artifacts), returning its counters."""

    profile: SiteProfile
    workers: int = 1
    config_file: str | None = None
    overrides: RunOverrides | None = None

    async def discover(self, *, refresh: bool, handover: str | None = None) -> dict[str, Any]:
        counters: dict[str, Any] = await discover_flow(
            self.profile, refresh=refresh, config_file=self.config_file, overrides=self.overrides, handover=handover
        )
        return counters

    async def extract(self, *, handover: str | None = None) -> dict[str, Any]:
        counters: dict[str, Any] = await extract_flow(
            self.profile, workers=self.workers, config_file=self.config_file, overrides=self.overrides,
            handover=handover,
        )
        return counters
