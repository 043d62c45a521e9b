"""What a phase reports: ``PhaseResult`` (JSON-able counters, what a Prefect task returns) and ``Progress`` (the
snapshots extraction hands its caller while it runs)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from harvester.records import HostDiagnostics, merge_host


@dataclass
class PhaseResult:
    """Small, JSON-able counters of one phase (what a Prefect task returns and artifacts show)."""

    phase: str
    counters: Counter[str] = field(default_factory=Counter)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    run_id: int | None = None
    """The run these counters are of (``phases.finish_run`` sets it): what a command's closing table shows, not the
    newest run, which may be another process's."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase, "counters": dict(self.counters), "hosts": self.hosts, "reports": self.reports,
            "problems": self.problems[:200], "run_id": self.run_id,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PhaseResult:
        return cls(
            phase=data["phase"], counters=Counter(data.get("counters") or {}), hosts=dict(data.get("hosts") or {}),
            reports=dict(data.get("reports") or {}), problems=list(data.get("problems") or []),
            run_id=data.get("run_id"),
        )

    @classmethod
    def merge(cls, phase: str, parts: Iterable[PhaseResult | dict[str, Any]]) -> PhaseResult:
        merged = cls(phase=phase)
        for part in parts:
            item = part if isinstance(part, PhaseResult) else cls.from_dict(part)
            merged.counters.update(item.counters)
            for origin, host in item.hosts.items():
                merged.hosts[origin] = merge_host(merged.hosts.get(origin), host)
            merged.reports.update(item.reports)
            merged.problems.extend(item.problems)
        deferred = [host["deferred_by_budget"] for host in merged.hosts.values() if "deferred_by_budget" in host]
        if deferred:
            # Per host, not per worker: two workers of a run may each find one spent host (one took it up after the
            # other handed it back) and count the same deferred URLs.
            merged.counters["deferred_by_budget"] = sum(deferred)
        return merged


@dataclass(frozen=True, slots=True)
class Progress:
    """A snapshot handed to ``on_progress`` during extraction."""

    done: int
    """Due URLs this run has finished (answered, or kept on their lastmod)."""
    total: int
    """``done`` plus what the run has still to do: claimed and not yet answered (in flight, or waiting for their
    host's turn), and still due on the site's hosts. Never only what was claimed: a run claims in batches, ahead of
    its requests (a stuck run showed "5 of 5 (100%)" with a page hanging and more due)."""
    hosts: dict[str, HostDiagnostics]
    final: bool = False
    """The run's last snapshot: a reporter that throttles its updates must not drop this one."""

    @property
    def percent(self) -> float:
        """Share done; below 100 (at most 99) while anything is left, so a rounded figure never says 100% then.
        Nothing known yet (a tick while discovery still reads robots.txt and sitemaps, before any page is due) is
        0%, not 100%: only the run's last snapshot may say all is done with nothing to do (a loaded CI run's
        first tick said 0 of 0, 100%, with a request in flight)."""
        if self.total <= 0:
            return 100.0 if self.final else 0.0
        if self.done >= self.total:
            return 100.0
        return min(99.0, 100.0 * self.done / self.total)

    def host_lines(self) -> list[str]:
        lines = []
        for origin, diag in sorted(self.hosts.items()):
            errors = ",".join(f"{name}={count}" for name, count in sorted(diag.errors.items())) or "-"
            lines.append(
                f"{origin} fetched={diag.fetched} 304={diag.not_modified} in_flight={diag.in_flight}/{diag.limit} "
                f"peak={diag.peak_in_flight} queue={diag.queue_depth} rate={diag.rate_per_s:.1f}/s errors={errors}"
                + (f" parked={diag.parked_reason}" if diag.parked_reason else "")
            )
        return lines


ProgressCallback = Callable[[Progress], Awaitable[None]]
