"""The library's cycle steps as Prefect subflows, so ``harvest_flow`` and ``recrawl_flow`` run the order of steps
written once in ``harvester.phases.cycles`` (the library's ``harvest()`` and ``recrawl()`` run the same order).

A subflow's parameters are strings, so the cycle's shared state goes by its key: shared in this process for the
subflow's run (``runtime.shared_as``), found again by its tasks (``phases.cycle_state.find_cycle``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harvester.flows.discover import discover_flow
from harvester.flows.extract import extract_flow
from harvester.flows.parameters import RunOverrides
from harvester.phases.cycle_state import CycleState
from harvester.runtime import shared_as
from harvester.site_profile import SiteProfile


@dataclass(frozen=True, slots=True)
class SubflowSteps:
    """Each phase as its own flow run (a task per host or worker, its artifacts), returning its counters."""

    profile: SiteProfile
    workers: int = 1
    config_file: str | None = None
    overrides: RunOverrides | None = None

    async def discover(self, *, refresh: bool, cycle: CycleState) -> dict[str, Any]:
        with shared_as(cycle.key, cycle) as key:
            counters: dict[str, Any] = await discover_flow(
                self.profile, refresh=refresh, config_file=self.config_file, overrides=self.overrides, handover=key
            )
        return counters

    def recorded(self, run: dict[str, Any]) -> dict[str, Any]:
        counters: dict[str, Any] = dict(run.get("counters") or {})  # what ``discover_flow`` returns
        return counters

    async def extract(self, *, cycle: CycleState) -> dict[str, Any]:
        with shared_as(cycle.key, cycle) as key:
            counters: dict[str, Any] = await extract_flow(
                self.profile, workers=self.workers, config_file=self.config_file, overrides=self.overrides,
                handover=key,
            )
        return counters
