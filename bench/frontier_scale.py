"""Cost against the frontier's size: 10k, 100k and 1M URL frontiers on SQLite and PostgreSQL (issue 32).

    .venv/bin/python bench/frontier_scale.py [--sizes 10000,100000,1000000] [--hosts 100] [--pages 2000]
                                             [--outlinks 5] [--repeat 3] [--no-postgres] [--no-sqlite]

PostgreSQL at 127.0.0.1:5432, or at the port in BENCH_PG_PORT (a server of its own, e.g. made with initdb and
started with ``pg_ctl``, which no other user restarts), in scratch databases created and dropped here.

Each frontier is built with bench/frontier.py's sitemap-shaped URLs over ``--hosts`` hosts, and a tenth of it (up
to 50,000 URLs) completed with a stored 8 KB page of its own first, in a harvest cycle, so ``status`` has a cycle
to count and ``export`` pages to read.
Then, in a fresh process, as one extraction worker does it, ``--pages`` URLs are taken in claims of
``store.claim_batch`` per host (``claim_hosts`` + ``claim``) and completed in batches of 64, each with its page and
``--outlinks`` links (one new URL of its host, the others URLs the frontier has: admission's upsert); ``--repeat``
such passes per size, the sizes alternating (``interleaved``), and the figures of each size's median pass.
Printed per size and database: claim latency p50/p99 (ms) and a claim's median CPU (the worker's: on SQLite with
the engine's, on PostgreSQL the client's only), extraction's store CPU per page (the worker's CPU over
the claims and completions: for SQLite that includes the database engine; for PostgreSQL the client, and beside
it the CPU of the server backends that served it, read from /proc), the wall per page, the worker process's peak
RSS, the database's size, and the wall time, CPU and peak RSS of ``harvester status`` and ``harvester export
--latest`` as a user runs them (a CLI's start-up included; export writes every tenth URL's page, so its time
grows with the pages it writes); then each figure at the largest size over the smallest. The machine is shared:
on a busy one the walls are mostly waiting for a core, and the CPU figures are the ones to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from harvester.frontier import FrontierStore
from harvester.records import ClaimedUrl, Completion, DiscoveredUrl, PageRecord, UrlKind, UrlState
from harvester.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from frontier import make_batches

PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
"""The PostgreSQL server on loopback (BENCH_PG_PORT: a server of the bench's own, which nobody else restarts)."""
PG_ADMIN = f"host=127.0.0.1 port={PG_PORT} user=postgres dbname=postgres connect_timeout=3"
BODY = b"<html><body>" + b"word " * 1600 + b"</body></html>"


@dataclass
class Figures:
    claim_p50_ms: float
    claim_p99_ms: float
    claim_cpu_ms: float
    cpu_ms_per_page: float
    server_ms_per_page: float
    wall_ms_per_page: float
    worker_rss_mb: float
    db_mb: float
    status_s: float
    status_cpu_s: float
    status_rss_mb: float
    export_s: float
    export_cpu_s: float
    export_rss_mb: float


def page_completion(url_id: int, url: str, now: datetime) -> Completion:
    """A 200 with a page of its own (its payload names its URL, so each is stored once, as a site's pages are)."""
    body = BODY.replace(b"<body>", b"<body>" + url.encode(), 1)
    digest = hashlib.sha256(url.encode()).hexdigest()
    page = PageRecord(final_url=url, status=200, content_type="text/html", content_hash=digest, body=body)
    return Completion(url_id=url_id, state=UrlState.DONE, fetched_at=now, status=200, content_hash=digest,
                      changed=True, page=page, bytes_read=len(body))


def outlinks(claimed: list[ClaimedUrl], i: int, count: int) -> list[DiscoveredUrl]:
    """``count`` links of the ``i``-th claimed page: one URL new to the frontier, the others known already (other
    pages of the same claim), as a page links mostly to pages its site has listed."""
    if count <= 0:
        return []
    url = claimed[i].url
    links = [DiscoveredUrl(f"{url}/related-{i}", UrlKind.DETAIL, "link", depth=2, score=0.1)]
    for k in range(1, count):
        links.append(DiscoveredUrl(claimed[(i + k) % len(claimed)].url, UrlKind.DETAIL, "link", depth=2, score=0.1))
    return links


def work(
    store: FrontierStore, owner: str, pages: int, batch: int, links: int
) -> tuple[list[float], list[float], int, float, float]:
    """Claim and complete ``pages`` URLs host by host; (claim latencies, claim CPU, pages, CPU s, wall s)."""
    latencies: list[float] = []
    claim_cpu: list[float] = []
    done = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while done < pages:
        hosts = store.claim_hosts(owner, limit=4, lease_s=300)
        if not hosts:
            break
        for host in hosts:
            started, cpu_started = time.perf_counter(), time.process_time()
            claimed = store.claim(owner, hosts=[host], per_host=batch, lease_s=300)
            latencies.append(time.perf_counter() - started)
            claim_cpu.append(time.process_time() - cpu_started)
            now = datetime.now(UTC)
            items: list[tuple[Completion, list[DiscoveredUrl]]] = [
                (page_completion(c.id, c.url, now), outlinks(claimed, i, links)) for i, c in enumerate(claimed)]
            for start in range(0, len(items), 64):
                store.complete_many(owner, items[start:start + 64])
            done += len(items)
        store.release_hosts(owner, hosts)
    return latencies, claim_cpu, done, time.process_time() - cpu0, time.perf_counter() - wall0


def worker(db_url: str, pages: int, links: int) -> None:
    """The measured part, in a process of its own (``--work``): its peak RSS is a worker's, not the builder's."""
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings) as store:
        server0 = server_cpu_s(db_url)
        latencies, claim_cpu, done, cpu, wall = work(store, "bench-worker", pages, settings.store.claim_batch, links)
        server = sum(server_cpu_s(db_url).values()) - sum(server0.values())
    print(json.dumps({"latencies": latencies, "claim_cpu": claim_cpu, "done": done, "cpu": cpu, "wall": wall,
                      "rss_mb": peak_rss_mb(), "server_cpu": server}))


