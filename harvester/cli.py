"""The ``harvester`` command line: thin over the flows and the library, with a rich progress display.

The only module of the library (with ``cli_process`` and ``cli_runs``) that may import ``prefect`` and ``flows``,
and it does so inside the commands that need them, so ``harvester status`` starts fast and works without a
Prefect API.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Coroutine
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harvester.cli_process import exit_now, loading, settle_prefect
from harvester.cli_tables import MAX_PROBLEMS_SHOWN, console, print_counters, print_problems, print_status, status_of
from harvester.errors import HarvesterError
from harvester.runtime import db, db_sync, limit_malloc_arenas
from harvester.settings import DEFAULT_DATABASE_URL, Settings, SiteProfile

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A polite, incremental sitemap-first harvester.")
db_app = typer.Typer(no_args_is_help=True, help="Frontier database maintenance.")
app.add_typer(db_app, name="db")
err_console = Console(stderr=True)

PREFECT_QUIET_DEFAULTS = {
    # This machine has no internet: no telemetry, no update checks.
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    # The temporary server prints CancelledError tracebacks when stopped with a task-run backlog; small
    # batches flushed every second leave none (measured, see docs/internals.md).
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE": "50",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_READ_BATCH_SIZE": "50",
    "PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL": "1",
    # The temporary API server migrates its database on first start; on a loaded 2-core machine that can
    # take longer than Prefect's 20 s default.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
}

DbOpt = Annotated[str | None, typer.Option("--db", help="Database URL (default: HARVESTER_DATABASE_URL or SQLite).")]
ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML settings file (default ./harvester.toml).")]
PerHostOpt = Annotated[int | None, typer.Option("--per-host", help="Requests in flight per host.")]
MaxHostsOpt = Annotated[int | None, typer.Option("--max-hosts", help="Hosts fetched at once.")]
BudgetOpt = Annotated[int | None, typer.Option("--budget", help="Page budget per host.")]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Extraction workers (each leases its own hosts).")]


def main() -> None:
    """Console-script entry point: configuration errors are one clear line, never a traceback."""
    limit_malloc_arenas()  # before any thread starts (Where memory goes, internals.md)
    try:
        try:
            app()
        except HarvesterError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)  # one line, whatever the width
            raise SystemExit(2) from None
    except SystemExit as ended:
        if ended.code is not None and not isinstance(ended.code, int):
            raise  # a message: the ordinary exit prints it
        exit_now(ended.code or 0)
    exit_now(0)


# --- helpers -------------------------------------------------------------------------------------------------


def _settings(db: str | None, config: Path | None, **overrides: Any) -> Settings:
    settings = Settings.load(config, database_url=db)
    return settings.with_overrides(**overrides)


def _prepare_prefect(settings: Settings) -> None:
    """Environment for in-process flow runs: quiet Prefect, and the DB URL handed to tasks by env, not params."""
    for key, value in PREFECT_QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    # Tasks load Settings at their edge; passing the URL by environment keeps passwords out of Prefect's DB.
    os.environ["HARVESTER_DATABASE_URL"] = settings.database_url


def _profile(seeds: list[str], settings: Settings, **fields: Any) -> SiteProfile:
    if not seeds:
        from harvester.frontier import FrontierStore

        with FrontierStore.open(settings) as store:
            last = store.last_profile()
        if last is None:
            raise typer.BadParameter("no SEED given and no earlier harvest in this database to take them from")
        data = {**last, **{key: value for key, value in fields.items() if value is not None}}
        return SiteProfile.build(**data)
    return SiteProfile.build(seeds=tuple(seeds), **fields)


def _run(
    kind: str, settings: Settings, profile: SiteProfile, *, workers: int = 1, refresh: bool = False,
    config: Path | None = None, per_host: int | None = None, max_hosts: int | None = None,
) -> Any:
    """``kind`` through the Prefect flows when a server is configured, else in this process (``cli_runs``)."""
    with loading():  # the fetch and storage stack
        from harvester.cli_runs import prefect_api_url, run_locally, run_with_prefect
        from harvester.frontier import FrontierStore

    with db_sync(FrontierStore.open, settings):  # a new SQLite file is migrated once, before the progress display
        pass                                     # and the run open it from two threads at once
    if prefect_api_url() is None:
        return _run_with_progress(settings, kind, run_locally(kind, settings, profile, workers=workers,
                                                              refresh=refresh), settle=False)
    _prepare_prefect(settings)
    return _run_with_progress(settings, kind, run_with_prefect(
        kind, profile, workers=workers, refresh=refresh, config_file=str(config) if config else None,
        overrides=_overrides(per_host, max_hosts),
    ))


def _overrides(per_host: int | None, max_hosts: int | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if per_host is not None:
        overrides["politeness.per_host_limit"] = per_host
        overrides["politeness.max_per_host_limit"] = per_host
    if max_hosts is not None:
        overrides["politeness.max_active_hosts"] = max_hosts
    return overrides


PROGRESS_INTERVAL_S = 0.5
"""How often the progress line reads the frontier's counts, at least."""


