"""Crash suite: a harvest SIGKILLed at 10 seeded random points, one in each tenth of its requests, each followed by a
rerun to completion.

The harvest runs in a forked child of a fork server (tests/hardening/crash_child.py) against a thread-mode
test web in this process. Across every kill: no URL done in the database at the kill is requested again, no
discovered URL is lost, and the final database equals an uninterrupted run's (URLs, states, content hashes).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harvester.errors import SchemaOutOfDate
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.forkserver import ForkServer

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 10
"""One kill point drawn in each tenth of a harvest's requests: every stretch of it (robots.txt and sitemaps, the
first and last upserts, extraction's first and last completions) is struck, which 20 unstratified draws did not
promise (they may cluster), at half their cost."""
SEED = 20_261_202




def states_of(db: Path) -> dict[str, tuple[str, str | None]]:
    """URL states in the file; empty when it does not exist or the kill came before the schema was complete."""
    if not db.exists():
        return {}
    settings = Settings.load(database_url=f"sqlite:///{db}")
    try:
        with FrontierStore.open(settings) as store:
            return store.url_states()
    except SchemaOutOfDate:
        return {}


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


@pytest.fixture
def crash_web() -> Iterator[TestWeb]:
    specs = [HostSpec("a", pages=40, latency_s=0.01), HostSpec("b", pages=30, latency_s=0.01, sitemap_children=3)]
    with TestWeb(specs, seed=7) as web:
        yield web


@pytest.mark.slow
def test_sigkill_at_10_points_spread_over_a_harvest_loses_nothing_and_repeats_no_completed_fetch(
        crash_web: TestWeb, tmp_path: Path):
    web = crash_web
    server = ForkServer(CHILD, web.seeds, tmp_path)
    try:
        assert server.wait(server.run(tmp_path / "reference.db")) == 0
        reference = states_of(tmp_path / "reference.db")
        # A second uninterrupted run proves the harvest deterministic, and the requests it makes spread the kill
        # points over a whole harvest: each kill comes when the web has seen a drawn number of the trial's
        # requests, whatever the machine's speed (kill points drawn in seconds landed before the first write or
        # after the last on a loaded machine, failing the control below).
        web.clear_records()
        assert server.wait(server.run(tmp_path / "reference-2.db")) == 0
        span = len(web.records())
        assert states_of(tmp_path / "reference-2.db") == reference
        assert sum(1 for state, _ in reference.values() if state == "done") >= 70
        rng = random.Random(SEED)
        stratum = 0.95 * span / KILLS
        points = [rng.randint(1 + int(k * stratum), max(1 + int(k * stratum), int((k + 1) * stratum)))
                  for k in range(KILLS)]
        repeated: list[tuple[int, str]] = []
        lost: list[tuple[int, str]] = []
        differing: list[tuple[object, ...]] = []
        killed_with_work = 0
        mid_discovery = mid_extraction = 0
        reference_done = sum(1 for state, _ in reference.values() if state == "done")
        for trial, point in enumerate(points):
            db = tmp_path / f"trial-{trial}.db"
            web.clear_records()
            pid = server.run(db)
            deadline = time.monotonic() + 120
            while len(web.records()) < point and time.monotonic() < deadline:
                time.sleep(0.002)
            os.kill(pid, signal.SIGKILL)
            code = server.wait(pid)
            time.sleep(0.1)  # let the server log the requests the dead child left in flight
            at_kill = states_of(db)
            done_at_kill = {u for u, (state, _) in at_kill.items() if state == "done"}
            if code == -signal.SIGKILL and at_kill and len(done_at_kill) < reference_done:
                killed_with_work += 1
                mid_discovery += len(at_kill) < len(reference)
                mid_extraction += len(done_at_kill) > 0
            web.clear_records()
            assert server.wait(server.run(db)) == 0, f"trial {trial}: the rerun failed"
            asked = {(r.host, r.path) for r in web.records() if r.status != 0}
            repeated += [(trial, u) for u in done_at_kill if (web.host_name(u), path_of(u)) in asked]
            final = states_of(db)
            lost += [(trial, u) for u in at_kill if u not in final]
            differing += [
                (trial, u, final.get(u), reference.get(u), at_kill.get(u))
                for u in set(final) | set(reference) if final.get(u) != reference.get(u)
            ]
    finally:
        server.close()
    assert repeated == [], ("repeated", repeated[:5])
    assert lost == [], ("lost", lost[:5])
    assert differing == [], ("differing", differing[:5])
    # Control: the kills really landed inside harvests (not all before the first write or after the last).
    assert killed_with_work >= KILLS // 2 and mid_discovery >= 2 and mid_extraction >= 2, (
        killed_with_work, mid_discovery, mid_extraction)
