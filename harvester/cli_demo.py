"""``harvester demo``: the harvester's point in one command. The first run harvests the bundled test web; every run
then moves that web on a day (pages edited, added, deleted) and re-crawls it on the same database, printing what
changed, what was new and what is gone, and the commands to look at the result.

The demo keeps its own directory (``harvester-demo/`` by default: the database, ``demo.json`` with the test web's
ports and day, exports), so a second run meets the same hosts on the same ports one day later, rather than four
new hosts on new ports that a re-crawl would know nothing about. The harvester's clock is set to the test web's
day (``runtime.CLOCK``), so a re-crawl a minute after the harvest is, to the harvester, the next morning's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from harvester.cli_tables import console, print_changes, print_status
from harvester.runtime import CLOCK, CLOCK_ENV
from harvester.settings import DEFAULT_DATABASE_URL, Settings
from harvester.site_profile import SiteProfile

DEMO_SEED = 7
STATE_FILE = "demo.json"
DAY_CHANGE = {"changed": 0.05, "new": 0.03, "gone": 0.02}
"""How much of each host's site changes overnight in the demo (fractions of its live pages)."""

RunCycle = Callable[[str, Settings, SiteProfile], dict[str, Any]]
"""Runs ``harvest`` or ``recrawl`` as the other commands do (cli._run): a Prefect flow or in this process."""


