"""Two real processes racing to claim on PostgreSQL get disjoint URLs, and together all of them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

WORKER = r"""
import json, pathlib, sys, time
from harvester.frontier import FrontierStore
from harvester.settings import Settings
url, owner, gate, hosts = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), json.loads(sys.argv[4])
got = []
with FrontierStore.open(Settings(database_url=url)) as store:
    (gate / owner).touch()
    deadline = time.monotonic() + 60
    while len(list(gate.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.001)
    empty = 0
    while empty < 3:
        batch = store.claim(owner, hosts=hosts, per_host=3, lease_s=600)
        got += [c.id for c in batch]
        empty = empty + 1 if not batch else 0
print(json.dumps(got))
"""


def _race(url: str, hosts: list[str], gate: Path) -> list[list[int]]:
    """Each process connects, says so with a file in ``gate`` and claims once both have: a start time fixed in
    advance let a process slow to import (a loaded machine) find every URL already taken."""
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, url, owner, str(gate), json.dumps(hosts)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for owner in ("racer-a", "racer-b")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    return results


@pytest.mark.postgres
def test_two_processes_racing_claim_get_disjoint_urls_and_together_all(pg_url: str, tmp_path: Path) -> None:
    hosts = [f"https://r{h}.test" for h in range(4)]
    now = datetime.now(UTC)
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered(
            [DiscoveredUrl(f"{h}/p{i}", UrlKind.DETAIL, "seed", score=float(i % 5)) for h in hosts for i in range(150)],
            now=now,
        )
        all_ids = {store.url_info(u).id for u in store.url_states()}  # type: ignore[union-attr]
    a, b = _race(pg_url, hosts, tmp_path)
    assert len(a) == len(set(a))
    assert len(b) == len(set(b))
    assert not set(a) & set(b)
    assert set(a) | set(b) == all_ids
    assert a  # both really took part
    assert b
