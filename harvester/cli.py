"""The ``harvester`` command line: thin over the flows and the library (its progress display: ``cli_watch``).

The only module of the library (with ``cli_process`` and ``cli_runs``) that may import ``prefect`` and ``flows``,
and it does so inside the commands that need them, so ``harvester status`` starts fast and works without a
Prefect API.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from harvester.cli_db import DAMAGE_ADVICE, err_console, open_frontier, ready_to_write, say_err
from harvester.cli_process import exit_code, exit_now, favour_the_loop, loading
from harvester.cli_tables import (
    console,
    json_default,
    print_changes,
    print_counters,
    print_problems,
    print_status,
    status_of,
)
from harvester.cli_watch import run_with_progress
from harvester.errors import ConfigError, EveryRequestFailed, HarvesterError, NothingFetched
from harvester.runtime import CLOCK, limit_malloc_arenas, utcnow
from harvester.settings import DEFAULT_DATABASE_URL, PolitenessSettings, Settings
from harvester.site_profile import SiteProfile

app = typer.Typer(add_completion=False, no_args_is_help=True, help="A polite, incremental sitemap-first harvester.")
db_app = typer.Typer(no_args_is_help=True, help="Frontier database maintenance.")
app.add_typer(db_app, name="db")

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

DbOpt = Annotated[str | None, typer.Option(
    "--db", metavar="URL", show_default=f"$HARVESTER_DATABASE_URL, else harvester.toml's database_url, else "
                                        f"{DEFAULT_DATABASE_URL}",
    help="The frontier database, an SQLAlchemy URL: sqlite:///path/to/file.db (3 slashes: relative to here; 4: "
         "absolute) or postgresql+psycopg://user@host/db.")]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", metavar="FILE", show_default="./harvester.toml when it exists",
    help="TOML settings file (its keys: harvester/settings.py).")]
_POLITENESS = PolitenessSettings.model_fields
PerHostOpt = Annotated[int | None, typer.Option(
    "--per-host", metavar="REQUESTS", min=SiteProfile.bounds("per_host_limit")["ge"],
    max=SiteProfile.bounds("per_host_limit")["le"],
    show_default=f"adaptive: from {_POLITENESS['per_host_start'].default} up to "
                 f"{_POLITENESS['max_per_host_limit'].default} (politeness.per_host_start, max_per_host_limit)",
    help="Requests in flight per host, fixed (no adaptation): the site profile's per_host_limit, as a sites "
         "file's per_host_limit or a Prefect run's profile sets it.")]
MaxHostsOpt = Annotated[int | None, typer.Option(
    "--max-hosts", metavar="HOSTS", min=1, show_default=str(_POLITENESS["max_active_hosts"].default),
    help="Hosts fetched at once; the others wait their turn.")]
BudgetOpt = Annotated[int | None, typer.Option(
    "--budget", metavar="PAGES", min=1,
    show_default=f"max_pages_per_host, {Settings.model_fields['max_pages_per_host'].default}",
    help="Detail pages answered per host in each extraction run; the rest stay queued for the next run "
         "(deferred). Not counted: robots.txt, sitemaps, feeds, listing pages, retries of the same page.")]
WorkersOpt = Annotated[int, typer.Option(
    "--workers", metavar="N", min=1, help="Extraction workers, each leasing its own hosts.")]


def main() -> None:
    """Console-script entry point: configuration errors are one clear line, never a traceback."""
    limit_malloc_arenas()  # before any thread starts (Where memory goes, internals.md)
    favour_the_loop()  # the event loop's socket calls get the GIL back soon (issue 31)
    # httpx imports its own command line (click, rich and pygments' lexers) when they are installed, as typer's are
    # here: a third of its import, before the first request, for a command this process never runs.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "no such module"
    try:
        try:
            if CLOCK.invalid is not None:  # before any command opens or writes a thing
                raise ConfigError(CLOCK.invalid)
            app()
        except HarvesterError as exc:
            # One line, whatever the width; the message as written (a "[sites.<name>]" in it is not markup).
            err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
            raise SystemExit(exit_code(exc)) from None
    except SystemExit as ended:
        if ended.code is not None and not isinstance(ended.code, int):
            raise  # a message: the ordinary exit prints it
        exit_now(ended.code or 0)
    exit_now(0)


def _print_version(value: bool) -> None:
    if value:
        from harvester._version import __version__

        typer.echo(f"harvester {__version__} (the harvester-crawl distribution)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """A polite, incremental sitemap-first harvester."""


# --- helpers -------------------------------------------------------------------------------------------------


def _settings(db: str | None, config: Path | None, **overrides: Any) -> Settings:
    settings = Settings.load(config, database_url=db)
    return settings.with_overrides(**overrides)


RUN_PAGE_LOGGING = {
    "PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "INFO",
    "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL": "WARNING",
}
"""With the quiet default, the runs' own loggers still at INFO (their lines reach the run's page in the UI, as a
deployment run's do) and the terminal's handler at WARNING (the terminal as quiet as before). The quiet level alone
set the ``prefect`` logger to WARNING, under which the run loggers' INFO lines were dropped before any handler: a
harvest run from the CLI had no summary line and no "Finished in state" on its page (ops48)."""


def _prepare_prefect(settings: Settings) -> None:
    """Environment for in-process flow runs: quiet Prefect, and the DB URL handed to tasks by env, not params."""
    if "PREFECT_LOGGING_LEVEL" not in os.environ:  # a level the user set is theirs, for the terminal and the page
        for key, value in RUN_PAGE_LOGGING.items():
            os.environ.setdefault(key, value)
    for key, value in PREFECT_QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    # Tasks load Settings at their edge; passing the URL by environment keeps passwords out of Prefect's DB.
    os.environ["HARVESTER_DATABASE_URL"] = settings.database_url


def _profile(seeds: list[str], settings: Settings, **fields: Any) -> SiteProfile:
    if not seeds:
        with open_frontier(settings, read_only=True) as store:
            last = store.last_profile()
            where = store.url_display
        if last is None:
            raise typer.BadParameter(f"no SEED given and no earlier harvest in the database {where} to take them "
                                     "from; give the seeds, or the --db of an earlier harvest")
        data = {**last, **{key: value for key, value in fields.items() if value is not None}}
        return SiteProfile.build(**data)
    return SiteProfile.build(seeds=tuple(seeds), **fields)


def _run(
    kind: str, settings: Settings, profile: SiteProfile, *, workers: int = 1, refresh: bool = False,
    config: Path | None = None, max_hosts: int | None = None,
) -> Any:
    """``kind`` through the Prefect flows when a server is configured, else in this process (``cli_runs``)."""
    with loading():  # the fetch and storage stack
        from harvester.cli_runs import prefect_api_url, run_locally, run_with_prefect

    # A new SQLite file is migrated once, before the progress display and the run open it from two threads at once;
    # an extraction or re-crawl never starts a frontier of its own.
    ready_to_write(settings, kind, existing=kind in ("extract", "recrawl"))
    try:
        if prefect_api_url() is None:
            return run_with_progress(settings, kind, run_locally(kind, settings, profile, workers=workers,
                                                                  refresh=refresh), settle=False)
        _prepare_prefect(settings)
        return run_with_progress(settings, kind, run_with_prefect(
            kind, profile, workers=workers, refresh=refresh, config_file=str(config) if config else None,
            overrides=_overrides(max_hosts),
        ))
    except EveryRequestFailed:
        print_status(settings)  # the frontier and the cycle's counts, with the failed URLs and why (exit 3)
        raise


def _overrides(max_hosts: int | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if max_hosts is not None:
        overrides["politeness.max_active_hosts"] = max_hosts
    return overrides


# --- commands ------------------------------------------------------------------------------------------------


@app.command()
def harvest(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs (http/https).")],
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    budget: BudgetOpt = None, workers: WorkersOpt = 1,
    name: Annotated[str, typer.Option(help="Profile name shown in runs and artifacts.")] = "site",
    extractor: Annotated[str | None, typer.Option(
        metavar="SPEC", help="Your extractor hook, as ./file.py:function or module:function: called with each "
                             "page, its dict of fields is stored with the page (docs/getting-started.md).")] = None,
) -> None:
    """Discover, then extract: the full two-phase harvest (resumes an interrupted one)."""
    from harvester.extraction.hook import absolute_spec, load_hook

    settings = _settings(db, config, **_overrides(max_hosts))
    profile = SiteProfile.build(seeds=tuple(seeds), name=name, max_pages_per_host=budget, per_host_limit=per_host,
                                extractor=absolute_spec(extractor))
    if profile.extractor is not None:
        load_hook(profile.extractor)  # a missing file or function is refused before a database is made or opened
    result = _run("harvest", settings, profile, workers=workers, config=config, max_hosts=max_hosts)
    print_counters("harvest", result)
    print_status(settings, run=result.get("extract_run"))  # ends with the last cycle's counts: this harvest's
    print_problems(settings, result.get("problems"))


@app.command()
def discover(
    seeds: Annotated[list[str], typer.Argument(help="Start URLs (http/https).")],
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    budget: BudgetOpt = None, refresh: Annotated[bool, typer.Option(help="Ask every document again.")] = False,
    name: Annotated[str, typer.Option(help="Profile name.")] = "site",
) -> None:
    """Phase one only: robots.txt, sitemaps, feeds and listing pages into the frontier."""
    settings = _settings(db, config, **_overrides(max_hosts))
    profile = SiteProfile.build(seeds=tuple(seeds), name=name, max_pages_per_host=budget, per_host_limit=per_host)
    since = utcnow()
    result = _run("discover", settings, profile, refresh=refresh, config=config, max_hosts=max_hosts)
    print_counters("discover", {"discover": result})
    print_status(settings)
    print_problems(settings)
    _fail_if_silent(settings, profile, since)


def _fail_if_silent(settings: Settings, profile: SiteProfile, since: datetime) -> None:
    """A discovery no seed host answered fails as a harvest does (``NothingFetched``, exit 2, naming the hosts and
    what to check): a dead port's ``discover`` exited 0 with nothing in the frontier while ``harvest`` exited 2."""
    with loading():
        from harvester.phases.runs import silence

    silent = asyncio.run(silence(settings, profile, since))
    if silent is not None:
        raise NothingFetched(silent)


