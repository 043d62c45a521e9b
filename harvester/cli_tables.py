"""What the command line prints after a command: counters, the frontier per host, the last run's diagnostics
and problems. Tables for a person: a command shows the first hosts and says how to list the rest."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Console, ConsoleDimensions
from rich.table import Table

from harvester.records import merge_host
from harvester.runtime import db_sync
from harvester.settings import Settings
from harvester.store_results import CYCLE_COUNTS

OFF_TERMINAL_WIDTH = 1000
"""Columns the output has when it is not a terminal (cron, systemd, ``> log``) and ``COLUMNS`` does not say: rich's
80 squeezed the closing tables' cells to a few letters each (the parked reason and the errors column read
``5 / con / fai / (co``, ops48). A table is as wide as its content needs (none expands), so this only stops
the cutting; a terminal keeps its own width."""


class OutputConsole(Console):
    """rich's console, as wide as any table needs when its output is not a terminal (``OFF_TERMINAL_WIDTH``)."""

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal and not self._environ.get("COLUMNS", "").isdigit():
            return ConsoleDimensions(OFF_TERMINAL_WIDTH, size.height)
        return size  # type: ignore[no-any-return]

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = OutputConsole()


def print_counters(title: str, counters: dict[str, Any]) -> None:
    table = Table(title=title, show_header=True)
    table.add_column("phase")
    table.add_column("counter")
    table.add_column("value", justify="right")
    for phase, values in counters.items():
        if isinstance(values, dict):
            for key, value in sorted(values.items()):
                if not isinstance(value, dict | list):
                    table.add_row(phase, key, str(value))
    console.print(table)


MAX_PROBLEMS_SHOWN = 15


