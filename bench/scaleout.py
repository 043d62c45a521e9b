"""Scale-out: the broad test web on one PostgreSQL frontier extracted by 1, 2 and 3 ``harvester extract``
processes side by side, repeated and interleaved (issue 32).

    .venv/bin/python bench/scaleout.py [--hosts 200] [--pages 30] [--latency 0.005] [--limit 4] [--procs 1,2,3]
        [--reps 1] [--db hv_scaleout] [--webs 1] [--spy DIR] [--count] [--one-session]

The test web (process mode, its own process; ``--webs`` processes, each serving a share of the hosts) serves
``--hosts`` hosts of ``--pages`` detail pages (as bench/broad.py). The web is discovered once into the database
``--db`` at 127.0.0.1:5432 (not measured); each run then extracts from a fresh copy of it (``CREATE DATABASE ..
TEMPLATE``), with N ``harvester extract`` processes started at once, each with its own User-Agent, as a user starts
them from separate terminals or services: each in a session of its own (``--one-session``: all in the bench's).
The process counts take turns within each repetition, and the order turns round from one repetition to the
next (1,2,3 then 2,3,1 ...), so a burst of other work on the machine falls on every N alike.

Printed per run: the load average when it started, wall (first start to last exit), detail pages per second,
CPU per page (user + system of the N processes, from ``wait4``), the test web's CPU per page (it competes for
the same cores), the largest number of requests in flight on one
host across the processes (the test web counts them; must stay <= the limit), pages fetched twice (200s for one
URL; must be 0), pages per process, and each process's timeline: its first request, its last one and its exit
(seconds from the start). Then per N: the median wall and the median of the per-repetition ratios wall(N) /
wall(1) (each ratio taken between runs of one repetition, minutes apart at most), with their range. The machine
is shared: single walls are noisy, the median of interleaved ratios much less so. The databases are dropped at
the end.

Sessions can matter on Linux with ``kernel.sched_autogroup_enabled`` (the header says): the scheduler shares the
CPU between sessions first, then between the threads of one session, so N processes started in one session (a
shell's ``&`` jobs) may share one session's CPU on a machine busy with other sessions' work, where independent
workers (services, containers, machines) get a share each. Measured here (200 hosts x 10 pages, 2 processes, load
16-28, one run each): 0.60 x one process's wall in one session, 0.74 in a session each; the load's swings hide
whatever difference there is, so neither is the cause of a ratio near 1 (``--one-session`` to compare).

``--count`` adds, per process, evidence that does not depend on the machine's load: its CPU per page, its
statements and round trips per page (psycopg wrapped by bench/dbcount/sitecustomize.py), the wall it spent inside
database calls and on which statements, how many hosts it served, and what its sessions were doing when sampled
(pg_stat_activity every 20 ms: running, waiting on a lock, on I/O, or idle in a transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from harvester import FrontierStore, phases
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import RequestRecord, TestWeb

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
    timelines: list[tuple[float, float, float]]
    """Per process: first request, last request, exit (seconds from the start)."""
    load: float
    web_cpu_s: float
    """CPU the test web spent serving the run: on a busy machine it competes with the extractors for the cores."""
    counted: list[str] = field(default_factory=list)
    """``--count``: lines of evidence per process."""


def children_cpu() -> dict[int, float]:
    """pid -> user + system CPU seconds of this process's live children (the test web; Linux /proc)."""
    out: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            out[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def url_of(name: str) -> str:
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def drop_database(name: str) -> None:
    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Webs:
    """The hosts served by ``--webs`` test web processes, split evenly: one Python process serving every host
    competes with the extractors for 2 cores and can be what binds, whatever the number of extractors."""

    def __init__(self, webs: Sequence[TestWeb]) -> None:
        self.webs = list(webs)
        self.seeds = [seed for web in self.webs for seed in web.seeds]

    def details(self) -> set[str]:
        return {url for web in self.webs for spec in web.specs for url in web.truth[spec.name].allowed_detail_urls()}

    def clear_records(self) -> None:
        for web in self.webs:
            web.clear_records()

    def records(self) -> list[RequestRecord]:
        return [r for web in self.webs for r in web.records()]


def discover_template(web: Webs, name: str, limit: int) -> None:
    """The web discovered once into ``name``: every run extracts from a copy of this."""
    drop_database(name)
    admin(f'CREATE DATABASE "{name}"')
    settings = Settings.load(database_url=url_of(name))
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=limit)
    with FrontierStore.open(settings, upgrade=True) as store:
        asyncio.run(phases.discover(store, settings, profile))


