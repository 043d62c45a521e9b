"""Which httpx transport for harvester/http.py: client CPU per request and requests/s per transport.

    .venv/bin/python bench/transport.py [--requests 2000] [--repeat 3] [--latency 0.0] [--bytes 20000]

The test web in process mode (so the server does not share this process's GIL), 4 hosts, 4 connections per
host (one HostClient each, pool sized to the host's limit), 4 workers per host, 20 KB pages. Two layers are
measured per transport: the bare ``Fetcher.fetch`` (bounded fetch: deadline, caps, decoding) and the full
``PoliteClient.fetch`` (robots check, per-host gate, diagnostics). Client CPU is this process's CPU time over
the requests made; the server's CPU is shown beside it. Figures are noisy on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from harvester.fetch.engine import PoliteClient
from harvester.fetch.http import Fetcher
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb

HOSTS = 4
CONNECTIONS = 4
TRANSPORTS = ("aiohttp", "httpcore", "http2")


def specs(latency: float, page_bytes: int) -> list[HostSpec]:
    return [HostSpec(f"t{i}", pages=200, latency_s=latency, disallowed_in_sitemap=0.0,
                     page_bytes=(page_bytes, page_bytes + 1)) for i in range(HOSTS)]


async def run_fetcher(transport: str, urls: dict[str, list[str]], total: int) -> tuple[float, float, int]:
    settings = Settings().with_overrides(**{"http.transport": transport})
    fetcher = Fetcher(settings.http, user_agent="transport-bench/1.0", connections_for=lambda _o: CONNECTIONS,
                      seeds=[group[0] for group in urls.values()])
    per_host = total // HOSTS
    ok = 0

    async def worker(todo: list[str]) -> None:
        nonlocal ok
        while todo:
            r = await fetcher.fetch(todo.pop())
            ok += r.ok

    try:
        for group in urls.values():  # warm the pools: connections opened outside the measurement
            await asyncio.gather(*(fetcher.fetch(u) for u in group[:CONNECTIONS]))
        queues = {h: [group[i % len(group)] for i in range(per_host)] for h, group in urls.items()}
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(q) for q in queues.values() for _ in range(CONNECTIONS)))
        return time.perf_counter() - t0, time.process_time() - cpu0, ok
    finally:
        await fetcher.aclose()


async def run_client(transport: str, urls: dict[str, list[str]], total: int) -> tuple[float, float, int]:
    settings = Settings().with_overrides(**{"http.transport": transport})
    per_host = total // HOSTS
    ok = 0
    async with PoliteClient(settings, user_agent="transport-bench/1.0", per_host_limit=CONNECTIONS,
                            seeds=[group[0] for group in urls.values()]) as client:

        async def worker(todo: list[str]) -> None:
            nonlocal ok
            while todo:
                r = await client.fetch(todo.pop())
                ok += r.ok

        for group in urls.values():
            await asyncio.gather(*(client.fetch(u) for u in group[:CONNECTIONS]))
        queues = {h: [group[i % len(group)] for i in range(per_host)] for h, group in urls.items()}
        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(q) for q in queues.values() for _ in range(CONNECTIONS)))
        return time.perf_counter() - t0, time.process_time() - cpu0, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=2000, help="requests per run (split over the hosts)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.0, help="server latency per request, seconds")
    ap.add_argument("--bytes", type=int, default=20_000, help="page size")
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    args = ap.parse_args()
    with TestWeb(specs(args.latency, args.bytes), seed=5, mode="process") as web:
        urls = {n: web.truth[n].allowed_detail_urls() for n in web.names}
        print(f"transport bench: {HOSTS} hosts x {CONNECTIONS} connections, {args.requests} requests/run, "
              f"{args.bytes} B pages, latency {args.latency * 1e3:.0f} ms, process-mode test web, best of "
              f"{args.repeat} (median in brackets)")
        print(f"{'layer':<14}{'transport':<10}{'req/s':>16}{'client CPU/req':>22}{'server CPU/req':>16}{'ok':>7}")
        for layer, runner in (("Fetcher", run_fetcher), ("PoliteClient", run_client)):
            for transport in args.transports.split(","):
                rates, cpus, servers, oks = [], [], [], []
                for _ in range(args.repeat):
                    s0 = web.server_cpu_s() or 0.0
                    wall, cpu, ok = asyncio.run(runner(transport, urls, args.requests))
                    servers.append(((web.server_cpu_s() or 0.0) - s0) / args.requests)
                    rates.append(args.requests / wall)
                    cpus.append(cpu / args.requests)
                    oks.append(ok)
                print(f"{layer:<14}{transport:<10}{max(rates):>8.0f} [{statistics.median(rates):>5.0f}]"
                      f"{min(cpus) * 1e3:>11.3f} ms [{statistics.median(cpus) * 1e3:.3f}]"
                      f"{statistics.median(servers) * 1e3:>13.3f} ms{min(oks):>7}")
                web.clear_records()


if __name__ == "__main__":
    main()
