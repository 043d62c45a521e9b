"""Throughput and CPU per request of the test web itself (process mode), under a light raw-socket client.

    .venv/bin/python bench/testweb.py [--conns 16] [--seconds 4] [--hosts 4] [--latency 0]

Each connection is keep-alive and sends one request at a time (no pipelining), cycling over detail pages
(5–20 KB), small documents (robots.txt) and conditional requests answered 304. Prints req/s and the server
process's CPU time per request (from the child's own process_time), per workload.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

from harvester.testing import HostSpec, TestWeb

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

_CL = re.compile(rb"(?i)content-length: *(\d+)")


async def _connection(port: int, paths: list[bytes], deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    n = 0
    try:
        while time.monotonic() < deadline:
            writer.write(paths[i % len(paths)])
            i += 1
            head = await reader.readuntil(b"\r\n\r\n")
            m = _CL.search(head)
            if m:
                await reader.readexactly(int(m.group(1)))
            n += 1
    finally:
        counts.append(n)
        writer.close()


def _requests(web: TestWeb, name: str, workload: str) -> list[bytes]:
    t = web.truth[name]
    origin = web.origin(name)
    details = [u.removeprefix(origin) for u in t.allowed_detail_urls()[:50]]
    if workload == "detail":
        paths = details
    elif workload == "robots":
        paths = ["/robots.txt"]
    else:
        paths = details
    out = []
    for p in paths:
        extra = ""
        if workload == "304":
            extra = f'If-None-Match: W/"p{t.model.by_path[p].id}v{t.model.by_path[p].version}"\r\n'
        out.append(f"GET {p} HTTP/1.1\r\nHost: {origin[7:]}\r\nUser-Agent: bench\r\n{extra}\r\n".encode())
    return out


async def _run(web: TestWeb, workload: str, conns: int, seconds: float) -> tuple[int, float]:
    names = web.names
    deadline = time.monotonic() + seconds
    counts: list[int] = []
    tasks = []
    for i in range(conns):
        name = names[i % len(names)]
        port = int(web.origin(name).rsplit(":", 1)[1])
        tasks.append(_connection(port, _requests(web, name, workload), deadline, counts))
    t0 = time.monotonic()
    await asyncio.gather(*tasks)
    return sum(counts), time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--workloads", default="detail,robots,304")
    args = ap.parse_args()
    specs = [HostSpec(f"h{i}", pages=200, latency_s=args.latency) for i in range(args.hosts)]
    runner = uvloop.run if uvloop is not None else asyncio.run
    with TestWeb(specs, mode="process") as web:
        # Warm up: render every detail page once so the run measures serving, not first renders.
        runner(_run(web, "detail", args.hosts, 0.5))
        print(f"test web, process mode, {args.hosts} hosts, {args.conns} keep-alive connections, {args.seconds:g} s")
        print(f"{'workload':<10}{'requests':>10}{'req/s':>10}{'server CPU/req':>16}{'client CPU/req':>16}")
        for workload in args.workloads.split(","):
            web.clear_records()
            cpu0, ccpu0 = web.server_cpu_s() or 0.0, time.process_time()
            n, elapsed = runner(_run(web, workload, args.conns, args.seconds))
            cpu, ccpu = (web.server_cpu_s() or 0.0) - cpu0, time.process_time() - ccpu0
            recorded = len(web.records())
            assert recorded >= n, (recorded, n)
            print(f"{workload:<10}{n:>10}{n / elapsed:>10.0f}{cpu / n * 1e6:>13.1f} µs{ccpu / n * 1e6:>13.1f} µs")


if __name__ == "__main__":
    main()
