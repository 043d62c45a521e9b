"""After a run stopped by SIGTERM, ``harvester status`` shows that run's "Last extraction", marked stopped, with the
requests it sent: stranger 44 saw the table of the day before (its run number, its counts) after stopping day 4's
re-crawl, as if the stopped run had asked nothing. The run's row stays unfinished for the rerun to resume; the rerun
ends it, and ``status`` then shows it completed.

The truth is the test web's request log: each host's detail pages asked on the day of the stopped run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from daily_cli import CliAtHere

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.schedule import run_at


def test_status_after_a_sigterm_shows_the_stopped_runs_own_requests_marked_stopped(db_url: str, tmp_path: Path,
                                                                                   clock: None):
    with FrontierStore.open(Settings.load(database_url=db_url), upgrade=True):  # PostgreSQL: migrated first
        pass
    specs = [HostSpec("a", pages=60, latency_s=0.05), HostSpec("b", pages=40, latency_s=0.05)]
    with TestWeb(specs, seed=44) as web:
        cli = CliAtHere(db_url, tmp_path)  # in this process but for the run stopped by a signal

        def status(when: datetime) -> dict[str, Any]:
            return json.loads(cli(when, "status", "--json"))["last_extract"]

        cli(run_at(0), "harvest", *web.seeds)
        web.advance_day(changed=0.1, new=0.05)
        cli(run_at(1), "recrawl")
        before = status(run_at(1) + timedelta(minutes=5))
        assert before["status"] == "completed"

        web.advance_day(changed=0.1, new=0.05)
        web.clear_records()
        details = {name: {page.path for page in web.truth[name].model.pages} for name in web.names}
        stopped = subprocess.Popen(cli.command(run_at(2), "recrawl", "--refresh"), cwd=tmp_path, env=cli.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while sum(1 for r in web.records() if r.path in details[r.host]) < 25:  # part way through the pages
            assert stopped.poll() is None, "the re-crawl ended before it could be stopped"
            assert time.monotonic() < deadline, "the re-crawl asked too few pages"
            time.sleep(0.02)
        stopped.send_signal(signal.SIGTERM)
        out, err = stopped.communicate(timeout=240)
        assert stopped.returncode == 128 + signal.SIGTERM, (out[-2000:], err[-2000:])
        asked = {name: [r for r in web.records() if r.host == name and r.path in details[name]]
                 for name in web.names}
        after = status(run_at(2) + timedelta(minutes=5))
        text = cli(run_at(2) + timedelta(minutes=5), "status")
        origins = {name: web.origin(name) for name in web.names}
        cli(run_at(2) + timedelta(minutes=10), "recrawl")  # the rerun resumes the stopped run, and ends it
        resumed = status(run_at(2) + timedelta(minutes=15))
        assert resumed["run"] == after["run"] and resumed["status"] == "completed" and "stopped" not in resumed
        assert sum(len(requests) for requests in asked.values()) < sum(len(paths) for paths in details.values())
        assert after["run"] > before["run"], (after, before)  # the stopped run's, not the day before's
        assert after["status"] == "stopped" and "SIGTERM" in after["stopped"], after
        for name, origin in origins.items():
            line = after["hosts"].get(origin, {})
            own = {"fetched": len(asked[name]), "not_modified": sum(1 for r in asked[name] if r.status == 304)}
            assert {key: line.get(key, 0) for key in own} == own, (name, line, own)
        assert f"Last extraction (run {after['run']}) stopped: SIGTERM" in text, text
        assert f"Last extraction (run {after['run']}) (stopped): per-host diagnostics" in text, text
        # The command itself said so too, closing with the same table.
        assert f"Last extraction (run {after['run']}) (stopped)" in out, out[-3000:]