def print_problems(settings: Settings, problems: list[str] | None = None) -> None:
    """The last discovery's problems (robots.txt unavailable, sitemaps refused, cut or out of scope ...): the
    counters say how many, these say which and why. All of them are in the run's record and Prefect artifact.
    ``problems``: the cycle's, when the command has them (reading the run back loads every host's report)."""
    from harvester.frontier import FrontierStore

    where = "this run"
    if problems is None:
        with db_sync(FrontierStore.open, settings, read_only=True) as store:
            last = db_sync(store.last_run, "discover")
        problems = list(((last["counters"] if last else None) or {}).get("problems") or [])
        where = f"run {last['id'] if last else '?'}"
    if not problems:
        return
    console.print(f"[bold]Discovery problems[/] ({where}):")
    for problem in problems[:MAX_PROBLEMS_SHOWN]:
        console.print(f"  - {problem}", soft_wrap=True)
    if len(problems) > MAX_PROBLEMS_SHOWN:
        console.print(f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more in the run's record")


def print_changes(changes: dict[str, Any]) -> None:
    """A cycle's counts (``FrontierStore.cycle_counts``, the numbers ``status``, the artifacts and the event
    carry), with examples of what changed."""
    # Three lines, so each fits in 80 columns: what the pages did (two), then the requests it took.
    split, requests = CYCLE_COUNTS.index("missing"), CYCLE_COUNTS.index("fetched")
    for names in (CYCLE_COUNTS[:split], CYCLE_COUNTS[split:requests], CYCLE_COUNTS[requests:]):
        console.print("   ".join(f"{name.replace('_', ' ')}: {changes.get(name, 0)}" for name in names),
                      soft_wrap=True)
    for label in ("new", "changed", "restyled", "gone", "moved", "restored"):
        shown = (changes.get(f"{label}_urls") or [])[:MAX_PROBLEMS_SHOWN]
        for url in shown:
            console.print(f"  {label}: {url}", soft_wrap=True)
        # The count is over every URL; the stored examples are capped too (cycles.EXAMPLES): say what is not listed.
        if shown and (more := int(changes.get(label) or 0) - len(shown)) > 0:
            # Within 80 columns, as every line the demo prints (.ci/wheel-demo checks it).
            console.print(f"  ... and {more} more {label}: `harvester export --format jsonl` lists them",
                          soft_wrap=True)
    print_failed_urls(changes)


def print_failed_urls(changes: dict[str, Any]) -> None:
    """The cycle's URLs whose last request failed, each with its reason (``failed: URL (http_5xx 503)``): the
    counts alone said how many requests failed, never which pages."""
    failed = (changes.get("failed_urls") or [])[:MAX_PROBLEMS_SHOWN]
    for row in failed:
        console.print(f"  failed: {row['url']} ({row['reason']})", soft_wrap=True, markup=False, highlight=False)
    if failed and (more := int(changes.get("failed_url_count") or 0) - len(failed)) > 0:
        console.print(f"  ... and {more} more failed: `harvester status --json` lists more (failed_urls)",
                      soft_wrap=True)


def iso(value: object) -> str | None:
    """A time of ``status --json`` in ISO 8601 with its ``T`` (``2026-12-11T07:00:01.770000+00:00``), as
    ``lease_until`` always was; ``str(datetime)`` gave a space there (stranger47), and ``None`` the string "None" for
    a run not finished. None stays null; anything else is written as it is."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def json_default(value: object) -> object:
    """``json.dumps``' default for ``status --json``: a time as ``iso`` writes it, anything else as its str."""
    return iso(value)


def status_of(settings: Settings, run: int | None = None) -> dict[str, Any]:
    """Frontier counts per state and host; the last cycle's counts (``FrontierStore.cycle_counts``: all its
    attempts, the numbers its summary, artifact and event carried); the per-host diagnostics of extraction run
    ``run``, else of the last one (its fetched and 304 counts are the requests that run sent:
    ``phases.finish_run``; a command passes its own run: the newest may be another process's); the URLs
    robots.txt keeps from us, stored or not, each once, per host (``FrontierStore.refused_counts``)."""
    from harvester.frontier import FrontierStore

    with db_sync(FrontierStore.open, settings, read_only=True) as store:
        stats = db_sync(store.stats).as_dict()
        # A stopped extraction (SIGTERM) is the last one too: its own requests, not the day before's.
        last = db_sync(store.get_run, run) if run is not None else db_sync(store.last_run, "extract", stopped=True)
        # Extractions side by side (processes on one frontier) share a cycle: its table is all of theirs.
        cycle_id = None if last is None else last.get("cycle_id")
        beside = [] if run is not None or cycle_id is None else [
            row for row in db_sync(store.cycle_runs, cycle_id, "extract") if (row.get("counters") or {}).get("hosts")]
        discovery = db_sync(store.last_run, "discover")
        cycle = db_sync(store.last_cycle)
        refused = db_sync(store.refused_counts)
        leased = db_sync(store.leased_per_owner)
        ended = dict(zip(leased, db_sync(lambda: [store.liveness.is_dead(owner) for owner in leased]), strict=True))
        if cycle is not None:
            counts = dict(db_sync(store.cycle_counts, cycle["id"]))
            stats["last_cycle"] = {"id": cycle["id"], "kind": cycle["kind"], "status": cycle["status"],
                                   "started_at": iso(cycle["started_at"]), **counts}
    held = {owner: n for owner, n in leased.items() if ended[owner]}
    if held:  # nothing is fetching them: a leased count alone read as work under way (stop 44's note)
        stats["leased_by_ended"] = {"urls": sum(held.values()), "owners": sorted(held)}
    if discovery is not None:
        stats["last_discover"] = {"run": discovery["id"], "finished_at": iso(discovery.get("finished_at")),
                                  "robots_refused": sum(refused.values()), "robots_refused_by_host": refused,
                                  "problems": list((discovery.get("counters") or {}).get("problems") or []),
                                  "status": discovery.get("status"), **_why(discovery)}
        for origin, host in (stats.get("hosts") or {}).items():
            host["robots_refused"] = refused.get(origin, 0)
    if last is not None:
        counters = last.get("counters") or {}
        stats["last_extract"] = {
            "run": last["id"], "finished_at": iso(last.get("finished_at")), "hosts": counters.get("hosts") or {},
            "status": "stopped" if _stopped(last) else last.get("status"), **_why(last),
        }
        if run is None and len(beside) > 1:
            stats["last_extract"].update(runs=[row["id"] for row in beside], hosts=_cycle_hosts(beside))
    return stats


def _cycle_hosts(runs: list[Any]) -> dict[str, Any]:
    """The per-host tables of the cycle's extraction runs as one: several processes (or a failed attempt and its
    rerun) each keep the hosts they served, and one run's table showed 796 of a cycle's 2,400 requests (stranger
    45). Counts add up; the peak in flight and the limit are the largest any run saw (a host is held by one process
    at a time)."""
    hosts: dict[str, Any] = {}
    for row in runs:
        for origin, host in ((row.get("counters") or {}).get("hosts") or {}).items():
            hosts[origin] = merge_host(hosts.get(origin), host)
    return hosts


def _in_flight(host: dict[str, Any]) -> str:
    """The most requests open at once / the limit, or "-" where the run kept none: a stopped run's table is read
    from the fetch log (its requests), not from the engine, and showed "0 / 0" for a host fetched at a limit of 2."""
    if "peak_in_flight" not in host and "limit" not in host:
        return "-"
    return f"{host.get('peak_in_flight', 0)} / {host.get('limit', 0)}"


def _stopped(run: Any) -> bool:
    """A run a stop left unfinished for its rerun to resume, with what it did kept (``phases.note_stopped``)."""
    return run.get("status") == "running" and bool((run.get("counters") or {}).get("stopped"))


def _why(run: Any) -> dict[str, str]:
    """Why a run ended as it did, when it says: ``error`` (failed: ``phases.finish_failed``), ``reason``
    (abandoned: another run was started in its place, ``FrontierStore.resume_or_start_run``) or ``stopped`` (a
    stop, the run left to be resumed: ``phases.note_stopped``)."""
    counters = run.get("counters") or {}
    return {key: str(counters[key]) for key in ("error", "reason", "stopped") if counters.get(key)}


MAX_HOSTS_SHOWN = 25
"""Hosts a command's closing tables show (``harvester status`` shows all): a table of 2,000 rows was unreadable,
and rendering it was the run's last and highest memory peak (issue 22)."""


def print_status(settings: Settings, most: int | None = MAX_HOSTS_SHOWN, *, run: int | None = None) -> dict[str, Any]:
    """The frontier, the last cycle and the per-host diagnostics of extraction run ``run`` (a command's own), else
    of the last one (``harvester status``)."""
    stats = status_of(settings, run)
    kinds = stats.get("by_kind") or {}
    of_kind = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    table = Table(title=f"Frontier: {stats.get('total', 0)} URLs{f' ({of_kind})' if of_kind else ''}", min_width=48)
    hosts_shown = host_labels(list(stats.get("hosts") or {}))
    table.add_column(hosts_shown.header, overflow="fold", min_width=12)
    states = sorted({state for host in (stats.get("hosts") or {}).values() for state in (host.get("states") or {})})
    for state in states:
        table.add_column(state, justify="right")
    table.caption = f"URLs by state, detail and listing pages alike; {stats.get('pages', 0)} page versions stored"
    for origin, host in first_rows(sorted((stats.get("hosts") or {}).items()), most, table):
        by_state = host.get("states") or {}
        table.add_row(hosts_shown.label(origin), *(str(by_state.get(state, 0)) for state in states))
    console.print(table)
    if ended := stats.get("leased_by_ended"):
        console.print(f"{ended['urls']} of the leased URLs are held by a process that has ended "
                      f"({', '.join(ended['owners'][:3])}{' …' if len(ended['owners']) > 3 else ''}): nothing is "
                      "fetching them; the next extraction of their site takes them back when it starts.",
                      soft_wrap=True, markup=False, highlight=False)
    print_refused(stats, most)
    cycle = stats.get("last_cycle")
    if cycle:
        console.print(f"[bold]Last cycle[/] ({cycle['kind']} {cycle['id']}, {cycle['status']}, all its attempts):")
        print_changes(cycle)
    for name, key in (("discovery", "last_discover"), ("extraction", "last_extract")):
        last = stats.get(key) or {}
        if last.get("status") in ("failed", "abandoned", "stopped"):  # the last one too: why
            resumed = "; the next run resumes it" if last["status"] == "stopped" else ""
            console.print(f"[bold]Last {name} (run {last['run']}) {last['status']}[/]: "
                          f"{last.get('error') or last.get('reason') or last.get('stopped') or 'no reason kept'}"
                          f"{resumed}", soft_wrap=True)
    last = stats.get("last_extract") or {}
    hosts = last.get("hosts") or {}
    if hosts:
        ended = f" ({last['status']})" if last.get("status") in ("failed", "abandoned", "stopped") else ""
        which = (f"runs {', '.join(str(n) for n in last['runs'])}, one cycle" if last.get("runs")
                 else f"run {last['run']}")
        diag = Table(title=f"Last extraction ({which}){ended}: per-host diagnostics",
                     caption="in flight: the most requests open at once / the limit when the run ended "
                             "(adaptive, unless --per-host fixed it)")
        diag_hosts = host_labels(list(hosts))
        parked = any(host.get("parked_reason") for host in hosts.values())
        diag.add_column(diag_hosts.header, overflow="fold", min_width=15)
        # "404/410": requests so answered (a URL asked twice, twice), not the URLs the cycle counts gone or missing.
        for column in ("fetched", "304", "404/410", "errors", "in flight", "req/s", *(("parked",) if parked else ())):
            diag.add_column(column, justify="left" if column in ("errors", "parked") else "right",
                            no_wrap=column not in ("errors", "parked"))
        # Hosts with errors or parked first: they are why one reads this table.
        ranked = sorted(hosts.items(), key=lambda kv: (not (kv[1].get("errors") or kv[1].get("parked_reason")), kv[0]))
        for origin, host in first_rows(ranked, most, diag):
            errors = "\n".join(f"{k}={v}" for k, v in sorted((host.get("errors") or {}).items())) or "-"
            diag.add_row(diag_hosts.label(origin), str(host.get("fetched", 0)), str(host.get("not_modified", 0)),
                         str(host.get("gone", 0)), errors, _in_flight(host), str(host.get("rate_per_s", "-")),
                         *((host.get("parked_reason") or "",) if parked else ()))
        console.print(diag)
    return stats


def print_refused(stats: dict[str, Any], most: int | None) -> None:
    """The URLs robots.txt keeps from us, per host, each once (``FrontierStore.refused_counts``): the stored ones
    (the ``disallowed`` column of the table above: refused after they were stored, or at their redirect's target)
    and those discovery found but neither fetched nor stored, which no column shows."""
    discovery = stats.get("last_discover") or {}
    if not discovery.get("robots_refused"):
        return
    by_host = discovery.get("robots_refused_by_host") or {}
    labels = host_labels(list(by_host))
    refused = sorted(by_host.items(), key=lambda item: (-item[1], item[0]))
    shown = refused if most is None else refused[:most]
    total = int(discovery["robots_refused"])
    stored = int((stats.get("by_state") or {}).get("disallowed") or 0)
    parts = [f"{stored} of them stored (state disallowed, out of the snapshot)"] if stored else []
    parts += [f"{total - stored} neither fetched nor stored"] if total > stored else []
    console.print(f"[bold]Disallowed by robots.txt[/]: {total} URL{'' if total == 1 else 's'} discovery found, each "
                  f"once (robots.txt as the last discovery, run {discovery['run']}, read it): {', '.join(parts)}; "
                  "per host: "
                  + ", ".join(f"{labels.label(origin)} {n}" for origin, n in shown)
                  + (f" ... and {len(refused) - len(shown)} more hosts" if len(refused) > len(shown) else ""),
                  soft_wrap=True)


class HostLabels:
    """How a table names its hosts: the origin without the scheme when all share one (the header says which), so
    the part that tells hosts apart (name and port) is what the column holds; a name too long for the column
    wraps (``overflow="fold"``) rather than being cut to a prefix every host shares."""

    def __init__(self, scheme: str | None) -> None:
        self.scheme = scheme
        self.header = f"host ({scheme})" if scheme else "host"

    def label(self, origin: str) -> str:
        if self.scheme and origin.startswith(f"{self.scheme}://"):
            return origin[len(self.scheme) + 3:]
        return origin


def host_labels(origins: list[str]) -> HostLabels:
    schemes = {origin.partition("://")[0] for origin in origins if "://" in origin}
    return HostLabels(schemes.pop() if len(schemes) == 1 and all("://" in o for o in origins) else None)


def first_rows(rows: list[tuple[str, Any]], most: int | None, table: Table) -> list[tuple[str, Any]]:
    """The first ``most`` rows; the table's caption says how many more ``harvester status`` lists."""
    if most is None or len(rows) <= most:
        return rows
    table.caption = f"... and {len(rows) - most} more hosts: `harvester status` lists them all"
    return rows[:most]
