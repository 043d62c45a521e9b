"""Prefect's cost on a real harvest: the flows on a STARTED Prefect server vs the bare library on one scenario.

    .venv/bin/python bench/prefect_overhead.py [--scenario 10k|seed4|both] [--repeat 1] [--hosts 20 --pages 500]

``10k``: 20 hosts x 500 detail pages, 5 ms latency, test web in process mode. ``seed4``: bench/seed4.py's four
hosts (10, 10, 10, 200 ms), 4 requests per host, 300 pages per host (1,200 pages). Each run gets a fresh SQLite
frontier; the bare run is ``phases.discover`` + ``phases.extract`` (one worker), the flow run ``harvest_flow``
(workers=1) on the same settings. Runs alternate bare/flow so drift on a shared machine hits both.

Printed per run: wall time, pages, start time (call to the first request the test web saw; the flow's includes
creating the flow run and the discover subflow), and the overhead share (flow - bare) / flow. Targets: overhead
<= 5% of wall time, flow start <= 5 s. Figures are noisy on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seed4 import PER_HOST_LIMIT, scenario_specs

from harvester.cli import PREFECT_QUIET_DEFAULTS
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import duplicates, politeness_limit

QUIET = {**PREFECT_QUIET_DEFAULTS, "PREFECT_UI_ENABLED": "false"}
"""The CLI's quiet Prefect (one home: harvester.cli), and no UI for a server nobody looks at."""


def start_prefect_server(home: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    """``prefect server start`` on a free loopback port; returns the process, API URL and seconds to healthy."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, **QUIET, "PREFECT_HOME": str(home), "PREFECT_API_URL": api}
    t0 = time.perf_counter()
    proc = subprocess.Popen(  # our own venv's prefect, no shell
        [str(Path(sys.executable).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=(home / "server.log").open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    while time.perf_counter() - t0 < 120:
        try:
            with urllib.request.urlopen(f"{api}/health", timeout=1):
                return proc, api, time.perf_counter() - t0
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"prefect server not healthy:\n{(home / 'server.log').read_text()[-2000:]}")


@dataclass
class Run:
    kind: str
    wall_s: float
    start_s: float
    pages: int
    duplicates: int
    limit_s: float


def run_once(kind: str, web: TestWeb, specs: list[HostSpec], workdir: Path, n: int, extra: dict[str, Any]) -> Run:
    from harvester import phases
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile

    url = f"sqlite:///{workdir / f'{kind}-{n}.db'}"
    overrides = {"database_url": url, **extra}
    settings = Settings.load(database_url=url).with_overrides(**overrides)
    with FrontierStore.open(settings, upgrade=True):
        pass
    profile = SiteProfile.build(seeds=tuple(web.seeds), name=f"bench-{kind}")
    web.clear_records()

    async def bare() -> None:
        with FrontierStore.open(settings) as store:
            await phases.discover(store, settings, profile)
            await phases.extract(store, settings, profile)

    async def flow() -> None:
        from harvester.flows.harvest import harvest_flow

        state = await harvest_flow(profile, workers=1, overrides=overrides, return_state=True)
        if not state.is_completed():
            raise SystemExit(f"flow run ended {state}")

    t0 = time.monotonic()
    asyncio.run(bare() if kind == "bare" else flow())
    wall = time.monotonic() - t0
    records = web.records()
    first = min((r.start for r in records), default=t0)
    details = {u for s in specs for u in web.truth[s.name].allowed_detail_urls()}
    pages = sum(1 for r in records if r.status == 200 and r.url in details)
    limit = politeness_limit([r for r in records if r.url in details], specs, extra["politeness.max_per_host_limit"])
    return Run(kind, wall, first - t0, pages, len(duplicates(records)), limit)


def scenario(name: str, args: argparse.Namespace, workdir: Path) -> None:
    if name == "10k":
        specs = [HostSpec(f"h{i:02d}", pages=args.pages, latency_s=0.005, disallowed_in_sitemap=0.0)
                 for i in range(args.hosts)]
        extra: dict[str, Any] = {"politeness.per_host_start": 2, "politeness.max_per_host_limit": 4}
    else:
        specs = scenario_specs(300)
        extra = {"politeness.per_host_start": PER_HOST_LIMIT, "politeness.max_per_host_limit": PER_HOST_LIMIT}
    runs: list[Run] = []
    with TestWeb(specs, seed=4, mode="process") as web:
        print(f"\n== {name}: {len(specs)} hosts, {sum(s.pages for s in specs)} detail pages, process-mode test web")
        print(f"{'run':<6}{'wall s':>9}{'start s':>9}{'pages':>8}{'dups':>6}{'limit s':>9}{'wall/limit':>12}")
        for n in range(args.repeat):
            for kind in (("bare", "flow") if n % 2 == 0 else ("flow", "bare")):
                r = run_once(kind, web, specs, workdir, n, extra)
                runs.append(r)
                print(f"{r.kind:<6}{r.wall_s:>9.2f}{r.start_s:>9.2f}{r.pages:>8}{r.duplicates:>6}{r.limit_s:>9.2f}"
                      f"{r.wall_s / r.limit_s if r.limit_s else float('nan'):>12.2f}")
    bare = statistics.median(r.wall_s for r in runs if r.kind == "bare")
    flow = statistics.median(r.wall_s for r in runs if r.kind == "flow")
    start_bare = statistics.median(r.start_s for r in runs if r.kind == "bare")
    start_flow = statistics.median(r.start_s for r in runs if r.kind == "flow")
    share = (flow - bare) / flow
    print(f"{name}: median wall bare {bare:.2f} s, flow {flow:.2f} s -> Prefect overhead {share * 100:+.1f}% of the "
          f"flow's wall time (target <= 5%)")
    print(f"{name}: start to first request bare {start_bare:.2f} s, flow {start_flow:.2f} s (flow start target <= 5 s)")
    flows = [r for r in runs if r.kind == "flow"]
    if len(flows) > 1:
        # The first flow call of a process is cold (Prefect engine, client, flow/deployment objects registered).
        warm = statistics.median(r.wall_s for r in flows[1:])
        print(f"{name}: first (cold) flow start {flows[0].start_s:.2f} s; warm flows: start "
              f"{statistics.median(r.start_s for r in flows[1:]):.2f} s, overhead {(warm - bare) / warm * 100:+.1f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=("10k", "seed4", "both"), default="both")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--pages", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="prefect-overhead-") as tmp:
        workdir = Path(tmp)
        (workdir / "home").mkdir()
        proc, api, ready_s = start_prefect_server(workdir / "home")
        # Before prefect is imported: this process talks to the started server, quietly.
        os.environ.update({**QUIET, "PREFECT_API_URL": api, "PREFECT_HOME": str(workdir / "home")})
        print(f"prefect server started at {api} in {ready_s:.1f} s (not counted)")
        try:
            for name in (("10k", "seed4") if args.scenario == "both" else (args.scenario,)):
                scenario(name, args, workdir)
        finally:
            from prefect.events.worker import EventsWorker
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=10)
            EventsWorker.drain_all(timeout=10)
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
