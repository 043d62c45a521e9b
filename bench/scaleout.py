"""Scale-out: the broad test web on one PostgreSQL frontier extracted by 1, 2 and 3 ``harvester extract``
processes, one run each, side by side (issue 32).

    .venv/bin/python bench/scaleout.py [--hosts 200] [--pages 30] [--latency 0.005] [--limit 4] [--procs 1,2,3]

The test web (process mode, its own process) serves ``--hosts`` hosts of ``--pages`` detail pages (as
bench/broad.py). For each process count: a fresh PostgreSQL database at 127.0.0.1:5432, discovered once in this
process (not measured), then N ``harvester extract`` processes started at once, each with its own User-Agent, as a
user starts them. Printed per N: wall (first start to last exit), detail pages per second, CPU per page (user +
system of the N processes, from ``wait4``), the largest number of requests in flight on one host across the
processes (the test web counts them; must stay <= the limit), pages fetched twice (200s for one URL; must be 0),
pages per process; then wall(N) / wall(1). The machine is shared: figures are noisy, the ratios of one run less so.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from harvester import FrontierStore, phases
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import TestWeb

sys.path.insert(0, str(Path(__file__).parent))
from broad import specs as broad_specs

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"


@dataclass
class Outcome:
    procs: int
    pages: int
    wall_s: float
    cpu_s: float
    max_in_flight: int
    twice: int
    per_process: list[int]


def fresh_database() -> str:
    name = f"hv_scaleout_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(web: TestWeb, n: int, limit: int, details: set[str], tmp: Path) -> Outcome:
    name = fresh_database()
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        settings = Settings.load(database_url=url)
        profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=limit)
        with FrontierStore.open(settings, upgrade=True) as store:
            asyncio.run(phases.discover(store, settings, profile))
        web.clear_records()
        agents = [f"scaleout-bench-{i}/1.0 (+http://127.0.0.1/contact)" for i in range(n)]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
        started = time.monotonic()
        procs = []
        for agent in agents:
            env = {**base, "HARVESTER_HTTP__USER_AGENT": agent, "PREFECT_HOME": str(tmp / "prefect")}
            procs.append(subprocess.Popen(  # our own console script, no shell
                [str(Path(sys.executable).parent / "harvester"), "extract", *web.seeds, "--db", url,
                 "--per-host", str(limit)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp))
        cpu = 0.0
        for proc in procs:
            _, status, usage = os.wait4(proc.pid, 0)
            cpu += usage.ru_utime + usage.ru_stime
            if os.waitstatus_to_exitcode(status) != 0:
                raise SystemExit(f"an extract process of the {n}-process run failed")
        wall = time.monotonic() - started
        records = [r for r in web.records() if r.url in details]
        ok = [r for r in records if r.status == 200]
        counts = Counter(r.url for r in ok)
        by_agent = Counter(r.user_agent for r in ok)
        return Outcome(n, len(counts), wall, cpu, max((r.in_flight for r in records), default=0),
                       sum(1 for c in counts.values() if c > 1), [by_agent[a] for a in agents])
    finally:
        drop_database(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--latency", type=float, default=0.005)
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--procs", default="1,2,3")
    args = parser.parse_args()
    specs = broad_specs(args.hosts, args.pages, args.latency)
    outcomes: list[Outcome] = []
    with TestWeb(specs, seed=9, mode="process") as web, tempfile.TemporaryDirectory() as tmp:
        details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}
        for n in (int(p) for p in args.procs.split(",")):
            outcomes.append(run(web, n, args.limit, details, Path(tmp)))
            o = outcomes[-1]
            print(f"{n} process(es): {o.pages}/{len(details)} pages in {o.wall_s:.1f} s", flush=True)
    print(f"\n{args.hosts} hosts x {args.pages} pages, latency {args.latency} s, limit {args.limit}")
    print(f"{'procs':>5}{'pages':>8}{'wall s':>9}{'pages/s':>9}{'CPU ms/page':>13}{'max in flight':>15}"
          f"{'twice':>7}  per process")
    one = outcomes[0].wall_s
    for o in outcomes:
        print(f"{o.procs:>5}{o.pages:>8}{o.wall_s:>9.1f}{o.pages / o.wall_s:>9.1f}"
              f"{1000 * o.cpu_s / max(1, o.pages):>13.2f}{o.max_in_flight:>15}{o.twice:>7}  {o.per_process}"
              f"   wall/1 process {o.wall_s / one:.2f}")


if __name__ == "__main__":
    main()
