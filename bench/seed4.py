"""Scenario ``seed4``: 4 hosts answering in 10, 10, 10 and 200 ms, a limit of 4 requests per host, a budget of
1,200 pages; the test web in process mode.

    .venv/bin/python bench/seed4.py [--designs all|name,name] [--budget 1200] [--repeat 1]

Published reference for this scenario: per-host queues 1.24 s; a global limit of 20: 3.87 s; a shared queue
with per-host semaphores: 16.28 s. Those three figures only agree with one reading, used here: every host
offers more pages than the budget needs (``POOL_PER_HOST``), the naive designs walk one shared URL list
interleaved across hosts (so their 1,200 pages are 300 per host), and a design stops once ``budget`` pages
are fetched. A per-host design therefore spends its budget where hosts are fast.

Every run prints its wall time, pages per host, the politeness limit of the fetches it actually made
(``harvester.testing.record.politeness_limit``: per host max(ceil(n/k)·latency, (n-1)·crawl-delay + latency),
with a robots.txt request a wave of its own since no page may start before its answer; the slowest host), the
ratio of the two, the most requests it had in flight on one host, CPU per page (client = this process, server =
the test web's process), and where ``wall - limit`` went along the critical host's chain of requests (start-up,
client turnaround, server lag, tail: see ``Excess``). ``--repeat`` also prints the ratio's min/median/max.
Figures are noisy on a shared 2-core machine.

Hook for other designs: ``DESIGNS[name] = async def design(scenario: Scenario) -> int`` (pages fetched with a
200). A module ``seed4_engine`` next to this file (or ``harvester.fetch.engine.seed4_design``) is picked up when
present: it either defines ``register(designs)`` or a coroutine function ``DESIGN`` (named by ``NAME``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import RequestRecord, max_in_flight, politeness_limit

LATENCIES = {"a": 0.010, "b": 0.010, "c": 0.010, "d": 0.200}
PER_HOST_LIMIT = 4
BUDGET = 1_200
POOL_PER_HOST = 600
"""Detail pages each host offers; more than the budget's per-host share, so a design can choose."""


def scenario_specs(pool: int = POOL_PER_HOST) -> list[HostSpec]:
    """The four hosts: every detail page allowed and small (5–8 KB), no traps, no robots rules."""
    return [
        HostSpec(name, pages=pool, latency_s=lat, disallowed_in_sitemap=0.0, page_bytes=(5_000, 8_000))
        for name, lat in LATENCIES.items()
    ]


@dataclass
class Scenario:
    """What a design is handed. ``urls`` interleaves the hosts round-robin; ``per_host`` keeps them apart."""

    web: TestWeb
    specs: list[HostSpec]
    urls: list[str]
    per_host: dict[str, list[str]]
    budget: int = BUDGET
    per_host_limit: int = PER_HOST_LIMIT
    user_agent: str = "seed4-bench/1.0"
    origins: dict[str, str] = field(default_factory=dict)


Design = Callable[[Scenario], Coroutine[Any, Any, int]]


async def global_limit_20(s: Scenario) -> int:
    """Naive (a): one httpx client, a global limit of 20 concurrent requests over the shared URL list.
    Ignores the per-host limit: the slow host gets up to 20 at once (see max in flight)."""
    todo = iter(s.urls[: s.budget])
    fetched = 0
    async with httpx.AsyncClient(
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=20), headers={"User-Agent": s.user_agent}
    ) as client:

        async def worker() -> None:
            nonlocal fetched
            for url in todo:
                r = await client.get(url)
                fetched += r.status_code == 200

        await asyncio.gather(*(worker() for _ in range(20)))
    return fetched