@app.command()
def extract(
    seeds: Annotated[list[str] | None, typer.Argument(help="Profile seeds (default: the last harvest's).")] = None,
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    workers: WorkersOpt = 1,
) -> None:
    """Phase two only: fetch what is due in the frontier."""
    settings = _settings(db, config, **_overrides(max_hosts))
    profile = _profile(list(seeds or []), settings, per_host_limit=per_host)
    result = _run("extract", settings, profile, workers=workers, config=config, max_hosts=max_hosts)
    run = result.pop("extract_run", None)  # this command's run: the newest finished may be another process's
    print_counters("extract", {"extract": result})
    print_status(settings, run=run)


@app.command()
def recrawl(
    seeds: Annotated[list[str] | None, typer.Argument(help="Profile seeds (default: the last harvest's).")] = None,
    db: DbOpt = None, config: ConfigOpt = None, per_host: PerHostOpt = None, max_hosts: MaxHostsOpt = None,
    workers: WorkersOpt = 1,
    refresh: Annotated[bool, typer.Option(
        help="Treat everything as due now, gone pages included (still conditional); URLs refused by robots.txt "
             "or the scope stay refused.")] = False,
) -> None:
    """The incremental re-crawl: unchanged sitemaps and pages cost 304s; new and vanished URLs are reported."""
    settings = _settings(db, config, **_overrides(max_hosts))
    profile = _profile(list(seeds or []), settings, per_host_limit=per_host)
    result = _run("recrawl", settings, profile, workers=workers, refresh=refresh, config=config,
                  max_hosts=max_hosts)
    print_counters("recrawl", result)
    print_changes(result.get("changes") or {})


