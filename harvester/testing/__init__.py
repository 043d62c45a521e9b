"""The local multi-host test web used by tests, benchmarks and ``harvester demo``: loopback only.

Importable library code (no pytest here; the fixtures live in ``harvester.testing.fixtures``).
"""

from __future__ import annotations

from harvester.testing.record import RequestRecord
from harvester.testing.sites import HostSpec, RobotsSpec, demo_site, small_site
from harvester.testing.web import DayChange, HostTruth, TestWeb, Truth

__all__ = [
    "DayChange",
    "HostSpec",
    "HostTruth",
    "RequestRecord",
    "RobotsSpec",
    "TestWeb",
    "Truth",
    "demo_site",
    "small_site",
]