async def shared_queue_host_semaphores(s: Scenario) -> int:
    """Naive (b): 20 workers over one shared queue, each taking the next URL and waiting for its host's
    semaphore (4). A worker stuck behind the slow host holds its place in line: head-of-line blocking."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for u in s.urls[: s.budget]:
        queue.put_nowait(u)
    sems = {name: asyncio.Semaphore(s.per_host_limit) for name in s.per_host}
    fetched = 0
    async with httpx.AsyncClient(
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=20), headers={"User-Agent": s.user_agent}
    ) as client:

        async def worker() -> None:
            nonlocal fetched
            while True:
                try:
                    url = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                async with sems[s.web.host_name(url)]:
                    r = await client.get(url)
                fetched += r.status_code == 200

        await asyncio.gather(*(worker() for _ in range(20)))
    return fetched


async def per_host_queues_reference(s: Scenario) -> int:
    """Reference (not the harvester): a queue and ``per_host_limit`` workers per host, one small client per
    host, one shared budget; hosts never wait for each other."""
    dispatched = 0
    fetched = 0

    async def host_workers(name: str, urls: list[str]) -> None:
        todo = iter(urls)
        async with httpx.AsyncClient(
            limits=httpx.Limits(max_connections=s.per_host_limit), headers={"User-Agent": s.user_agent}
        ) as client:

            async def worker() -> None:
                nonlocal dispatched, fetched
                for url in todo:
                    if dispatched >= s.budget:
                        return
                    dispatched += 1
                    r = await client.get(url)
                    fetched += r.status_code == 200

            await asyncio.gather(*(worker() for _ in range(s.per_host_limit)))

    await asyncio.gather(*(host_workers(n, u) for n, u in s.per_host.items()))
    return fetched


async def harvester_cli(s: Scenario) -> int:
    """The harvester end to end as a user runs it: ``harvester harvest SEEDS --per-host 4`` (no Prefect server
    configured: in process) into a fresh SQLite file, discovery included, every page of every host (the CLI has no
    global budget: its politeness limit is read from the requests it made, like every design's). Its CPU is the
    child process's (``run_design`` adds it to the client's)."""
    seeds = [origin + "/" for origin in s.origins.values()]
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
        env["PREFECT_HOME"] = tmp  # no profile naming a server: the CLI runs in process
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "harvester"), "harvest", *seeds, "--db", f"sqlite:///{tmp}/h.db",
            "--per-host", str(s.per_host_limit), env=env, cwd=tmp,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"harvester harvest failed ({proc.returncode}): {err.decode()[-2000:]}")
    return sum(1 for r in s.web.records() if r.status == 200)


async def minimal_reference_crawler(s: Scenario) -> int:
    """``seed4_reference``: a plain aiohttp crawler from the same seeds (links by regex, robots by urllib), every
    page it reaches; the peer the CLI is compared with in the same run (issue 31)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import seed4_reference  # a script beside this one, not a package

    return await seed4_reference.crawl([o + "/" for o in s.origins.values()], per_host=s.per_host_limit,
                                       user_agent=s.user_agent)


DESIGNS: dict[str, Design] = {
    "harvester harvest (CLI)": harvester_cli,
    "minimal crawler (aiohttp, reference)": minimal_reference_crawler,
    "per-host queues (reference)": per_host_queues_reference,
    "global limit 20": global_limit_20,
    "shared queue + per-host semaphores": shared_queue_host_semaphores,
}
"""Designs to run, by display name. Other modules add theirs (see the module docstring)."""

PUBLISHED_S = {
    "per-host queues (reference)": 1.24,
    "global limit 20": 3.87,
    "shared queue + per-host semaphores": 16.28,
}


def load_external_designs() -> list[str]:
    """Pick up the harvester's design if its module exists; returns what was loaded (or why not)."""
    notes = []
    for modname in ("seed4_engine", "bench.seed4_engine", "harvester.fetch.engine"):
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        if hasattr(mod, "register"):
            mod.register(DESIGNS)
            notes.append(f"loaded designs from {modname}.register")
            break
        design = getattr(mod, "DESIGN", None) or getattr(mod, "seed4_design", None)
        if design is not None:
            DESIGNS[getattr(mod, "NAME", "harvester engine")] = design
            notes.append(f"loaded design from {modname}")
            break
    return notes


@dataclass
class Excess:
    """Where a run's wall time went beyond its politeness limit, along the critical host's chain of requests.

    The chain runs backwards from the request that ended last: each link is the latest-ending request of that
    host that ended before the link's start (the answer that let it start). So wall = start-up + the chain's
    request durations + the gaps between them + tail, and each duration is the host's latency plus what the
    server added (``server_ms``: its own scheduling lag, not the client's). ``waves`` is the chain length, the
    number of latencies actually waited one after another, to compare with the limit's wave count.
    """

    startup_ms: float  # the chain's first request (the critical host's first) minus the start of the design call
    turnaround_ms: float  # client: an answer's end to the next request's start, summed along the chain
    server_ms: float  # server: request durations beyond the host's latency, summed along the chain
    tail_ms: float  # last answer to the design call's return
    waves: int

    def __str__(self) -> str:
        return (f"start {self.startup_ms:.0f} + client turnaround {self.turnaround_ms:.0f} + server lag "
                f"{self.server_ms:.0f} + tail {self.tail_ms:.0f} ms over {self.waves} waves")


def excess(records: list[RequestRecord], host: str, latency_s: float, t0: float, t_end: float) -> Excess | None:
    """Break the critical host's chain down (see ``Excess``); None when that host made no request."""
    mine = sorted((r for r in records if r.host == host), key=lambda r: r.end)
    if not mine:
        return None
    link = mine[-1]
    turnaround = server = 0.0
    waves = 1
    while True:
        server += max(0.0, link.end - link.start - latency_s)
        before = [r for r in mine if r.end <= link.start]
        if not before:
            break
        prev = before[-1]
        turnaround += link.start - prev.end
        link = prev
        waves += 1
    return Excess(startup_ms=(link.start - t0) * 1e3, turnaround_ms=turnaround * 1e3, server_ms=server * 1e3,
                  tail_ms=(t_end - max(r.end for r in records)) * 1e3, waves=waves)


