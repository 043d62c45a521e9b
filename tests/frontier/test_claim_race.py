"""Two real processes racing to claim on PostgreSQL get disjoint URLs, and together all of them."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

WORKER = r"""
import json, sys, time
from harvester.frontier import FrontierStore
from harvester.settings import Settings
url, owner, start, hosts = sys.argv[1], sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
got = []
with FrontierStore.open(Settings(database_url=url)) as store:
    time.sleep(max(0.0, start - time.time()))
    empty = 0
    while empty < 3:
        batch = store.claim(owner, hosts=hosts, per_host=3, lease_s=600)
        got += [c.id for c in batch]
        empty = empty + 1 if not batch else 0
print(json.dumps(got))
"""


def _race(url: str, hosts: list[str]) -> list[list[int]]:
    start = time.time() + 2.0  # both processes are connected and waiting before the first claim
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, url, owner, str(start), json.dumps(hosts)],
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
def test_two_processes_racing_claim_get_disjoint_urls_and_together_all(pg_url: str) -> None:
    hosts = [f"https://r{h}.test" for h in range(4)]
    now = datetime.now(UTC)
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered(
            [DiscoveredUrl(f"{h}/p{i}", UrlKind.DETAIL, "seed", score=float(i % 5)) for h in hosts for i in range(150)],
            now=now,
        )
        all_ids = {store.url_info(u)["id"] for u in store.url_states()}  # type: ignore[index]
    a, b = _race(pg_url, hosts)
    assert len(a) == len(set(a))
    assert len(b) == len(set(b))
    assert not set(a) & set(b)
    assert set(a) | set(b) == all_ids
    assert a  # both really took part
    assert b
