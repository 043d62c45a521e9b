"""``harvester status`` after the process that held URLs ended without handing them back (kill -9, a machine's
power, a disk-full exit): its leases stay until a run of the site takes them back. status showed them as
``leased``, the state of work under way, with no hint that nothing was fetching them (stop 44's note). It now says
how many are held by a process that has ended, and which process.

The truth: the killed process's PID (gone) and the leases the frontier holds."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from daily_cli import CliAtHere

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.schedule import run_at


def test_status_names_urls_leased_by_a_process_that_has_ended(db_url: str, tmp_path: Path, clock: None) -> None:
    with FrontierStore.open(Settings.load(database_url=db_url), upgrade=True):  # PostgreSQL: migrated first
        pass
    with TestWeb([HostSpec("a", pages=80, latency_s=0.1)], seed=48) as web:
        cli = CliAtHere(db_url, tmp_path)
        killed = subprocess.Popen(cli.command(run_at(0), "harvest", *web.seeds, "--per-host", "2"), cwd=tmp_path,
                                  env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        details = {page.path for page in web.truth["a"].model.pages}
        deadline = time.monotonic() + 240
        while sum(1 for r in web.records() if r.path in details) < 10:  # extraction holds leases now
            assert killed.poll() is None, "the harvest ended before it could be killed"
            assert time.monotonic() < deadline, "the harvest asked too few pages"
            time.sleep(0.02)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        with FrontierStore.open(Settings.load(database_url=db_url), read_only=True) as store:
            held = store.leased_per_owner()
        assert held and all(f":{killed.pid}:" in owner for owner in held), held  # control: its leases outlived it

        when = run_at(0) + (run_at(1) - run_at(0)) / 96  # 15 minutes later: no lease of the default 300 s left
        status = json.loads(cli(when, "status", "--json"))
        assert status["leased_by_ended"] == {"urls": sum(held.values()), "owners": sorted(held)}
        assert status["by_state"]["leased"] == sum(held.values())
        text = " ".join(cli(when, "status").split())
        assert f"{sum(held.values())} of the leased URLs are held by a process that has ended" in text, text

        cli(when, "harvest", *web.seeds)  # the rerun takes them back and finishes
        status = json.loads(cli(when, "status", "--json"))
    assert "leased_by_ended" not in status
    assert "leased" not in status["by_state"] and "queued" not in status["by_state"], status["by_state"]
