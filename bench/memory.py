"""Peak memory of ``harvester harvest``, end to end through the CLI, as the number of hosts grows (issue 22).

    .venv/bin/python bench/memory.py                      # 200 hosts x 300 pages, then 2,000 hosts x 30 pages
    .venv/bin/python bench/memory.py --hosts 40 --pages 300   # one quick run of that size
    .venv/bin/python bench/memory.py --trace 10           # also: the top allocation sites (tracemalloc, slower)

Each size gets its own test web (process mode: its memory is not counted) with 5 ms answers and default host
specs (sitemaps, feeds, listing pages), and a fresh SQLite file; ``harvester harvest`` runs as a subprocess with
the default settings and no Prefect server, so it runs in process through ``harvester.cli_runs``. Printed per
size: the harvester process's peak RSS (``ru_maxrss`` from ``wait4``, which also covers any child it waited for;
and ``VmHWM`` of the harvester process itself, sampled), wall time and pages fetched; with both default sizes,
the ratio of their peaks (the target: within 10 %, memory independent of hosts and pages).

``--trace N`` runs the CLI under tracemalloc (much slower) and prints its peak of traced memory and the N largest
allocation sites (by line, and the largest by traceback) still held at the end of the command.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harvester.testing import HostSpec, TestWeb

_TRACE_WRAPPER = r"""
import sys, tracemalloc
tracemalloc.start(int(sys.argv[1]))
out = sys.argv[2]
sys.argv = ["harvester", *sys.argv[3:]]
from harvester.cli import main
try:
    main()
finally:
    print(f"tracemalloc: peak {tracemalloc.get_traced_memory()[1] / 2**20:.1f} MB traced", flush=True)
    tracemalloc.take_snapshot().dump(out)
"""


def _vm_hwm_kib(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"VmHWM:\s+(\d+) kB", text)
    return int(m.group(1)) if m else None


def run_size(hosts: int, pages: int, latency: float, trace: int, extra: list[str]) -> dict[str, float]:
    specs = [HostSpec(f"h{i:04d}", pages=pages, latency_s=latency) for i in range(hosts)]
    t_web = time.perf_counter()
    with TestWeb(specs, seed=22, mode="process") as web, tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/memory.db"
        seeds_file = Path(tmp) / "seeds"
        seeds = list(web.seeds)
        seeds_file.write_text("\n".join(seeds))
        env = dict(os.environ, HARVESTER_DATABASE_URL=db)
        env.pop("PREFECT_API_URL", None)
        env["PREFECT_PROFILES_PATH"] = str(Path(tmp) / "no-profiles.toml")  # no server: run in process
        snap = Path(tmp) / "peak.snapshot"
        cli = ["harvest", "--db", db, *extra, *seeds]
        if trace:
            cmd = [sys.executable, "-c", _TRACE_WRAPPER, "12", str(snap), *cli]
        else:
            cmd = [str(Path(sys.executable).with_name("harvester")), *cli]
        print(f"{hosts} hosts x {pages} pages: test web up in {time.perf_counter() - t_web:.1f} s", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        hwm = [0]
        timeline: list[tuple[float, int]] = []

        def sample() -> None:
            last = 0.0
            while proc.poll() is None:
                v = _vm_hwm_kib(proc.pid)
                if v:
                    hwm[0] = max(hwm[0], v)
                    now = time.perf_counter() - t0
                    if now - last >= 5:
                        timeline.append((now, v))
                        last = now
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        assert proc.stdout is not None
        output = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        sampler.join()
        fetched = re.search(r"extract\W+state:done\W+(\d+)", output)
        if proc.returncode != 0:
            print(output[-3000:])
            raise SystemExit(f"harvester harvest exited {proc.returncode}")
        peak_mb = usage.ru_maxrss / 1024
        print(f"  peak RSS {peak_mb:.0f} MB (wait4 ru_maxrss; VmHWM sampled {hwm[0] / 1024:.0f} MB), wall "
              f"{wall:.1f} s, user+sys CPU {usage.ru_utime + usage.ru_stime:.1f} s"
              + (f", fetched {fetched.group(1)}" if fetched else ""), flush=True)
        print("  VmHWM over time: " + ", ".join(f"{t:.0f}s {v / 1024:.0f}MB" for t, v in timeline))
        if trace:
            print("  " + "".join(line for line in output.splitlines(keepends=True) if "tracemalloc" in line), end="")
        if os.environ.get("MEMORY_BENCH_OUTPUT"):
            print(output)
        if trace:
            _print_trace(snap, trace)
        return {"peak_mb": peak_mb, "wall_s": wall}


def _print_trace(path: Path, n: int) -> None:
    import tracemalloc

    snap = tracemalloc.Snapshot.load(str(path)).filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    )
    total = sum(s.size for s in snap.statistics("filename"))
    print(f"  tracemalloc at the end: {total / 2**20:.1f} MB traced; top {n} by line:")
    for stat in snap.statistics("lineno")[:n]:
        frame = stat.traceback[0]
        print(f"    {stat.size / 2**20:7.2f} MB {stat.count:>8} blocks  {frame.filename}:{frame.lineno}")
    print(f"  top {min(n, 5)} by traceback (innermost last, harvester frames):")
    for stat in snap.statistics("traceback")[: min(n, 5)]:
        frames = [f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback if "harvester" in f.filename]
        print(f"    {stat.size / 2**20:7.2f} MB  " + " < ".join(reversed(frames[-6:])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=None, help="one run of this many hosts (default: 200 and 2,000)")
    ap.add_argument("--pages", type=int, default=None, help="pages per host of that run (default 300)")
    ap.add_argument("--latency", type=float, default=0.005)
    ap.add_argument("--trace", type=int, default=0, metavar="N", help="print the N top allocation sites")
    ap.add_argument("extra", nargs="*", help="more harvest options, after --")
    args = ap.parse_args()
    if args.hosts is not None or args.pages is not None:
        run_size(args.hosts or 200, args.pages or 300, args.latency, args.trace, args.extra)
        return
    big = run_size(200, 300, args.latency, args.trace, args.extra)
    wide = run_size(2000, 30, args.latency, args.trace, args.extra)
    print(f"peak RSS: 200 x 300 {big['peak_mb']:.0f} MB, 2,000 x 30 {wide['peak_mb']:.0f} MB, ratio "
          f"{wide['peak_mb'] / big['peak_mb']:.2f}")


if __name__ == "__main__":
    main()