def server_cpu_s(db_url: str) -> dict[int, float]:
    """PostgreSQL: backend pid -> CPU seconds of this database's client backends (this worker's pool: the
    database is its own), read from /proc (the server runs on this machine); empty for SQLite (in-process)."""
    if not db_url.startswith("postgresql"):
        return {}
    name = db_url.rsplit("/", 1)[1]
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend'", (name,))]
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return out


def peak_rss_mb() -> float:
    """This process's peak RSS since it started (``VmHWM``): ``ru_maxrss`` would carry over the peak of the
    (large) process that forked it, which exec does not reset."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_cli(args: list[str], db_url: str, cwd: Path) -> tuple[float, float, float]:
    """(wall s, peak RSS MB, CPU s) of one harvester command, as a user runs it (on a busy machine the wall is
    mostly waiting for a core: the CPU says what the command costs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    command = [str(Path(sys.executable).parent / "harvester"), *args, "--db", db_url]
    started = time.perf_counter()
    # Through a small launcher: a child forked from this (large) process reports this process's RSS as its peak.
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *command], env=env, cwd=cwd, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"harvester {' '.join(args)} failed: {done.stderr[-2000:]}")
    maxrss, cpu = done.stdout.split()[-2:]
    return time.perf_counter() - started, int(maxrss) / 1024, float(cpu)


