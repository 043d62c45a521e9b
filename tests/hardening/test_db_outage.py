"""PostgreSQL going away in the middle of a harvest, as a user meets it: ``harvester harvest`` on the command line,
its database restarted (or stopped for 6 s) once discovery, or extraction, is under way. The run waits for the
server (``runtime.db``), ends with exit 0 and a complete frontier, and a page fetched while the database was away
is stored, or asked once more at most.

The server is one of the test's own (``private_pg``, tests/hardening/conftest.py), so stopping it disturbs no other
test.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb

from .private_pg import PrivatePostgres

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

HARVESTER = str(Path(sys.executable).with_name("harvester"))
OUTAGE_S = 6.0
"""Longer than the completion writer's own retries (3.75 s in all) and four of the store's outage waits (0.25 s
doubling to 5 s: 3.75 s, the fifth ends at 7.75 s): the run must wait for the server, not ride it out within one
retry. Each second more is a second more of every stop case, and two more waiting for the next ask."""


@pytest.fixture
def slow_web() -> Iterator[TestWeb]:
    # Slow enough (30 ms answers, two at a time) that the outage lands inside the phase it aims at.
    specs = [HostSpec("a", pages=90, latency_s=0.03, sitemap_children=3),
             HostSpec("b", pages=90, latency_s=0.03, sitemap_children=3)]
    with TestWeb(specs, seed=21) as web:
        yield web


def detail_paths(web: TestWeb) -> set[tuple[str, str]]:
    return {(name, url.split("/", 3)[3]) for name in web.names for url in web.truth[name].allowed_detail_urls()}


@pytest.mark.parametrize(("phase", "outage"), [
    ("discovery", "restart"), ("discovery", "stop"), ("extraction", "restart"), ("extraction", "stop"),
])
async def test_the_database_going_away_mid_harvest_costs_a_wait_not_the_run(
    private_pg: PrivatePostgres, slow_web: TestWeb, tmp_path: Path, phase: str, outage: str,
):
    web = slow_web
    details = detail_paths(web)
    settings = Settings.load(database_url=private_pg.url)
    FrontierStore.open(settings, upgrade=True).close()
    struck = threading.Event()
    done = threading.Event()

    def strike() -> None:
        # Discovery: once sitemaps are being read. Extraction: once a few dozen detail pages were answered.
        deadline = time.monotonic() + 120
        while not done.is_set() and time.monotonic() < deadline:
            records = web.records()
            if phase == "discovery" and any(r.path.startswith("/sitemaps/") for r in records):
                break
            if phase == "extraction" and sum((r.host, r.path.lstrip("/")) in details for r in records) >= 30:
                break
            time.sleep(0.02)
        else:
            return
        if outage == "restart":
            private_pg.restart()
        else:
            private_pg.stop()
            time.sleep(OUTAGE_S)
            private_pg.start()
        struck.set()

    striker = threading.Thread(target=strike)
    striker.start()
    try:
        run = await asyncio.to_thread(
            subprocess.run, [HARVESTER, "harvest", *web.seeds, "--db", private_pg.url, "--per-host", "2"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
    finally:
        done.set()
        await asyncio.to_thread(striker.join, 120)
    assert struck.is_set(), f"control: the outage never came during {phase}"
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    allowed = {url for name in web.names for url in web.truth[name].allowed_detail_urls()}
    assert {url for url in allowed if states.get(url, ("",))[0] != "done"} == set()
    # A page answered while the database was away is stored when it comes back, or asked once more at most.
    answered = Counter((r.host, r.path.lstrip("/")) for r in web.records() if r.status == 200)
    assert max(answered[key] for key in details) <= 2
    assert sum(answered[key] > 1 for key in details) <= 16  # at most the completions in flight at the outage