def _run_with_progress(
    settings: Settings, title: str, coro: Coroutine[Any, Any, Any], *, settle: bool = True
) -> Any:
    """Run a flow (or the library's cycle) while a rich display shows the frontier filling and emptying."""
    from harvester.frontier import FrontierStore

    async def watch(progress: Progress, task_id: Any, done: asyncio.Event) -> None:
        with await db(FrontierStore.open, settings) as store:
            while True:
                finishing = done.is_set()  # one more reading after the run ended: the last line is the final count
                started = time.monotonic()
                states = await db(store.state_counts)
                # Counting grows with the frontier: read at most ~5 % of the time, however large it gets.
                interval = max(PROGRESS_INTERVAL_S, 20 * (time.monotonic() - started))
                total = sum(states.values())
                finished = total - states.get("queued", 0) - states.get("leased", 0)
                progress.update(task_id, total=max(total, 1), completed=finished,
                                description=f"{title}: {states.get('done', 0)} done, {states.get('queued', 0)} queued")
                if finishing:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=interval)

    async def run() -> Any:
        done = asyncio.Event()
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False,
        ) as progress:
            task_id = progress.add_task(title, total=None)
            watcher = asyncio.create_task(watch(progress, task_id, done))
            try:
                return await coro
            finally:
                done.set()
                await watcher

    result = asyncio.run(run())
    if settle:
        settle_prefect()
    return result


# --- commands ------------------------------------------------------------------------------------------------


@app.command()
def harvest(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs (http/https).")],
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    budget: BudgetOpt = None, workers: WorkersOpt = 1,
    name: Annotated[str, typer.Option(help="Profile name shown in runs and artifacts.")] = "site",
    extractor: Annotated[str | None, typer.Option(help="User extractor hook, module:function.")] = None,
) -> None:
    """Discover, then extract: the full two-phase harvest (resumes an interrupted one)."""
    settings = _settings(db, config, **_overrides(per_host, max_hosts))
    profile = SiteProfile.build(seeds=tuple(seeds), name=name, max_pages_per_host=budget, extractor=extractor)
    result = _run("harvest", settings, profile, workers=workers, config=config, per_host=per_host,
                  max_hosts=max_hosts)
    print_counters("harvest", result)
    print_status(settings)
    print_problems(settings, result.get("problems"))
    _print_changes(result.get("changes") or {})


@app.command()
def discover(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs (http/https).")],
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    budget: BudgetOpt = None, refresh: Annotated[bool, typer.Option(help="Ask every document again.")] = False,
    name: Annotated[str, typer.Option(help="Profile name.")] = "site",
) -> None:
    """Phase one only: robots.txt, sitemaps, feeds and listing pages into the frontier."""
    settings = _settings(db, config, **_overrides(per_host, max_hosts))
    profile = SiteProfile.build(seeds=tuple(seeds), name=name, max_pages_per_host=budget)
    result = _run("discover", settings, profile, refresh=refresh, config=config, per_host=per_host,
                  max_hosts=max_hosts)
    print_counters("discover", {"discover": result})
    print_status(settings)
    print_problems(settings)


@app.command()
def extract(
    seeds: Annotated[list[str] | None, typer.Argument(help="Profile seeds (default: the last harvest's).")] = None,
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    workers: WorkersOpt = 1,
) -> None:
    """Phase two only: fetch what is due in the frontier."""
    settings = _settings(db, config, **_overrides(per_host, max_hosts))
    profile = _profile(list(seeds or []), settings)
    result = _run("extract", settings, profile, workers=workers, config=config, per_host=per_host,
                  max_hosts=max_hosts)
    print_counters("extract", {"extract": result})
    print_status(settings)


