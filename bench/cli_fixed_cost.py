"""The fixed cost of a harvest run from the command line: seconds before the first request and after the last
answer, on a small test web (4 hosts × 40 pages, process mode), side by side in one run:

- ``cli``: ``harvester harvest SEEDS`` with no Prefect server configured: the library in this process
  (``harvester.cli_runs``);
- ``flows``: the same harvest through ``harvest_flow`` on Prefect's temporary server, which is what
  ``harvester harvest`` ran before without a server (issue 22 measured ~10 s of fixed cost there).

    .venv/bin/python bench/cli_fixed_cost.py [--repeat 3]

Target (issue 22): ``cli`` fixed cost ≤ 1 s. Each arm has its own database and PREFECT_HOME.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harvester.cli import PREFECT_QUIET_DEFAULTS
from harvester.testing import HostSpec, TestWeb

BIN = Path(sys.executable).parent
FLOWS = ("import asyncio, sys; from harvester.flows.harvest import harvest_flow; "
         "from harvester.site_profile import SiteProfile; "
         "asyncio.run(harvest_flow(SiteProfile.build(seeds=tuple(sys.argv[1:]))))")


def arm(name: str, seeds: list[str], web: TestWeb, work: Path) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_API_URL"))}
    env |= {"HARVESTER_DATABASE_URL": f"sqlite:///{work / name}.db", "PREFECT_HOME": str(work / f"{name}-home"),
            **PREFECT_QUIET_DEFAULTS}
    subprocess.run([str(BIN / "harvester"), "db", "upgrade"], env=env, check=True, capture_output=True)
    web.clear_records()
    command = [str(BIN / "harvester"), "harvest", *seeds] if name == "cli" else [sys.executable, "-c", FLOWS, *seeds]
    started = time.monotonic()  # the test web stamps requests with this system-wide clock
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    ended = time.monotonic()
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-2000:]}")
    records = web.records()
    return min(r.start for r in records) - started, ended - max(r.end for r in records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"cli": [], "flows": []}
    with TestWeb([HostSpec(name, pages=40) for name in "abcd"], seed=5, mode="process") as web:
        for round_ in range(args.repeat):
            for name in results:
                with tempfile.TemporaryDirectory() as work:
                    before, after = arm(name, web.seeds, web, Path(work))
                results[name].append(before + after)
                print(f"round {round_ + 1} {name:>5}: before the first request {before:.2f} s, after the last "
                      f"answer {after:.2f} s, fixed cost {before + after:.2f} s", flush=True)
    cli, flows = statistics.median(results["cli"]), statistics.median(results["flows"])
    print(f"median fixed cost: cli {cli:.2f} s, flows on the temporary server {flows:.2f} s, ratio {cli / flows:.2f}"
          f"; target cli ≤ 1 s: {'met' if cli <= 1.0 else 'NOT met'}")


if __name__ == "__main__":
    main()
