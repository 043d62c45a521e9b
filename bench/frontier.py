"""Frontier benchmark: bulk-add N realistic URLs over ~100 hosts, then repeated claims of 1,000 URLs.

    python bench/frontier.py [--urls 1000000] [--hosts 100] [--claims 30] [--no-postgres] [--no-sqlite]

Prints, for SQLite and PostgreSQL side by side: URLs/s added, bytes per URL on disk, claim latency (median,
p95). PostgreSQL runs in a scratch database at 127.0.0.1:5432 that is created and dropped here.
Targets (issue 2): >= 100k URLs/s added to SQLite, <= 300 bytes per URL, claim of 1,000 <= 5 ms. On SQLite
the same claim is also run on a bare sqlite3 connection (``floor_of``): what the database and driver alone cost.
The machine is shared: CPU-seconds of this process are printed too (for SQLite that includes the database
engine, which runs in-process; for PostgreSQL only the client side), as a figure less sensitive to load.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
WORDS = (
    "market", "city", "council", "school", "energy", "water", "climate", "health", "review", "guide", "local",
    "world", "sport", "team", "season", "report", "price", "home", "garden", "travel", "music", "film", "science",
    "space", "data", "policy", "court", "river", "road", "bridge", "festival",
)
SECTIONS = ("news", "sport", "business", "culture", "opinion", "tech", "science", "travel", "products", "blog")


def make_batches(n: int, hosts: int, batch_size: int, seed: int = 7) -> list[list[DiscoveredUrl]]:
    """Sitemap-shaped batches: one host per batch (as a sitemap file is), paths like real article URLs."""
    rng = random.Random(seed)
    origins = [f"https://www.{rng.choice(WORDS)}-{h:03d}.example.com" for h in range(hosts)]
    base = datetime(2024, 1, 1, tzinfo=UTC)
    per_host = n // hosts
    batches: list[list[DiscoveredUrl]] = []
    made = 0
    for h, origin in enumerate(origins):
        count = per_host if h < hosts - 1 else n - made
        source = f"sitemap:{origin}/sitemap-{h}.xml"
        batch: list[DiscoveredUrl] = []
        for i in range(count):
            day = rng.randrange(700)
            slug = "-".join(rng.sample(WORDS, rng.randint(2, 5)))
            when = base + timedelta(days=day, seconds=rng.randrange(86_400))
            url = f"{origin}/{rng.choice(SECTIONS)}/{when:%Y/%m/%d}/{slug}-{100_000 + i}"
            batch.append(DiscoveredUrl(url, UrlKind.DETAIL, source, depth=1, score=rng.random(), lastmod=when))
            if len(batch) == batch_size:
                batches.append(batch)
                batch = []
        if batch:
            batches.append(batch)
        made += count
    rng.shuffle(batches)
    return batches


def run(label: str, settings: Settings, batches: list[list[DiscoveredUrl]], claims: int,
        size_of: Any) -> dict[str, Any]:
    with FrontierStore.open(settings, upgrade=True) as store:
        base_size = size_of(store)
        n = sum(len(b) for b in batches)
        gc.collect()
        gc.disable()
        started, cpu_started = time.perf_counter(), time.process_time()
        for batch in batches:
            store.add_discovered(batch)
        add_s = time.perf_counter() - started
        add_cpu_s = time.process_time() - cpu_started
        gc.enable()
        # Re-adding a tenth of the URLs (a daily rediscovery of known URLs).
        again = batches[: max(1, len(batches) // 10)]
        started = time.perf_counter()
        for batch in again:
            store.add_discovered(batch)
        readd_rate = sum(len(b) for b in again) / (time.perf_counter() - started)
        store_size = size_of(store) - base_size
        hosts = sorted(store.stats().hosts)
        per_host = max(1, 1000 // len(hosts))
        latencies = []
        cpu_latencies = []
        floor_latencies: list[float] = []
        floor_n = 0
        got = 0
        for _ in range(claims):
            t, c = time.perf_counter(), time.process_time()
            claimed = store.claim("bench", hosts=hosts, per_host=per_host, lease_s=600)
            latencies.append((time.perf_counter() - t) * 1000)
            cpu_latencies.append((time.process_time() - c) * 1000)
            got = len(claimed)
        # Then as many bare claims, on their own connection: interleaved, two connections writing in turn would
        # each drop its page cache at every transaction and slow both by half.
        with floor_of(store, per_host) as floor:
            while floor is not None and len(floor_latencies) < claims:
                t = time.perf_counter()
                floor_n = floor()
                floor_latencies.append((time.perf_counter() - t) * 1000)
        latencies.sort()
    return {
        "label": label,
        "urls": n,
        "add_rate": n / add_s,
        "add_cpu_rate": n / add_cpu_s,
        "readd_rate": readd_rate,
        "bytes_per_url": store_size / n,
        "claim_n": got,
        "claim_median_ms": statistics.median(latencies),
        "claim_p95_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))],
        "claim_cpu_median_ms": statistics.median(cpu_latencies),
        "floor_median_ms": statistics.median(floor_latencies) if floor_latencies else None,
        "floor_n": floor_n,
    }


@contextlib.contextmanager
def floor_of(store: FrontierStore, per_host: int) -> Iterator[Callable[[], int] | None]:
    """SQLite only: the least a claim of per-URL leases costs here, with none of the harvester's code.

    The same statements a claim must run (the head of each host's queue range joined to the URL rows, those
    entries deleted from the queue, one lease row each, commit) on a bare sqlite3 connection with the store's
    pragmas, reading only what a fetch cannot do without (id, host, path, the two validators) and building no
    records. What the harvester's claim costs above this is its own; this much is the database and the driver.
    """
    if store.dialect != "sqlite":
        yield None
        return
    raw = store.db.engine.raw_connection()  # the store's pragmas, its file; the bench measures below the API
    conn = raw.driver_connection
    assert conn is not None
    host_ids = [row[0] for row in conn.execute("SELECT id FROM hosts ORDER BY origin")]
    branch = (
        "SELECT * FROM (SELECT q.host_id, q.rank, q.url_id, u.path, u.etag, u.last_modified FROM queue q"
        " JOIN urls u ON u.id = q.url_id WHERE q.host_id = ? AND q.kind = 'detail'"
        " AND (q.due_at IS NULL OR q.due_at <= ?) ORDER BY q.rank, q.url_id LIMIT ?)"
    )
    candidates = " UNION ALL ".join([branch] * len(host_ids))
    dequeue = ("DELETE FROM queue WHERE host_id = ? AND kind = 'detail' AND (rank, url_id) <= (?, ?)"
               " AND (due_at IS NULL OR due_at <= ?)")
    lease = "INSERT INTO leases (url_id, host_id, owner, lease_until) VALUES " + ", ".join(["(?, ?, ?, ?)"] * 100)

    def claim() -> int:
        now = int(time.time() * 1e6)
        conn.execute("BEGIN IMMEDIATE")
        params: list[Any] = []
        for host_id in host_ids:
            params += (host_id, now, per_host)
        rows = conn.execute(candidates, params).fetchall()
        last = {host_id: (rank, url_id) for host_id, rank, url_id, *_ in rows}
        conn.executemany(dequeue, [(host_id, *edge, now) for host_id, edge in last.items()])
        flat: list[Any] = []
        for host_id, _, url_id, *_ in rows:
            flat += (url_id, host_id, "floor", now + 600_000_000)
        for start in range(0, len(flat) - len(flat) % 400, 400):
            conn.execute(lease, flat[start : start + 400])
        tail = flat[len(flat) - len(flat) % 400 :]
        conn.executemany("INSERT INTO leases (url_id, host_id, owner, lease_until) VALUES (?, ?, ?, ?)",
                         [tail[i : i + 4] for i in range(0, len(tail), 4)])
        conn.execute("COMMIT")
        return len(rows)

    try:
        conn.execute("DELETE FROM leases")  # the store's claims began on an empty lease table too
        yield claim
    finally:
        raw.close()


def sqlite_size(path: Path) -> Any:
    def size(store: FrontierStore) -> int:
        raw = store.db.engine.raw_connection()  # the bench measures the file, not the API
        try:
            raw.cursor().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            raw.close()
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))

    return size


def pg_size(name: str) -> Any:
    def size(_store: FrontierStore) -> int:
        with psycopg.connect(PG_ADMIN) as conn:
            conn.execute("CHECKPOINT")
            row = conn.execute("SELECT pg_database_size(%s)", (name,)).fetchone()
        assert row is not None
        return int(row[0])

    return size


def _brief(result: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--claims", type=int, default=30)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true")
    args = parser.parse_args()
    base = Settings()
    print(f"generating {args.urls:,} URLs over {args.hosts} hosts, batches of {base.discovery.batch_size} ...")
    batches = make_batches(args.urls, args.hosts, base.discovery.batch_size)
    lengths = [len(u.url) for b in batches for u in b]
    print(f"mean URL length {statistics.mean(lengths):.1f} chars")
    results = []
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"
            settings = base.with_overrides(database_url=f"sqlite:///{path}")
            results.append(run("SQLite", settings, batches, args.claims, sqlite_size(path)))
            print("done:", _brief(results[-1]), flush=True)
    if not args.no_postgres:
        name = f"hv_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        try:
            settings = base.with_overrides(database_url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}")
            results.append(run("PostgreSQL", settings, batches, args.claims, pg_size(name)))
            print("done:", _brief(results[-1]), flush=True)
        finally:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("URLs added", lambda r: f"{r['urls']:,}"),
        ("added URLs/s (target >= 100k SQLite)", lambda r: f"{r['add_rate']:,.0f}"),
        ("  per CPU-second of this process", lambda r: f"{r['add_cpu_rate']:,.0f}"),
        ("re-added known URLs/s", lambda r: f"{r['readd_rate']:,.0f}"),
        ("bytes per URL on disk (target <= 300)", lambda r: f"{r['bytes_per_url']:.0f}"),
        ("URLs per claim", lambda r: f"{r['claim_n']}"),
        ("claim median ms (target <= 5)", lambda r: f"{r['claim_median_ms']:.2f}"),
        ("claim p95 ms", lambda r: f"{r['claim_p95_ms']:.2f}"),
        ("claim median CPU ms of this process", lambda r: f"{r['claim_cpu_median_ms']:.2f}"),
        ("  floor: bare sqlite3, same claim, ms", lambda r: "-" if r["floor_median_ms"] is None
         else f"{r['floor_median_ms']:.2f}"),
        ("  URLs per floor claim", lambda r: "-" if r["floor_median_ms"] is None else f"{r['floor_n']}"),
    ]
    print()
    print(f"{'':40}" + "".join(f"{r['label']:>14}" for r in results))
    for title, fmt in rows:
        print(f"{title:40}" + "".join(f"{fmt(r):>14}" for r in results))


if __name__ == "__main__":
    main()
