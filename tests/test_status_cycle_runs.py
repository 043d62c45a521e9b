"""``harvester status`` after several extraction processes shared one cycle: its "Last extraction" table showed one
process's hosts (a stranger's three workers: 796 of the cycle's 2,400 requests). It now adds up every run of the
cycle; a command's own closing table (``run`` given) stays its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harvester.cli_tables import status_of
from harvester.frontier import FrontierStore
from harvester.owners import make_owner, retire_owner
from harvester.settings import Settings

HARVESTER = str(Path(sys.executable).with_name("harvester"))
PROFILE = {"name": "shop", "seeds": ["http://127.0.0.1:1/"]}


def _host(fetched: int, *, peak: int, errors: dict[str, int] | None = None) -> dict[str, object]:
    return {"fetched": fetched, "not_modified": 1, "gone": 0, "errors": errors or {}, "peak_in_flight": peak,
            "limit": 2, "rate_per_s": 3.0}


def test_status_adds_up_the_runs_of_the_last_cycle(db_url: str, tmp_path: Path) -> None:
    settings = Settings.load(database_url=db_url)
    owners = [make_owner("extract") for _ in range(3)]
    a, b = "http://127.0.0.1:1", "http://127.0.0.2:1"
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            first, second, third = (store.start_run("extract", profile=PROFILE, owner=owner) for owner in owners)
            store.stop_run(first, counters={"stopped": "SIGTERM received", "hosts": {a: _host(5, peak=2)}})
            store.finish_run(second, status="completed",
                             counters={"hosts": {a: _host(7, peak=1, errors={"timeout": 1}), b: _host(4, peak=2)}})
            store.finish_run(third, status="completed", counters={"hosts": {b: _host(9, peak=2)}})
        done = subprocess.run([HARVESTER, "status", "--json", "--db", db_url], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, check=True)
        last = json.loads(done.stdout)["last_extract"]
        assert last["runs"] == [first, second, third]
        assert {origin: host["fetched"] for origin, host in last["hosts"].items()} == {a: 12, b: 13}
        assert last["hosts"][a]["errors"] == {"timeout": 1} and last["hosts"][a]["not_modified"] == 2
        assert last["hosts"][a]["peak_in_flight"] == 2
        shown = subprocess.run([HARVESTER, "status", "--db", db_url], capture_output=True, text=True, timeout=120,
                               cwd=tmp_path, check=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
        assert f"runs {first}, {second}, {third}, one cycle" in shown
        # A command's own table is its own run's.
        own = status_of(settings, third)["last_extract"]
        assert "runs" not in own and set(own["hosts"]) == {b} and own["hosts"][b]["fetched"] == 9
    finally:
        for owner in owners:
            retire_owner(owner)


def test_a_stopped_runs_table_shows_no_in_flight_it_did_not_keep(db_url: str, tmp_path: Path) -> None:
    """A stopped run's table is read from the fetch log (its requests), with no peak or limit: it showed "0 / 0"
    for a host fetched at a limit of 2 (stranger 45)."""
    settings = Settings.load(database_url=db_url)
    owner = make_owner("extract")
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            stopped = store.start_run("extract", profile=PROFILE, owner=owner)
            requests = {"fetched": 5, "not_modified": 0, "gone": 0, "errors": {}}
            store.stop_run(stopped, counters={"stopped": "SIGTERM received", "hosts": {"http://127.0.0.1:1": requests}})
        shown = subprocess.run([HARVESTER, "status", "--db", db_url], capture_output=True, text=True, timeout=120,
                               cwd=tmp_path, check=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}).stdout
        row = next(line for line in shown.splitlines() if "127.0.0.1:1 " in line and "│" in line)
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        assert cells[1] == "5" and cells[5:7] == ["-", "-"], row  # fetched; in flight, req/s
    finally:
        retire_owner(owner)
