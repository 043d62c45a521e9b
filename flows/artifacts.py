"""Run counters to Prefect artifacts: a markdown summary, a per-host table and a discovery-sources table.

Presentation only: the counters come from ``harvester.phases.PhaseResult``; nothing here decides anything.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect.artifacts import acreate_markdown_artifact, acreate_progress_artifact, acreate_table_artifact

from harvester.phases import PhaseResult

HOST_COLUMNS = (
    "fetched", "not_modified", "gone", "failed", "deferred_by_budget", "peak_in_flight", "limit", "rate_per_s", "bytes",
)


def host_rows(result: PhaseResult) -> list[dict[str, Any]]:
    """One row per host: fetched, 304s, errors by class, in-flight peak, rate."""
    rows = []
    for origin, host in sorted(result.hosts.items()):
        row: dict[str, Any] = {"host": origin}
        row.update({column: host.get(column, 0) for column in HOST_COLUMNS})
        errors = host.get("errors") or {}
        row["errors"] = ", ".join(f"{name}={count}" for name, count in sorted(errors.items())) or "-"
        row["parked"] = host.get("parked_reason") or ""
        rows.append(row)
    return rows


def source_rows(result: PhaseResult) -> list[dict[str, Any]]:
    """One row per host and source kind: URLs found, with the overlap and rejections of the report."""
    rows = []
    for origin, report in sorted(result.reports.items()):
        # Keys of harvester.rules.report.DiscoveryReport.to_dict().
        queued = report.get("urls_queued_by_source") or {}
        for source, count in sorted((report.get("urls_found_by_source") or {}).items()):
            rows.append({"host": origin, "source": source, "urls": count, "queued": queued.get(source, 0)})
        for verdict, count in sorted((report.get("rejected") or {}).items()):
            rows.append({"host": origin, "source": f"rejected:{verdict}", "urls": count, "queued": 0})
    return rows


def summary_markdown(result: PhaseResult, *, title: str, run_id: int, stats: dict[str, Any]) -> str:
    lines = [f"# {title}", "", f"Frontier run `{run_id}` · phase `{result.phase}`", ""]
    lines += ["| counter | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in sorted(result.counters.items())]
    states = stats.get("by_state") or {}
    if states:
        lines += ["", "## Frontier by state", "", "| state | URLs |", "|---|---|"]
        lines += [f"| {state} | {count} |" for state, count in sorted(states.items())]
    if result.problems:
        lines += ["", "## Problems", ""] + [f"- {problem}" for problem in result.problems[:50]]
    return "\n".join(lines) + "\n"


async def publish(result: PhaseResult, *, title: str, run_id: int, stats: dict[str, Any]) -> None:
    """The artifacts every run leaves, keyed by phase so the UI shows their history."""
    key = result.phase.replace("_", "-")
    await acreate_markdown_artifact(
        key=f"{key}-summary", markdown=summary_markdown(result, title=title, run_id=run_id, stats=stats),
        description=f"{title}: summary",
    )
    rows = host_rows(result)
    if rows:
        await acreate_table_artifact(key=f"{key}-hosts", table=rows, description="Per-host fetch counters")
    sources = source_rows(result)
    if sources:
        await acreate_table_artifact(key=f"{key}-sources", table=sources, description="Discovery sources per host")


async def start_progress(phase: str) -> str:
    """A progress artifact the extraction workers update while they run."""
    artifact_id: UUID = await acreate_progress_artifact(
        progress=0.0, key=f"{phase.replace('_', '-')}-progress", description="Share of due URLs completed"
    )
    return str(artifact_id)