LAUNCHER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
sys.exit(code)
"""


def fill(store: FrontierStore, n: int, hosts: int) -> None:
    """Build the frontier, then complete a tenth of it (up to 50,000 URLs), best first per host, with pages."""
    for batch in make_batches(n, hosts, 10_000):
        store.add_discovered(batch)
    owner = "bench-fill"
    # As a harvest: in a cycle, whose counts ``status`` shows after it ("Last cycle").
    profile = {"name": "frontier-scale"}
    cycle, _ = store.begin_cycle("harvest", profile=profile)
    run = store.start_run("extract", profile=profile)
    store.claim_hosts(owner, limit=hosts, lease_s=3_600)
    origins = store.host_origins()
    left = min(n // 10, 50_000)
    while left > 0:
        claimed = store.claim(owner, hosts=origins, per_host=min(500, max(1, left // hosts)), lease_s=3_600)
        if not claimed:
            break
        now = datetime.now(UTC)
        mine = claimed[:left]
        store.release(owner, [c.id for c in claimed[left:]])
        for start in range(0, len(mine), 500):
            store.complete_many(owner, [(page_completion(c.id, c.url, now), []) for c in mine[start:start + 500]],
                                run_id=run)
        left -= len(mine)
    store.release_owner(owner)
    store.finish_run(run, status="completed", counters={})
    store.finish_cycle(cycle, origins=origins)


def build(db_url: str, n: int, hosts: int) -> None:
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        fill(store, n, hosts)


def run_worker(db_url: str, pages: int, links: int) -> dict[str, Any]:
    """One measured extraction pass, in a fresh process (``worker``): its figures as it printed them."""
    done = subprocess.run([sys.executable, __file__, "--work", db_url, "--pages", str(pages), "--outlinks",
                           str(links)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the worker failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def summarize(db_url: str, db_mb: float, passes: list[dict[str, Any]], tmp: Path) -> Figures:
    """The median pass (by CPU per page) of the worker's, and ``status`` and ``export`` as a user runs them."""
    passes = sorted(passes, key=lambda r: r["cpu"] / max(1, r["done"]))
    result = passes[len(passes) // 2]
    status_s, status_rss, status_cpu = timed_cli(["status"], db_url, tmp)
    export_s, export_rss, export_cpu = timed_cli(["export", "--latest", "-o", str(tmp / "out.jsonl")], db_url, tmp)
    lat = sorted(result["latencies"])
    count = max(1, result["done"])
    return Figures(1000 * statistics.median(lat), 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                   1000 * statistics.median(result["claim_cpu"]),
                   1000 * result["cpu"] / count, 1000 * result["server_cpu"] / count,
                   1000 * result["wall"] / count, result["rss_mb"], db_mb, status_s,
                   status_cpu, status_rss, export_s, export_cpu, export_rss)


def interleaved(urls: dict[int, str], repeat: int, pages: int, links: int) -> dict[int, list[dict[str, Any]]]:
    """Every size's worker pass, sizes alternating, ``repeat`` times: on a shared machine the load moves by the
    minute, and sizes measured one after the other (a 1M frontier takes minutes to build) compared two loads, not
    two frontiers (1.21-1.66 × in four such runs where alternated passes gave 1.02-1.16 ×). Each pass takes
    ``pages`` more URLs of the same frontier: a few thousand of 10,000 or more change little."""
    passes: dict[int, list[dict[str, Any]]] = {n: [] for n in urls}
    for _ in range(repeat):
        for n, url in urls.items():
            passes[n].append(run_worker(url, pages, links))
    return passes


def sqlite_runs(sizes: list[int], args: argparse.Namespace, tmp: Path) -> dict[int, Figures]:
    urls = {n: f"sqlite:///{tmp / f'scale-{n}.db'}" for n in sizes}
    for n, url in urls.items():
        build(url, n, args.hosts)
    passes = interleaved(urls, args.repeat, args.pages, args.outlinks)
    return {n: summarize(url, sum(p.stat().st_size for p in tmp.glob(f"scale-{n}.db*")) / 1e6, passes[n], tmp)
            for n, url in urls.items()}


def pg_runs(sizes: list[int], args: argparse.Namespace, tmp: Path) -> dict[int, Figures]:
    names = {n: f"hv_scale_{uuid.uuid4().hex[:10]}" for n in sizes}
    try:
        urls = {}
        for n, name in names.items():
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            urls[n] = f"postgresql+psycopg://postgres@127.0.0.1:{PG_PORT}/{name}"
            build(urls[n], n, args.hosts)
        passes = interleaved(urls, args.repeat, args.pages, args.outlinks)
        out = {}
        for n, url in urls.items():
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                row = conn.execute("SELECT pg_database_size(%s)", (names[n],)).fetchone()
            out[n] = summarize(url, (int(row[0]) if row else 0) / 1e6, passes[n], tmp)
        return out
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            for name in names.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


COLUMNS = (("claim p50 ms", "claim_p50_ms"), ("claim p99 ms", "claim_p99_ms"), ("claim cpu ms", "claim_cpu_ms"),
           ("CPU ms/page", "cpu_ms_per_page"),
           ("server ms/pg", "server_ms_per_page"),
           ("wall ms/page", "wall_ms_per_page"), ("worker MB", "worker_rss_mb"), ("db MB", "db_mb"),
           ("status s", "status_s"), ("status cpu s", "status_cpu_s"), ("status MB", "status_rss_mb"),
           ("export s", "export_s"), ("export cpu s", "export_cpu_s"), ("export MB", "export_rss_mb"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=2_000)
    parser.add_argument("--outlinks", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="worker passes per size, sizes alternating (median)")
    parser.add_argument("--work", metavar="DB_URL", help=argparse.SUPPRESS)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    if args.work:
        worker(args.work, args.pages, args.outlinks)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    runners = [("sqlite", sqlite_runs)] * (not args.no_sqlite) + [("postgresql", pg_runs)] * (not args.no_postgres)
    print(f"{'db':<11}{'URLs':>9}" + "".join(f"{label:>14}" for label, _ in COLUMNS))
    for name, runner in runners:
        with tempfile.TemporaryDirectory() as tmp:
            results = runner(sizes, args, Path(tmp))
        for n in sizes:
            figures = results[n]
            print(f"{name:<11}{n:>9}" + "".join(f"{getattr(figures, key):>14.2f}" for _, key in COLUMNS), flush=True)
        small, large = results[sizes[0]], results[sizes[-1]]
        print(f"{name:<11}{'ratio':>9}" + "".join(
            f"{getattr(large, key) / getattr(small, key) if getattr(small, key) else float('nan'):>14.2f}"
            for _, key in COLUMNS) + f"   ({sizes[-1]:,} / {sizes[0]:,})", flush=True)

if __name__ == "__main__":
    main()