def run_demo(settings: Settings, directory: Path, *, fresh: bool, keep: bool, run: RunCycle,
             settings_for: Callable[[str], Settings]) -> None:
    from harvester.testing.schedule import run_at
    from harvester.testing.sites import demo_site
    from harvester.testing.web import TestWeb

    directory.mkdir(parents=True, exist_ok=True)
    own_db = settings.database_url == DEFAULT_DATABASE_URL  # no --db, env or harvester.toml: the demo's own file
    database_url = f"sqlite:///{directory / 'demo.db'}" if own_db else settings.database_url
    state = None if fresh else _read_state(directory, database_url)
    if state is not None and not _ports_free(state["ports"].values()):
        console.print(f"the demo's ports {sorted(state['ports'].values())} are taken (another demo running?): "
                      "starting a new demo", soft_wrap=True)
        state = None
    if state is None and own_db:
        with contextlib.suppress(FileNotFoundError):
            (directory / "demo.db").unlink()  # its hosts' ports are gone with the state: begin again
    settings = settings_for(database_url)
    specs = demo_site()
    if state is not None:
        specs = [replace(spec, port=state["ports"][spec.name]) for spec in specs]
    started = time.monotonic()
    with TestWeb(specs, seed=DEMO_SEED, mode="process") as web:
        day = 0 if state is None else int(state["day"])
        for _ in range(day):  # the same seed and the same days: the web as the last run left it
            web.advance_day(**DAY_CHANGE)
        profile = SiteProfile.build(seeds=tuple(web.seeds), name="demo")
        ports = {name: int(web.origin(name).rsplit(":", 1)[1]) for name in web.names}
        _write_state(directory, database_url, ports, day)
        console.print(f"[bold]test web[/] on 127.0.0.1, day {day}: "
                      + ", ".join(f"{name} :{port}" for name, port in ports.items()), soft_wrap=True)
        if state is None:
            _travel(run_at(0))
            result = run("harvest", settings, profile)
            console.print(f"harvest, day 0: {(result.get('changes') or {}).get('new', 0)} pages stored",
                          soft_wrap=True)
            print_status(settings)
        day += 1
        truth = web.advance_day(**DAY_CHANGE)
        _write_state(directory, database_url, ports, day)
        _travel(run_at(day))
        console.print(f"\n[bold]Day {day}[/]: overnight the test web edited {_count(truth.changed)} pages, added "
                      f"{_count(truth.new)} and deleted {_count(truth.gone)}. The re-crawl, on the same database:")
        result = run("recrawl", settings, profile)
        console.print(recrawl_sentence(result.get("changes") or {}), soft_wrap=False)
        print_changes(result.get("changes") or {})
        console.print(f"demo ran in {time.monotonic() - started:.1f} s")
        print_commands(directory, database_url if own_db else None)
        if keep:
            console.print("test web still running (recrawl, discover and extract reach it); Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)


def recrawl_sentence(changes: dict[str, Any]) -> str:
    """What the re-crawl did, in words, from the cycle's counts (``FrontierStore.cycle_counts``): the numbers the
    table under it, ``status`` and the run's event carry, so the sentence and the table never disagree. (It read
    the extraction run's counters, which have no ``changed`` or ``gone`` key: it said 0 of each on every day.)"""
    downloaded = sum(int(changes.get(name, 0)) for name in ("new", "changed", "restyled"))
    return (f"  {changes.get('not_modified', 0)} requests answered 304 Not Modified (nothing downloaded), "
            f"{downloaded} changed or new pages were downloaded and stored, {changes.get('gone', 0)} pages are "
            "gone (404/410)")


def _count(per_host: dict[str, tuple[Any, ...]]) -> int:
    return sum(len(urls) for urls in per_host.values())


def _travel(moment: Any) -> None:
    """The harvester's clock to the test web's day, here and in any process the run starts."""
    CLOCK.travel_to(moment)
    os.environ[CLOCK_ENV] = moment.isoformat()


def _read_state(directory: Path, database_url: str) -> dict[str, Any] | None:
    """The last run's ports and day, if it used this database (another one starts a new demo)."""
    try:
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if state.get("seed") != DEMO_SEED or state.get("database_url") != database_url:
        return None
    if not isinstance(state.get("ports"), dict) or not isinstance(state.get("day"), int):
        return None
    return state


def _write_state(directory: Path, database_url: str, ports: dict[str, int], day: int) -> None:
    state = {"seed": DEMO_SEED, "database_url": database_url, "ports": ports, "day": day}
    (directory / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def _ports_free(ports: Any) -> bool:
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is fine
            try:
                probe.bind(("127.0.0.1", int(port)))
            except OSError:
                return False
    return True


def command_name() -> str:
    """How to call this very ``harvester`` from the shell the user is in: the bare name when it is on the PATH,
    else its path (``.venv/bin/harvester`` after ``make demo``, nothing activated)."""
    launched = Path(sys.argv[0])
    if not launched.name.startswith("harvester"):
        launched = Path(sys.executable).parent / "harvester"
    on_path = shutil.which("harvester")
    if on_path is not None and Path(on_path).resolve() == launched.resolve():
        return "harvester"
    absolute = launched.resolve() if launched.is_absolute() else (Path.cwd() / launched)
    with contextlib.suppress(ValueError):
        return str(absolute.relative_to(Path.cwd()))
    return str(absolute)


def shell_lines(argv: list[str], width: int) -> list[str]:
    """``argv`` as shell text of lines at most ``width`` wide where it can be, broken between arguments with a
    trailing backslash: copied as printed, it runs; a terminal never wraps it mid-word."""
    lines: list[str] = []
    current = ""
    units: list[str] = []  # an option and its value stay on one line
    for arg in (shlex.quote(a) for a in argv):
        if units and units[-1].startswith("-") and " " not in units[-1] and not arg.startswith("-"):
            units[-1] += f" {arg}"
        else:
            units.append(arg)
    for arg in units:
        if current and len(current) + 1 + len(arg) + 2 > width:
            lines.append(current + " \\")
            current = "    " + arg
        else:
            current = f"{current} {arg}" if current else arg
    lines.append(current)
    return lines


def print_commands(directory: Path, database_url: str | None) -> None:
    """What to run next, each command copyable as printed at the console's width."""
    me = command_name()
    db = ["--db", database_url] if database_url else []
    width = max(console.width - 2, 40)
    steps = [
        ("the frontier, per state and host", [me, "status", *db]),
        ("the pages as JSON lines (docs/export.md)", [me, "export", *db, "--latest", "-o",
                                                     str(directory / "pages.jsonl")]),
        ("every fetch as WARC", [me, "export", *db, "--format", "warc", "-o", str(directory / "pages.warc.gz")]),
        ("the next day: the web moves on, the re-crawl shows what changed", [me, "demo"]),
        ("start over from day 0", [me, "demo", "--fresh"]),
    ]
    console.print("\n[bold]Look at it[/]")
    for label, argv in steps:
        console.print(f"# {label}", soft_wrap=True, highlight=False)
        for line in shell_lines(argv, width):
            console.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)
    console.print("# the runs in Prefect's UI: a server, the demo pointed at it", soft_wrap=True, highlight=False)
    prefect = "prefect" if me == "harvester" else str(Path(me).with_name("prefect"))
    for line in (f"{prefect} server start   # in another terminal", "export PREFECT_API_URL=http://127.0.0.1:4200/api",
                 f"{me} demo", "# then open http://127.0.0.1:4200/runs"):
        console.print(f"  {line}", soft_wrap=True, highlight=False, markup=False)