@app.command()
def recrawl(
    seeds: Annotated[list[str] | None, typer.Argument(help="Profile seeds (default: the last harvest's).")] = None,
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    workers: WorkersOpt = 1,
    refresh: Annotated[bool, typer.Option(help="Treat everything as due now (still conditional).")] = False,
) -> None:
    """The incremental re-crawl: unchanged sitemaps and pages cost 304s; new and vanished URLs are reported."""
    settings = _settings(db, config, **_overrides(per_host, max_hosts))
    profile = _profile(list(seeds or []), settings)
    result = _run("recrawl", settings, profile, workers=workers, refresh=refresh, config=config,
                  per_host=per_host, max_hosts=max_hosts)
    print_counters("recrawl", result)
    _print_changes(result.get("changes") or {})


def _print_changes(changes: dict[str, Any]) -> None:
    """What a cycle changed (``FrontierStore.changes_since``): new, changed and gone, with examples of each, and
    what the page budget deferred to the next run."""
    console.print(f"new: {changes.get('new', 0)}   changed: {changes.get('changed', 0)}   "
                  f"gone: {changes.get('gone', 0)}   deferred by the page budget: {changes.get('deferred', 0)}")
    for label in ("new", "changed", "gone"):
        for url in (changes.get(f"{label}_urls") or [])[:MAX_PROBLEMS_SHOWN]:
            console.print(f"  {label}: {url}", soft_wrap=True)


@app.command()
def status(
    db: DbOpt = None, config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Counts per state and per host."""
    settings = _settings(db, config)
    if as_json:

        print(json.dumps(status_of(settings), indent=2, default=str))
        return
    print_status(settings, most=None)


@app.command()
def export(
    output: Annotated[Path, typer.Option("-o", "--output", help="File to write.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl or warc.")] = "jsonl",
    since: Annotated[datetime | None, typer.Option(help="Only fetches at or after this time (UTC).")] = None,
    latest: Annotated[bool, typer.Option(help="JSONL: only the newest version of each page, none of a page "
                                              "since gone, moved or found a duplicate (a snapshot).")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Stream the harvest out as JSONL (one record per stored version of a page, with the URL's state now; or
    --latest, the current version of each live page) or WARC 1.1 (responses, revisits, requests)."""
    from harvester import export as exporter
    from harvester.frontier import FrontierStore

    if fmt not in ("jsonl", "warc"):
        raise typer.BadParameter(f"--format {fmt!r}: use jsonl or warc")
    if latest and fmt != "jsonl":
        raise typer.BadParameter("--latest is a JSONL snapshot; a WARC file records every exchange")
    if not output.parent.is_dir():
        raise typer.BadParameter(f"-o {str(output)!r}: the directory {str(output.parent)!r} does not exist; create it "
                                 "or write elsewhere")
    settings = _settings(db, config)
    since_utc = since.astimezone() if since and since.tzinfo is None else since
    # The store first: a wrong --db must not empty an existing output file, nor be set up as a new database.
    upgrade = None if settings.database_url == DEFAULT_DATABASE_URL else False
    with FrontierStore.open(settings, upgrade=upgrade) as store:
        try:
            out = output.open("wb")
        except OSError as exc:
            raise typer.BadParameter(f"-o {str(output)!r}: cannot write it ({exc.strerror})") from None
        with out:
            if fmt == "jsonl":
                count = exporter.export_jsonl(store.iter_pages(since=since_utc, latest=latest), out)
                console.print(f"wrote {count} {'pages' if latest else 'page versions'} to {output}")
                return
            counts = exporter.WarcCounts()
            exporter.export_warc(store.iter_fetches(since=since_utc), out, user_agent=settings.http.user_agent,
                                 counts=counts)
    records = counts.responses + counts.revisits + counts.requests
    console.print(f"wrote {records} WARC records to {output}: {counts.responses} responses, "
                  f"{counts.revisits} revisits, {counts.requests} requests"
                  + (f" ({counts.skipped} fetches with no HTTP exchange skipped)" if counts.skipped else ""))


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None, config: ConfigOpt = None) -> None:
    """Apply the migrations to the frontier database (the only way its schema changes)."""
    from harvester.frontier import FrontierStore

    settings = _settings(db, config)
    with FrontierStore.open(settings, upgrade=True) as store:
        console.print(f"{store.url_display}: schema at head")


SitesOpt = Annotated[
    Path | None, typer.Option("--sites", help="TOML file with one [sites.<name>] table per site (docs/operations.md).")
]


