"""Cost against the frontier's size: 10k, 100k and 1M URL frontiers on SQLite and PostgreSQL (issue 32).

    .venv/bin/python bench/frontier_scale.py [--sizes 10000,100000,1000000] [--hosts 100] [--pages 2000]
                                             [--outlinks 5] [--no-postgres] [--no-sqlite]

Each frontier is built with bench/frontier.py's sitemap-shaped URLs over ``--hosts`` hosts, and a tenth of it (up
to 50,000 URLs) completed with a stored 8 KB page of its own first, so ``status`` and ``export`` have pages to read.
Then, in a fresh process, as one extraction worker does it, ``--pages`` URLs are taken in claims of
``store.claim_batch`` per host (``claim_hosts`` + ``claim``) and completed in batches of 64, each with its page and
``--outlinks`` links (one new URL of its host, the others URLs the frontier has: admission's upsert).
Printed per size and database: claim latency p50/p99 (ms), extraction's store CPU per page (the worker's CPU over
the claims and completions: for SQLite that includes the database engine, for PostgreSQL the client only; the
wall per page is shown beside it), the worker process's peak RSS, the database's size, and the wall time and
peak RSS of ``harvester status`` and ``harvester export --latest`` as a user runs them (a CLI's start-up
included); then each figure at the largest size over the smallest. The machine is shared: run it on a quiet one
for figures to quote.
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

import psycopg

from harvester.frontier import FrontierStore
from harvester.records import ClaimedUrl, Completion, DiscoveredUrl, PageRecord, UrlKind, UrlState
from harvester.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))
from frontier import make_batches

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
BODY = b"<html><body>" + b"word " * 1600 + b"</body></html>"


@dataclass
class Figures:
    claim_p50_ms: float
    claim_p99_ms: float
    cpu_ms_per_page: float
    wall_ms_per_page: float
    worker_rss_mb: float
    db_mb: float
    status_s: float
    status_rss_mb: float
    export_s: float
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


def work(store: FrontierStore, owner: str, pages: int, batch: int, links: int) -> tuple[list[float], int, float, float]:
    """Claim and complete ``pages`` URLs host by host; (claim latencies, pages, CPU s, wall s)."""
    latencies: list[float] = []
    done = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while done < pages:
        hosts = store.claim_hosts(owner, limit=4, lease_s=300)
        if not hosts:
            break
        for host in hosts:
            started = time.perf_counter()
            claimed = store.claim(owner, hosts=[host], per_host=batch, lease_s=300)
            latencies.append(time.perf_counter() - started)
            now = datetime.now(UTC)
            items: list[tuple[Completion, list[DiscoveredUrl]]] = [
                (page_completion(c.id, c.url, now), outlinks(claimed, i, links)) for i, c in enumerate(claimed)]
            for start in range(0, len(items), 64):
                store.complete_many(owner, items[start:start + 64])
            done += len(items)
        store.release_hosts(owner, hosts)
    return latencies, done, time.process_time() - cpu0, time.perf_counter() - wall0


def worker(db_url: str, pages: int, links: int) -> None:
    """The measured part, in a process of its own (``--work``): its peak RSS is a worker's, not the builder's."""
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings) as store:
        latencies, done, cpu, wall = work(store, "bench-worker", pages, settings.store.claim_batch, links)
    print(json.dumps({"latencies": latencies, "done": done, "cpu": cpu, "wall": wall, "rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak RSS since it started (``VmHWM``): ``ru_maxrss`` would carry over the peak of the
    (large) process that forked it, which exec does not reset."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_cli(args: list[str], db_url: str, cwd: Path) -> tuple[float, float]:
    """(wall s, peak RSS MB) of one harvester command, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    command = [str(Path(sys.executable).parent / "harvester"), *args, "--db", db_url]
    started = time.perf_counter()
    # Through a small launcher: a child forked from this (large) process reports this process's RSS as its peak.
    done = subprocess.run([sys.executable, "-c", LAUNCHER, *command], env=env, cwd=cwd, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"harvester {' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started, int(done.stdout.split()[-1]) / 1024


LAUNCHER = """
import resource, subprocess, sys
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(code)
"""


def fill(store: FrontierStore, n: int, hosts: int) -> None:
    """Build the frontier, then complete a tenth of it (up to 50,000 URLs), best first per host, with pages."""
    for batch in make_batches(n, hosts, 10_000):
        store.add_discovered(batch)
    owner = "bench-fill"
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
            store.complete_many(owner, [(page_completion(c.id, c.url, now), []) for c in mine[start:start + 500]])
        left -= len(mine)
    store.release_owner(owner)


def measure(db_url: str, size_of: object, n: int, hosts: int, pages: int, links: int, tmp: Path) -> Figures:
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        fill(store, n, hosts)
    done = subprocess.run([sys.executable, __file__, "--work", db_url, "--pages", str(pages), "--outlinks",
                           str(links)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the worker failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.splitlines()[-1])
    with FrontierStore.open(settings) as store:
        db_mb = size_of(store) / 1e6  # type: ignore[operator]
    status_s, status_rss = timed_cli(["status"], db_url, tmp)
    export_s, export_rss = timed_cli(["export", "--latest", "-o", str(tmp / "out.jsonl")], db_url, tmp)
    lat = sorted(result["latencies"])
    count = max(1, result["done"])
    return Figures(1000 * statistics.median(lat), 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
                   1000 * result["cpu"] / count, 1000 * result["wall"] / count, result["rss_mb"], db_mb, status_s,
                   status_rss, export_s, export_rss)


def sqlite_run(n: int, hosts: int, pages: int, links: int, tmp: Path) -> Figures:
    path = tmp / f"scale-{n}.db"
    return measure(f"sqlite:///{path}", lambda _s: sum(p.stat().st_size for p in tmp.glob(f"scale-{n}.db*")),
                   n, hosts, pages, links, tmp)


def pg_run(n: int, hosts: int, pages: int, links: int, tmp: Path) -> Figures:
    name = f"hv_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        def size(_store: object) -> int:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                row = conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()
            return int(row[0]) if row else 0

        return measure(f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", size, n, hosts, pages, links, tmp)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


COLUMNS = (("claim p50 ms", "claim_p50_ms"), ("claim p99 ms", "claim_p99_ms"), ("CPU ms/page", "cpu_ms_per_page"),
           ("wall ms/page", "wall_ms_per_page"), ("worker MB", "worker_rss_mb"), ("db MB", "db_mb"),
           ("status s", "status_s"), ("status MB", "status_rss_mb"), ("export s", "export_s"),
           ("export MB", "export_rss_mb"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pages", type=int, default=2_000)
    parser.add_argument("--outlinks", type=int, default=5)
    parser.add_argument("--work", metavar="DB_URL", help=argparse.SUPPRESS)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    if args.work:
        worker(args.work, args.pages, args.outlinks)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    runners = [("sqlite", sqlite_run)] * (not args.no_sqlite) + [("postgresql", pg_run)] * (not args.no_postgres)
    print(f"{'db':<11}{'URLs':>9}" + "".join(f"{label:>14}" for label, _ in COLUMNS))
    for name, runner in runners:
        results: dict[int, Figures] = {}
        for n in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                results[n] = runner(n, args.hosts, args.pages, args.outlinks, Path(tmp))
            figures = results[n]
            print(f"{name:<11}{n:>9}" + "".join(f"{getattr(figures, key):>14.2f}" for _, key in COLUMNS), flush=True)
        small, large = results[sizes[0]], results[sizes[-1]]
        print(f"{name:<11}{'ratio':>9}" + "".join(
            f"{getattr(large, key) / getattr(small, key) if getattr(small, key) else float('nan'):>14.2f}"
            for _, key in COLUMNS) + f"   ({sizes[-1]:,} / {sizes[0]:,})", flush=True)


if __name__ == "__main__":
    main()
