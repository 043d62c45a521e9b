"""Scenario ``broad``: 200 hosts × 300 pages, 5 ms latency, per-host limits from the settings, the harvester engine.

    .venv/bin/python bench/broad.py [--hosts 200] [--pages 300] [--latency 0.005] [--active 64] [--repeat 1]

The test web runs in process mode; the client is ``PoliteClient`` + ``run_hosts`` over an in-memory HostWork
(no database: this measures the engine, not the frontier). Printed side by side:

- wall time, and client CPU per page (this process's CPU time / pages) against the 1 ms budget;
- the politeness limit (``harvester.testing.record.politeness_limit`` over the requests made, with the
  per-host ceiling ``politeness.max_per_host_limit``: every host in parallel, ceil(n/k) waves of the latency);
- the turns limit: with at most ``--active`` hosts at once, ceil(hosts/active) turns of the per-host limit;
- the client CPU bound: the client CPU the run needed, i.e. the wall time of a client that never waits;
- the machine bound: client + server CPU over the cores they share (the test web runs on the same cores).
  The limit that can be met is the largest of these; its ratio says how much time was lost waiting.
  At 5 ms and 2-4 per host, 200 hosts ask for ~80k requests/s: far beyond one Python process, so on this
  machine the run is CPU-bound and the politeness limit alone is not reachable.
Figures are noisy on a shared 2-core machine (the server process competes for the same cores).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import Job, run_hosts
from harvester.records import FetchResult
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import max_in_flight, politeness_limit


class ListWork:
    """HostWork over per-host URL lists: claims pop, results are counted."""

    def __init__(self, per_host: dict[str, list[str]]) -> None:
        self.todo = {origin: list(reversed(urls)) for origin, urls in per_host.items()}
        self.outcomes: Counter[str] = Counter()

    async def hosts(self) -> Sequence[str]:
        return [h for h, urls in self.todo.items() if urls]

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        urls = self.todo[host]
        return [Job(url=urls.pop(), host=host) for _ in range(min(n, len(urls)))]

    async def done(self, job: Job, result: FetchResult) -> None:
        self.outcomes[result.error_class.value if result.error_class else str(result.status)] += 1


def specs(hosts: int, pages: int, latency: float) -> list[HostSpec]:
    return [HostSpec(f"h{i:03d}", pages=pages, latency_s=latency, disallowed_in_sitemap=0.0, sitemap_only=0.0,
                     feed_only=0.0, listing_only=0.0, page_bytes=(5_000, 8_000), sitemap_children=1)
            for i in range(hosts)]


async def crawl(settings: Settings, per_host: dict[str, list[str]], active: int) -> tuple[ListWork, dict[str, Any]]:
    work = ListWork(per_host)
    async with PoliteClient(settings, seeds=[urls[0] for urls in per_host.values() if urls]) as client:
        await run_hosts(client, work, max_active_hosts=active)
        diag = client.diagnostics()
    return work, diag


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--latency", type=float, default=0.005)
    ap.add_argument("--active", type=int, default=None, help="max active hosts (default: settings)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio", help="the client's event loop")
    args = ap.parse_args()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    settings = Settings()
    active = args.active or settings.politeness.max_active_hosts
    ceiling = settings.politeness.max_per_host_limit
    host_specs = specs(args.hosts, args.pages, args.latency)
    t_start = time.perf_counter()
    with TestWeb(host_specs, seed=9, mode="process") as web:
        print(f"broad: {args.hosts} hosts x {args.pages} pages, latency {args.latency * 1e3:.0f} ms, per-host limit "
              f"{settings.politeness.per_host_limit} (AIMD ceiling {ceiling}), {active} active hosts, transport "
              f"{settings.http.transport}, {args.loop} loop; "
              f"test web up in {time.perf_counter() - t_start:.1f} s (process mode)")
        per_host = {web.origin(s.name): web.truth[s.name].allowed_detail_urls()[: args.pages] for s in host_specs}
        pages = sum(len(v) for v in per_host.values())
        for _ in range(args.repeat):
            web.clear_records()
            server0, cpu0, t0 = web.server_cpu_s() or 0.0, time.process_time(), time.perf_counter()
            work, diag = asyncio.run(crawl(settings, per_host, active))
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
            server = (web.server_cpu_s() or 0.0) - server0
            records = web.records()
            limit = politeness_limit(records, host_specs, ceiling)
            per_host_s = max(math.ceil((args.pages + 1) / ceiling) * args.latency, 0.0)
            turns = math.ceil(args.hosts / active) * per_host_s
            cores = len(os.sched_getaffinity(0))
            machine = (cpu + server) / cores  # client and server share these cores (and other work does too)
            bound = max(limit, turns, cpu, machine)
            peak = max(max_in_flight(records, s.name) for s in host_specs)
            over = sum(1 for s in host_specs if max_in_flight(records, s.name) > ceiling)
            print(f"  pages {pages}, requests {len(records)}, outcomes {dict(work.outcomes)}")
            print(f"  wall {wall:.2f} s | politeness limit {limit:.2f} s (ratio {wall / limit:.2f}) | turns limit "
                  f"{turns:.2f} s (ratio {wall / turns:.2f}) | client CPU bound {cpu:.2f} s (ratio {wall / cpu:.2f}) | "
                  f"machine bound (client+server CPU)/{cores} cores {machine:.2f} s | largest {bound:.2f} s "
                  f"(ratio {wall / bound:.2f})")
            print(f"  client CPU {cpu / pages * 1e3:.3f} ms/page (budget 1 ms) | server CPU "
                  f"{server / max(1, len(records)) * 1e3:.3f} ms/request | {pages / wall:.0f} pages/s | peak in "
                  f"flight on one host {peak} (hosts over the ceiling: {over}) | hosts diagnosed {len(diag)}")


if __name__ == "__main__":
    main()