@dataclass
class RunResult:
    name: str
    wall_s: float
    pages: int
    per_host: dict[str, int]
    limit_s: float
    peak_in_flight: dict[str, int]
    client_cpu_s: float
    server_cpu_s: float
    excess: Excess | None = None

    @property
    def ratio(self) -> float:
        return self.wall_s / self.limit_s if self.limit_s else float("inf")


def _children_cpu_s() -> float:
    """CPU of this process's waited-for children (the CLI design's ``harvester`` process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_design(name: str, design: Design, *, budget: int, pool: int) -> RunResult:
    specs = scenario_specs(pool)
    with TestWeb(specs, seed=4, mode="process") as web:
        per_host = {s.name: web.truth[s.name].allowed_detail_urls()[:pool] for s in specs}
        urls = [u for group in zip(*per_host.values(), strict=False) for u in group]
        scenario = Scenario(web, specs, urls, per_host, budget=budget, origins={n: web.origin(n) for n in web.names})
        web.clear_records()
        server0, client0 = web.server_cpu_s() or 0.0, time.process_time() + _children_cpu_s()
        t0, t0_mono = time.perf_counter(), time.monotonic()  # records carry the server's monotonic times
        pages = asyncio.run(design(scenario))
        wall = time.perf_counter() - t0
        t_end_mono = time.monotonic()
        client_cpu = time.process_time() + _children_cpu_s() - client0
        server_cpu = (web.server_cpu_s() or 0.0) - server0
        records = web.records()
    counts = {n: sum(1 for r in records if r.host == n and r.status == 200) for n in LATENCIES}
    critical = max(LATENCIES, key=lambda n: politeness_limit([r for r in records if r.host == n], specs,
                                                              PER_HOST_LIMIT))
    return RunResult(
        name=name,
        wall_s=wall,
        pages=pages,
        per_host=counts,
        limit_s=politeness_limit(records, specs, PER_HOST_LIMIT),
        peak_in_flight={n: max_in_flight(records, n) for n in LATENCIES},
        client_cpu_s=client_cpu,
        server_cpu_s=server_cpu,
        excess=excess(records, critical, LATENCIES[critical], t0_mono, t_end_mono),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--designs", default="all", help="comma-separated names (substrings) or 'all'")
    ap.add_argument("--budget", type=int, default=BUDGET)
    ap.add_argument("--pool", type=int, default=POOL_PER_HOST)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for note in load_external_designs():
        print(note)
    chosen = [
        (n, d) for n, d in DESIGNS.items() if args.designs == "all" or any(p in n for p in args.designs.split(","))
    ]
    print(f"seed4: hosts {LATENCIES} s, limit {PER_HOST_LIMIT}/host, budget {args.budget} pages, process mode")
    header = f"{'design':<38}{'wall s':>8}{'limit s':>9}{'ratio':>7}{'pages a/b/c/d':>20}{'peak in flight':>16}"
    print(header + f"{'client CPU/page':>17}{'server CPU/page':>17}{'published':>11}")
    ratios: dict[str, list[float]] = {}
    for name, design in chosen:
        for _ in range(args.repeat):
            r = run_design(name, design, budget=args.budget, pool=args.pool)
            hosts = "/".join(str(r.per_host[n]) for n in LATENCIES)
            peaks = "/".join(str(r.peak_in_flight[n]) for n in LATENCIES)
            pub = PUBLISHED_S.get(name)
            print(
                f"{name:<38}{r.wall_s:>8.2f}{r.limit_s:>9.2f}{r.ratio:>7.2f}{hosts:>20}{peaks:>16}"
                f"{r.client_cpu_s / max(1, r.pages) * 1e3:>14.2f} ms{r.server_cpu_s / max(1, r.pages) * 1e3:>14.2f} ms"
                f"{(f'{pub:.2f} s' if pub else '-'):>11}"
            )
            if r.excess is not None:
                print(f"{'':<4}wall - limit = {(r.wall_s - r.limit_s) * 1e3:.0f} ms; critical chain: {r.excess}")
            ratios.setdefault(name, []).append(r.ratio)
    for name, values in ratios.items():
        if len(values) > 1:
            values.sort()
            print(f"{name}: ratio over {len(values)} runs: min {values[0]:.3f}, median "
                  f"{statistics.median(values):.3f}, max {values[-1]:.3f}")


if __name__ == "__main__":
    main()
