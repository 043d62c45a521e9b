"""Run counters to Prefect artifacts: each phase's markdown summary, per-host table and discovery-sources table,
and a cycle's (harvest, recrawl) summary of changes and fetches on the parent flow run.

Presentation only: the counters come from ``harvester.phases.PhaseResult`` and ``Cycle``; nothing here decides.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, TypeVar, cast

from prefect import get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_progress_artifact, acreate_table_artifact
from prefect.client.schemas.objects import State
from prefect.events import emit_event
from prefect.states import Completed

from harvester.flows.events import cycle_event
from harvester.phases import PhaseResult, site_origins
from harvester.phases.cycles import Cycle, cycle_failure
from harvester.runtime import utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import CYCLE_COUNTS

logger = logging.getLogger(__name__)

T = TypeVar("T")

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


def site_states(stats: dict[str, Any], hosts: list[str]) -> dict[str, int]:
    """URLs by state on ``hosts`` only (``StoreStats.hosts``' per-host states)."""
    states: dict[str, int] = {}
    per_host = stats.get("hosts") or {}
    for origin in hosts:
        for state, count in ((per_host.get(origin) or {}).get("states") or {}).items():
            states[state] = states.get(state, 0) + count
    return states


def summary_markdown(
    result: PhaseResult, *, title: str, run_id: int, stats: dict[str, Any], hosts: list[str] | None = None,
) -> str:
    """A phase run's page. ``hosts``: the site's hosts (``phases.site_origins``), whose URLs "Frontier by state"
    counts; None: it counts the whole database, and says so (a frontier may hold many sites: their URLs under one
    site's heading misled)."""
    lines = [f"# {title}", "", f"Frontier run `{run_id}` · phase `{result.phase}`", ""]
    lines += ["| counter | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in sorted(result.counters.items())]
    if hosts is None:
        states, heading = stats.get("by_state") or {}, "Frontier by state (the whole database, every site)"
    else:
        states = site_states(stats, hosts)
        heading = f"Frontier by state (this site's {len(hosts)} host{'' if len(hosts) == 1 else 's'})"
    if states:
        lines += ["", f"## {heading}", "", "| state | URLs |", "|---|---|"]
        lines += [f"| {state} | {count} |" for state, count in sorted(states.items())]
    if result.problems:
        lines += ["", "## Problems", ""] + [f"- {problem}" for problem in result.problems[:50]]
        if len(result.problems) > 50:
            lines.append(f"- ... and {len(result.problems) - 50} more in the run's record")
    return "\n".join(lines) + "\n"


async def _reported(what: str, report: Awaitable[T]) -> T | None:
    """``report``'s result; None when it failed, which is logged: a report is never worth the run it tells of (the
    Prefect API away as a finished run publishes made it a failed one, its work done and written)."""
    try:
        return await report
    except Exception as exc:
        logger.warning("%s not published: %s", what, exc, extra={"error_class": type(exc).__name__})
        return None


async def site_scope(settings: Settings, profile: SiteProfile) -> list[str] | None:
    """The site's hosts for its run's artifacts (``phases.site_origins``); None when they cannot be read (the
    artifact then counts the whole database and says so: a report is never worth the run)."""
    return await _reported("the site's hosts", site_origins(settings, profile))


async def publish(
    result: PhaseResult, *, title: str, run_id: int, stats: dict[str, Any], hosts: list[str] | None = None,
) -> None:
    """The artifacts every run leaves, keyed by phase so the UI shows their history; ``hosts`` as
    ``summary_markdown``'s."""
    key = result.phase.replace("_", "-")
    await _reported(f"{key}-summary", acreate_markdown_artifact(
        key=f"{key}-summary", markdown=summary_markdown(result, title=title, run_id=run_id, stats=stats, hosts=hosts),
        description=f"{title}: summary",
    ))
    rows = host_rows(result)
    if rows:
        await _reported(f"{key}-hosts", acreate_table_artifact(key=f"{key}-hosts", table=rows,
                                                               description="Per-host fetch counters"))
    sources = source_rows(result)
    if sources:
        await _reported(f"{key}-sources", acreate_table_artifact(key=f"{key}-sources", table=sources,
                                                                 description="Discovery sources per host"))


async def start_progress(phase: str) -> str | None:
    """A progress artifact the extraction workers update while they run (None: it could not be made)."""
    key = f"{phase.replace('_', '-')}-progress"
    artifact_id = await _reported(key, acreate_progress_artifact(
        progress=0.0, key=key, description="Share of due URLs completed"))
    return None if artifact_id is None else str(artifact_id)


MAX_EXAMPLES = 20
"""URLs listed per kind of change in a cycle's summary (all of them are in the frontier)."""


def cycle_totals(cycle: Cycle[Any]) -> dict[str, int]:
    """The cycle's request counts, with failures as ``error:<class>``: read from its counts, never re-summed."""
    changes = cycle.changes
    totals = {"fetched": changes["fetched"], "not_modified": changes["not_modified"], "failed": changes["failed"]}
    totals.update({f"error:{name}": n for name, n in (changes.get("failures") or {}).items()})
    return totals


def cycle_line(kind: str, site: str, cycle: Cycle[Any]) -> str:
    """One log line that tells the cycle: what changed, what it cost, what failed."""
    changes = cycle.changes
    failures = _failures(cycle_totals(cycle))
    return (
        f"{kind} of {site}: {changes['new']} new, {changes['changed']} changed, {changes['restyled']} restyled, "
        f"{changes['gone']} gone, {changes['missing']} missing, {changes.get('moved', 0)} moved, "
        f"{changes.get('restored', 0)} restored, {changes['deferred']} deferred; "
        f"{changes['fetched']} fetched, {changes['not_modified']} not modified, {changes['failed']} failed"
        + (f" ({failures})" if failures else "") + f", {changes['hook_failed']} hook failed"
    )


def cycle_markdown(kind: str, site: str, cycle: Cycle[Any]) -> str:
    """The parent run's page: the cycle's counts (all its attempts), requests by host, and examples."""
    changes: dict[str, Any] = dict(cycle.changes)
    lines = [f"# {kind.capitalize()} of {site}", ""]
    if (failure := cycle_failure(cycle)) is not None:
        lines += [f"**Failed: {failure}**", ""]
    elif not (cycle.found or changes["fetched"] or changes["deferred"]):
        # A table of zeros read as "broken" (the UI, read once): it is what a re-crawl before anything is due does.
        lines += ["Nothing was due: no known page had reached its revisit time and discovery found no new page, "
                  "so no page was asked (robots.txt, sitemaps and feeds were, conditionally).", ""]
    lines += ["| | pages |", "|---|---|", f"| found by discovery | {cycle.found} |"]
    lines += [f"| {name.replace('_', ' ')} | {changes.get(name, 0)} |" for name in CYCLE_COUNTS]
    if cycle.fetches:
        lines += ["", "## Hosts", "", "| host | fetched | not modified | 404/410 | failed | failures | hook failed |",
                  "|---|---|---|---|---|---|---|"]
        for origin, counts in sorted(cycle.fetches.items()):
            lines.append(f"| {origin} | {counts.get('fetched', 0)} | {counts.get('not_modified', 0)} | "
                         f"{counts.get('gone', 0)} | {counts.get('failed', 0)} | {_failures(counts) or '-'} | "
                         f"{counts.get('hook_failed', 0)} |")
    if cycle.problems:
        lines += ["", f"## Discovery problems ({len(cycle.problems)})", ""]
        lines += [f"- {problem}" for problem in cycle.problems[:MAX_EXAMPLES]]
        if len(cycle.problems) > MAX_EXAMPLES:
            lines.append(f"- ... and {len(cycle.problems) - MAX_EXAMPLES} more in the discovery run's record")
    for name in ("new", "changed", "restyled", "gone", "moved", "restored"):
        urls = (changes.get(f"{name}_urls") or [])[:MAX_EXAMPLES]
        if urls:
            part = f" (first {len(urls)} of {changes[name]})" if changes[name] > len(urls) else ""
            lines += ["", f"## {name.capitalize()}{part}", ""] + [f"- {url}" for url in urls]
    failed = (changes.get("failed_urls") or [])[:MAX_EXAMPLES]
    if failed:
        total = int(changes.get("failed_url_count") or 0)
        part = f" (first {len(failed)} of {total})" if total > len(failed) else ""
        lines += ["", f"## Failed{part}", ""] + [f"- failed: {row['url']} ({row['reason']})" for row in failed]
    return "\n".join(lines) + "\n"


def ended_with(cycle: Cycle[Any], result: T) -> T:
    """The cycle flow's return: its result as it is, or, when requests failed, a Completed state carrying it with a
    message saying how many ("3 failed (timeout=3) of 12 requests"): the run list shows a state's message, and a
    run whose pages timed out showed a bare Completed. Typed as ``result`` because that is what the flow's caller
    receives: Prefect makes a state the flow returns its final state, and hands the caller ``state.result()``."""
    changes = cycle.changes
    if not changes["failed"]:
        return result
    failures = _failures(cycle_totals(cycle))
    ended: State[T] = Completed(message=f"{changes['failed']} failed" + (f" ({failures})" if failures else "")
                      + f" of {changes['fetched']} requests", data=result)
    return cast("T", ended)


def _failures(counts: dict[str, int]) -> str:
    return ", ".join(f"{key[6:]}={n}" for key, n in sorted(counts.items()) if key.startswith("error:"))


async def publish_cycle(kind: str, site: str, cycle: Cycle[Any]) -> None:
    """The parent flow's own artifacts, log summary and event, so its run page tells the cycle without the CLI
    and downstream deployments can react to it without polling."""
    run_logger = get_run_logger()
    (run_logger.error if cycle_failure(cycle) else run_logger.info)("%s", cycle_line(kind, site, cycle))
    started = cycle.started_at or utcnow()
    try:
        emit_event(**cycle_event(kind, site, cycle, totals=cycle_totals(cycle),
                                 duration_s=(utcnow() - started).total_seconds()))
    except Exception as exc:  # as ``_reported``: the cycle is done whether or not its event went out
        logger.warning("the %s event not emitted: %s", kind, exc, extra={"error_class": type(exc).__name__})
    await _reported(f"{kind}-summary", acreate_markdown_artifact(
        key=f"{kind}-summary", markdown=cycle_markdown(kind, site, cycle),
        description=f"{kind.capitalize()} of {site}: changes and fetches, summed over its phases",
    ))
    rows = [{"host": origin, **counts} for origin, counts in sorted(cycle.fetches.items())]
    if rows:
        await _reported(f"{kind}-hosts", acreate_table_artifact(key=f"{kind}-hosts", table=rows,
                                                                description="Page fetches per host, this cycle"))