class Sampler:
    """What the run's database sessions are doing, sampled from pg_stat_activity every ``every_s``: per process
    (by the pid in the session's application_name), counts of (state, wait event)."""

    def __init__(self, database: str, every_s: float = 0.02) -> None:
        self.database = database
        self.every_s = every_s
        self.samples = 0
        self.seen: dict[int, Counter[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            while not self._stop.wait(self.every_s):
                rows = conn.execute(
                    "SELECT application_name, state, wait_event_type, wait_event FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()", (self.database,)).fetchall()
                self.samples += 1
                for app, state, wtype, wevent in rows:
                    found = re.search(r":(\d+)$", app or "")
                    if found is None or state in (None, "idle"):
                        continue
                    what = state if wtype is None else f"{state}:{wtype}:{wevent}"
                    self.seen.setdefault(int(found.group(1)), Counter())[what] += 1


def read_sched(sched: dict[int, dict[int, tuple[float, float]]]) -> None:
    """Per process and thread: seconds on a CPU and seconds runnable but waiting for one (/proc's schedstat), the
    latest reading kept (a thread that ends keeps its last)."""
    for pid, threads in sched.items():
        for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                run_ns, wait_ns, _ = stat.read_text().split()
            except (OSError, ValueError):
                continue
            threads[int(stat.parent.name)] = (int(run_ns) / 1e9, int(wait_ns) / 1e9)


def counted_lines(count_dir: Path, pids: list[int], pages: list[int], hosts: list[int],
                  sampler: Sampler | None, sched: dict[int, dict[int, tuple[float, float]]]) -> list[str]:
    """Per process: CPU, statements and round trips per page, database wall, the top statements by wall, what
    its sessions were doing when sampled."""
    lines = []
    for pid, done, served in zip(pids, pages, hosts, strict=True):
        path = count_dir / f"{pid}.json"
        if not path.is_file():
            lines.append(f"  pid {pid}: no counts written")
            continue
        c = json.loads(path.read_text())
        per = max(1, done)
        ends = sum(c["ends"].values())
        statements = sum(c["statements"].values())
        # psycopg sends BEGIN before a transaction's first statement; a pipeline is one round trip for its statements
        trips = statements - c["piped"] + c["pipelines"] + 2 * ends
        db_s = sum(c["seconds"].values())
        top = sorted(c["seconds"].items(), key=lambda kv: -kv[1])[:5]
        lines.append(f"  pid {pid}: {done} pages, {served} hosts, CPU {1000 * c['cpu_s'] / per:.2f} ms/page, "
                     f"{statements / per:.2f} statements/page, {trips / per:.2f} round trips/page, "
                     f"{ends / per:.2f} transactions/page, in database calls {db_s:.1f} s of {c['wall_s']:.1f} s")
        threads = sched.get(pid, {})
        main_run, main_wait = threads.get(pid, (0.0, 0.0))
        lines.append(f"      on a CPU / waiting for one (schedstat): main thread {main_run:.1f} / {main_wait:.1f} s,"
                     f" all {len(threads)} threads {sum(r for r, _ in threads.values()):.1f} /"
                     f" {sum(w for _, w in threads.values()):.1f} s")
        for name, secs in top:
            lines.append(f"      {secs:7.2f} s {c['statements'].get(name, c['ends'].get(name.lower(), 0)):6}x"
                         f"  {name}")
        if sampler is not None and sampler.samples:
            seen = sampler.seen.get(pid, Counter())
            what = ", ".join(f"{k} {v / sampler.samples:.2f}" for k, v in seen.most_common(6))
            lines.append(f"      sessions (mean count over {sampler.samples} samples): {what}")
    return lines


def autogroup() -> str:
    """Whether the scheduler groups CPU shares by session (Linux ``sched_autogroup_enabled``)."""
    try:
        return "on" if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1" else "off"
    except OSError:
        return "unknown"


def start_extract(command: list[str], env: dict[str, str], cwd: Path, *,
                  one_session: bool = False) -> subprocess.Popen[bytes]:
    """One extraction process as independent workers run, in a session of its own (``one_session``: in the
    bench's): where the kernel shares the CPU by session (``autogroup``), N processes of one session may share one
    session's share (see the module's docstring)."""
    return subprocess.Popen(  # our own console script, no shell
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
        start_new_session=not one_session)


def run(web: Webs, n: int, limit: int, details: set[str], tmp: Path, template: str, tag: str,
        spy: Path | None = None, count: bool = False, one_session: bool = False) -> Outcome:
    name = f"{template}_{tag}"
    drop_database(name)
    admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    url = url_of(name)
    try:
        web.clear_records()
        agents = [f"scaleout-bench-{i}/1.0 (+http://127.0.0.1/contact)" for i in range(n)]
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
        load = os.getloadavg()[0]
        web_before = children_cpu()
        count_dir = tmp / f"count-{tag}"
        extra: dict[str, str] = {}
        if count:
            count_dir.mkdir()
            extra = {"BENCH_DBCOUNT_DIR": str(count_dir), "PYTHONPATH": str(Path(__file__).parent / "dbcount")}
        sampler = Sampler(name).__enter__() if count else None
        started = time.monotonic()
        procs: list[subprocess.Popen[bytes]] = []
        for agent in agents:
            env = {**base, "HARVESTER_HTTP__USER_AGENT": agent, "PREFECT_HOME": str(tmp / "prefect"), **extra}
            command = [str(Path(sys.executable).parent / "harvester"), "extract", *web.seeds, "--db", url,
                       "--per-host", str(limit)]
            if spy is not None:  # sampled with idle frames: where each process's wall time goes, waits included
                out = spy / f"{tag}-{len(procs)}.txt"
                command = [str(Path(sys.executable).parent / "py-spy"), "record", "--idle", "--threads", "-r", "50",
                           "--format", "raw", "-o", str(out), "--", *command]
            procs.append(start_extract(command, env, tmp, one_session=one_session))
        cpu = 0.0
        exits: dict[int, float] = {}
        failed = False
        sched: dict[int, dict[int, tuple[float, float]]] = {proc.pid: {} for proc in procs}
        polls = 0
        while len(exits) < len(procs):  # polled: each exit time is known within 20 ms, whatever the order
            time.sleep(0.02)
            polls += 1
            if count and polls % 5 == 0:
                read_sched(sched)
            for proc in procs:
                if proc.pid in exits:
                    continue
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    exits[pid] = time.monotonic() - started
                    cpu += usage.ru_utime + usage.ru_stime
                    failed = failed or os.waitstatus_to_exitcode(status) != 0
        if sampler is not None:
            sampler.__exit__()
        if failed:
            raise SystemExit(f"an extract process of the {n}-process run failed")
        wall = max(exits.values())
        web_after = children_cpu()
        web_cpu = sum(web_after[pid] - cpu_s for pid, cpu_s in web_before.items() if pid in web_after)
        records = [r for r in web.records() if r.url in details]
        ok = [r for r in records if r.status == 200]
        counts = Counter(r.url for r in ok)
        by_agent = Counter(r.user_agent for r in ok)
        timelines = []
        for agent, proc in zip(agents, procs, strict=True):
            starts = [r.start - started for r in web.records() if r.user_agent == agent]
            timelines.append((min(starts, default=0.0), max(starts, default=0.0), exits[proc.pid]))
        counted: list[str] = []
        if count:
            hosts_of = {a: len({r.url.split("/")[2] for r in ok if r.user_agent == a}) for a in agents}
            counted = counted_lines(count_dir, [p.pid for p in procs], [by_agent[a] for a in agents],
                                    [hosts_of[a] for a in agents], sampler, sched)
        return Outcome(n, len(counts), wall, cpu, max((r.in_flight for r in records), default=0),
                       sum(1 for c in counts.values() if c > 1), [by_agent[a] for a in agents], timelines, load,
                       web_cpu, counted)
    finally:
        drop_database(name)


def line(o: Outcome, one: float | None) -> str:
    timeline = " ".join(f"{a:.1f}/{b:.1f}/{c:.1f}" for a, b, c in o.timelines)
    ratio = f"{o.wall_s / one:>6.2f}" if one else f"{'':>6}"
    return (f"{o.procs:>5}{o.load:>6.1f}{o.pages:>7}{o.wall_s:>8.1f}{o.pages / o.wall_s:>9.1f}"
            f"{1000 * o.cpu_s / max(1, o.pages):>9.2f}{1000 * o.web_cpu_s / max(1, o.pages):>9.2f}"
            f"{o.max_in_flight:>10}{o.twice:>6}{ratio}  {o.per_process}"
            f"  {timeline}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--pages", type=int, default=30)
    parser.add_argument("--latency", type=float, default=0.005)
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--procs", default="1,2,3")
    parser.add_argument("--reps", type=int, default=1, help="repetitions, interleaved (default 1)")
    parser.add_argument("--db", default="hv_scaleout", help="the template database's name (copies get a suffix)")
    parser.add_argument("--webs", type=int, default=1, help="test web processes the hosts are split across")
    parser.add_argument("--count", action="store_true", help="per process: statements, round trips and CPU per "
                        "page, database wall, sessions sampled (see above)")
    parser.add_argument("--one-session", action="store_true", help="start the extract processes in the bench's "
                        "session (one CPU share between them where the kernel groups by session), not one each")
    parser.add_argument("--spy", type=Path, help="a directory: each process runs under py-spy (idle frames "
                        "included), its stacks written there; slows the runs, for finding waits, not for figures")
    args = parser.parse_args()
    counts = [int(p) for p in args.procs.split(",")]
    if not counts or min(counts) < 1 or args.reps < 1:
        raise SystemExit(f"--procs {args.procs!r} / --reps {args.reps}: process counts and repetitions must be >= 1")
    specs = broad_specs(args.hosts, args.pages, args.latency)
    runs: list[list[Outcome]] = []
    header = (f"{'procs':>5}{'load':>6}{'pages':>7}{'wall s':>8}{'pages/s':>9}{'CPU ms/p':>9}{'web ms/p':>9}"
              f"{'in flight':>10}"
              f"{'twice':>6}{'ratio':>6}  per process  first/last request/exit s per process")
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        web = Webs([stack.enter_context(TestWeb(specs[i::args.webs], seed=9, mode="process"))
                    for i in range(args.webs)])
        details = web.details()
        try:
            discover_template(web, args.db, args.limit)
            print(f"{args.hosts} hosts x {args.pages} pages, latency {args.latency} s, limit {args.limit}, "
                  f"{args.webs} test web process(es), autogroup {autogroup()}, "
                  f"{'one session' if args.one_session else 'a session per process'}, "
                  f"{args.reps} repetition(s) of {counts} interleaved\n{header}", flush=True)
            for rep in range(args.reps):
                order = counts[rep % len(counts):] + counts[:rep % len(counts)]
                done = {n: run(web, n, args.limit, details, Path(tmp), args.db, f"r{rep}n{n}", args.spy,
                               args.count, args.one_session) for n in order}
                runs.append([done[n] for n in counts])
                for n in order:
                    print(line(done[n], done[counts[0]].wall_s if n != counts[0] else None), flush=True)
                    for counted in done[n].counted:
                        print(counted, flush=True)
        finally:
            drop_database(args.db)
    print(f"\nper process count over {args.reps} repetition(s); ratio: wall(N) / wall({counts[0]}) of one repetition")
    print(f"{'procs':>5}{'median wall s':>15}{'median ratio':>14}{'ratio range':>16}{'max in flight':>15}{'twice':>7}")
    for i, n in enumerate(counts):
        walls = [rep[i].wall_s for rep in runs]
        ratios = [rep[i].wall_s / rep[0].wall_s for rep in runs]
        print(f"{n:>5}{statistics.median(walls):>15.1f}{statistics.median(ratios):>14.2f}"
              f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>16}{max(rep[i].max_in_flight for rep in runs):>15}"
              f"{sum(rep[i].twice for rep in runs):>7}")
    loads = [o.load for rep in runs for o in rep]
    print(f"load average (1 min) at the runs' starts: {min(loads):.1f}-{max(loads):.1f}, "
          f"median {statistics.median(loads):.1f}; {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