@app.command()
def status(
    db: DbOpt = None, config: ConfigOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Counts per state and per host."""
    settings = _settings(db, config)
    with open_frontier(settings, read_only=True) as store:  # never creates one: names the database it looked for
        where = store.url_display
    if as_json:
        print(json.dumps(status_of(settings), indent=2, default=json_default))
        return
    console.print(f"frontier: {where}", soft_wrap=True, markup=False, highlight=False)
    print_status(settings, most=None)
    print_problems(settings)


@app.command()
def export(
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="File to write (JSONL: a name ending .gz is gzipped). Replaced only once the export "
                               "is complete.")],
    fmt: Annotated[str, typer.Option("--format", help="jsonl or warc.")] = "jsonl",
    since: Annotated[str | None, typer.Option(
        metavar="TIME", help="Only fetches at or after this time: 2026-12-01, 2026-12-01T06:00:00, or with a zone "
                             "(…+02:00); a time without a zone is UTC. JSONL also gets a line per page gone or moved "
                             "since then.")] = None,
    latest: Annotated[bool, typer.Option(help="JSONL: only the newest version of each page, none of a page "
                                              "since gone, moved or found a duplicate (a snapshot).")] = False,
    text: Annotated[bool, typer.Option("--text", help="JSONL: add each page's main text and article metadata "
                                                      "(a `main` object, by trafilatura: the `text` extra).")] = False,
    db: DbOpt = None, config: ConfigOpt = None,
) -> None:
    """Stream the harvest out. JSONL: one record per stored version of a page, with the URL's state now (or
    --latest, the current version of each live page; --text adds its main text); with --since, one more per page
    gone or moved in the window. WARC 1.1: a response (and its request) per stored page version, revisits for 304s
    and repeated payloads; fetches whose bytes were not stored, error statuses and discovery documents (robots.txt,
    sitemaps, feeds) are not recorded. Every field: docs/export.md."""
    from harvester.cli_export import run_export, since_of

    moment = since_of(since)
    run_export(output, fmt, moment, latest, text, _settings(db, config))


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None, config: ConfigOpt = None) -> None:
    """Apply the migrations to the frontier database (the only way its schema changes)."""
    from harvester.frontier import FrontierStore

    settings = _settings(db, config)
    with FrontierStore.open(settings, upgrade=True) as store:
        console.print(f"{store.url_display}: schema at head")


@db_app.command("check")
def db_check(
    db: DbOpt = None, config: ConfigOpt = None,
    quick: Annotated[bool, typer.Option(help="SQLite's quick_check (what a run does when it starts): the pages' "
                                             "structure, not every index against its table.")] = False,
    repair: Annotated[bool, typer.Option(help="Recount the queue_counts table from the queue when it disagrees "
                                              "with it (runs may go on meanwhile: they wait a moment).")] = False,
) -> None:
    """Check the frontier for damage (SQLite: integrity_check), naming each damaged table or index, and the count
    table queue_counts against the queue it counts; exit 1 if anything is wrong (and not repaired)."""
    settings = _settings(db, config)
    with open_frontier(settings, read_only=True) as store:
        where = store.url_display
        problems = store.integrity(full=not quick)
        drift = [] if problems else store.queue_count_drift()  # a damaged file: its counts are the least of it
    how = ("quick" if quick else "full") + " check" if store.dialect == "sqlite" else "every table read through"
    if problems:
        say_err(f"{where} is damaged: {len(problems)} problem(s) found ({how}):")
        for problem in problems:
            say_err(f"  - {problem}")
        say_err(DAMAGE_ADVICE)
        raise SystemExit(1)
    if drift:
        off = ", ".join(f"host {d.host_id} {d.kind}: counted {d.counted}, queued {d.queued}" for d in drift[:5])
        more = f" and {len(drift) - 5} more" if len(drift) > 5 else ""
        if not repair:
            say_err(f"{where}: the table queue_counts disagrees with the queue it counts ({off}{more}): `harvester "
                    "status` shows wrong queued counts. `harvester db check --repair` recounts it from the queue")
            raise SystemExit(1)
        with open_frontier(settings) as store:
            rows = store.recount_queue()
            left = store.queue_count_drift()
        if left:
            say_err(f"{where}: queue_counts still disagrees with the queue after a recount: {left[0]}")
            raise SystemExit(1)
        console.print(f"{where}: queue_counts recounted from the queue ({rows} host and kind rows; it was off: "
                      f"{off}{more})", soft_wrap=True)
    console.print(f"{where}: no damage found ({how}); queue_counts agrees with the queue", soft_wrap=True)


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
    from harvester.flows.serve import serve_sites
    from harvester.flows.sites import SiteSpec, load_sites

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
    from harvester.flows.serve import pool_yaml
    from harvester.flows.sites import load_sites

    text = pool_yaml(load_sites(sites), pool=pool)
    if out is None:
        typer.echo(text, nl=False)
    else:
        from harvester.cli_output import replaced_on_success

        if out.expanduser().resolve() == sites.expanduser().resolve():
            raise typer.BadParameter(f"-o {str(out)!r} is the --sites file it was made from: writing it would replace "
                                     "your sites with YAML. Nothing was written; write the output elsewhere")
        with replaced_on_success(out) as file:  # never a half-written prefect.yaml over the last good one
            file.write(text.encode("utf-8"))
        console.print(f"wrote {out}: deploy with `prefect deploy --all --prefect-file {out}`")
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():  # env or the active Prefect profile: the server the deployments go to
        err_console.print(
            "no healing automations were created: PREFECT_API_URL is not set, so there is no server to create them "
            "on (crashed runs would not be retried). Set it to the server you deploy to (export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api) and run this command again"
        )
        return
    from harvester.flows.healing import ensure_healing

    for done in asyncio.run(ensure_healing()):
        err_console.print(f"{done} (automation)")


@app.command()
def demo(
    db: DbOpt = None,
    directory: Annotated[Path, typer.Option("--dir", help="The demo's own directory: its database (unless --db), "
                                                          "state and exports.")] = Path("harvester-demo"),
    fresh: Annotated[bool, typer.Option(help="Start over from day 0 (a new database when the demo owns it).")] = False,
    keep: Annotated[bool, typer.Option(help="Keep the test web running afterwards, until Ctrl-C.")] = False,
) -> None:
    """Harvest the bundled local test web, move it on a day and re-crawl it: what changed, what is new, what is
    gone. Run it again for the next day (same hosts, same ports, same database)."""
    from harvester.cli_demo import run_demo

    settings = _settings(db, None)
    run_demo(settings, directory, fresh=fresh, keep=keep,
             run=lambda kind, settings, profile: _run(kind, settings, profile, workers=2),
             settings_for=lambda url: _settings(url, None))
