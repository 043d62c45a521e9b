"""The scale-out kill test, N times in a row, with busy-loop processes beside each run (issue 32).

    .venv/bin/python bench/kill_repeat.py [--runs 30] [--busy 2] [--test NODE_ID]

Each run starts ``--busy`` processes that spin (``while :; do :; done``, as a machine with other work on it), runs
the test alone in pytest, and stops the busy loops at once when it ends: they live only for the test, so a shared
machine is loaded only while this script measures. Prints one line per run and then ``PASSES/RUNS``; exits 1 on
any failure, with the failing run's last lines. Needs PostgreSQL at 127.0.0.1:5432, as the test does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

TEST = ("tests/phases/test_scaleout.py::"
        "test_three_extraction_processes_finish_a_30_host_harvest_though_one_is_killed")
ROOT = Path(__file__).resolve().parent.parent


def one_run(test: str, busy: int) -> tuple[bool, float, str]:
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(busy)]
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rf", test],
                              cwd=ROOT, capture_output=True, text=True, check=False)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return done.returncode == 0, time.monotonic() - started, done.stdout[-3000:] + done.stderr[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--busy", type=int, default=2, help="busy-loop processes beside each run")
    parser.add_argument("--test", default=TEST)
    args = parser.parse_args()
    passes = 0
    failed = ""
    for n in range(1, args.runs + 1):
        ok, wall, tail = one_run(args.test, args.busy)
        passes += ok
        print(f"run {n:2d}: {'pass' if ok else 'FAIL'} in {wall:5.1f} s", flush=True)
        if not ok:
            print(tail, flush=True)
            failed = failed or tail
    print(f"{passes}/{args.runs} passed, {args.busy} busy loops beside each run")
    if failed:
        print("first failure:\n" + failed)
    return 0 if passes == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