@app.command()
def serve(
    seeds: Annotated[list[str] | None, typer.Argument(help="Seeds of one site (or give --sites).")] = None,
    sites: SitesOpt = None,
    name: Annotated[str, typer.Option(help="Site name (with SEEDS).")] = "site",
    harvest_cron: Annotated[str, typer.Option(help="Cron of the full harvest (with SEEDS).")] = "0 2 * * 0",
    recrawl_cron: Annotated[str, typer.Option(help="Cron of the daily re-crawl (with SEEDS).")] = "0 3 * * *",
    workers: WorkersOpt = 1, config: ConfigOpt = None,
) -> None:
    """Register each site's harvest and recrawl deployments (<kind>/<site>-serve) with their schedules, and serve
    their runs."""
    for key, value in PREFECT_QUIET_DEFAULTS.items():
        if not key.endswith("LOGGING_LEVEL"):
            os.environ.setdefault(key, value)
    from flows.serve import serve_sites
    from flows.sites import SiteSpec, load_sites

    if sites is not None and seeds:
        raise typer.BadParameter("give SEEDS or --sites, not both")
    if sites is not None:
        specs = load_sites(sites)
    elif seeds:
        specs = [SiteSpec(SiteProfile.build(seeds=tuple(seeds), name=name), harvest_cron=harvest_cron,
                          recrawl_cron=recrawl_cron, workers=workers)]
    else:
        raise typer.BadParameter("give the SEEDS of one site, or --sites FILE")
    serve_sites(specs, config_file=str(config) if config else None)


@app.command()
def deployments(
    sites: Annotated[Path, typer.Option("--sites", help="TOML file with one [sites.<name>] table per site.")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write here (default: standard output).")] = None,
    pool: Annotated[str, typer.Option(help="Process work pool the deployments run on.")] = "harvester",
) -> None:
    """Write the prefect.yaml of every site's harvest/<site> and recrawl/<site> deployments on a work pool, for
    `prefect deploy --all --prefect-file FILE` (nothing is written if any site is bad)."""
    from flows.serve import pool_yaml
    from flows.sites import load_sites

    text = pool_yaml(load_sites(sites), pool=pool)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        console.print(f"wrote {out}: deploy with `prefect deploy --all --prefect-file {out}`")
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():  # env or the active Prefect profile: the server the deployments go to
        err_console.print(
            "no healing automations were created: PREFECT_API_URL is not set, so there is no server to create them "
            "on (crashed runs would not be retried). Set it to the server you deploy to (export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api) and run this command again"
        )
        return
    from flows.healing import ensure_healing

    for done in asyncio.run(ensure_healing()):
        err_console.print(f"{done} (automation)")


@app.command()
def demo(
    db: DbOpt = None,
    keep: Annotated[bool, typer.Option(help="Keep the test web running after the harvest, until Ctrl-C.")] = False,
) -> None:
    """Start the bundled local test web and harvest it end to end on the embedded defaults."""
    from harvester.testing.sites import demo_site
    from harvester.testing.web import TestWeb

    settings = _settings(db, None)
    _prepare_prefect(settings)
    from flows.harvest import harvest_flow

    started = time.monotonic()
    with TestWeb(demo_site(), seed=7, mode="process") as web:
        console.print(f"[bold]test web[/] serving {len(web.seeds)} hosts on 127.0.0.1: " + ", ".join(web.seeds))
        profile = SiteProfile.build(seeds=tuple(web.seeds), name="demo")
        result = _run_with_progress(settings, "demo harvest", harvest_flow(profile, workers=2))
        print_counters("demo harvest", result)
        print_status(settings)
        console.print(f"harvested in {time.monotonic() - started:.1f} s")
        _where_to_look(settings)
        if keep:
            console.print("test web still running; Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)


def _where_to_look(settings: Settings) -> None:
    from harvester.frontier import FrontierStore

    with FrontierStore.open(settings) as store:
        where = store.url_display
    console.print(
        "\n[bold]Where to look[/]\n"
        f"  database:   {where}\n"
        "  status:     harvester status   (or --json)\n"
        "  export:     harvester export --format jsonl -o demo.jsonl   (or --format warc -o demo.warc.gz)\n"
        "  Prefect UI: the demo used Prefect's temporary API, which stops with it. To browse runs and artifacts,\n"
        "              start a server (prefect server start), export PREFECT_API_URL=http://127.0.0.1:4200/api,\n"
        "              rerun harvester demo, and open http://127.0.0.1:4200/runs"
    )


