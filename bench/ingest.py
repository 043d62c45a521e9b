"""End-to-end sitemap ingestion: fetch from a loopback server, parse, canonicalize, filter, score, upsert.

    .venv/bin/python bench/ingest.py                    # 20 x 50,000 URLs and 5 x 50,000, side by side
    .venv/bin/python bench/ingest.py --files 4 --urls 10000

Runs ``phases.discover`` (sitemaps only) against a host whose robots.txt names a sitemap index of N urlsets,
served by a tiny asyncio server in a child process (bodies generated once, so the server is not measured).
Each ingest runs in its own subprocess so its memory is its own: memory independent of the number of sitemaps
shows the entries are streamed in batches rather than held. Two memory figures: peak RSS (ru_maxrss, taken before
the final count query, and the writer child's) includes file pages SQLite maps of the growing database; peak
private memory (RssAnon, sampled every 10 ms) is what the process itself holds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _bodies(port: int, files: int, urls: int) -> dict[str, bytes]:
    origin = f"http://127.0.0.1:{port}"
    out = {"/robots.txt": f"User-agent: *\nDisallow: /private/\nSitemap: {origin}/sitemap_index.xml\n".encode()}
    index = ['<?xml version="1.0" encoding="UTF-8"?>', '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    for f in range(files):
        index.append(f"<sitemap><loc>{origin}/sitemaps/{f}.xml</loc><lastmod>2026-11-30</lastmod></sitemap>")
        lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
        for i in range(urls):
            n = f * urls + i
            lines.append(
                f"<url><loc>{origin}/articles/{n % 97}/story-about-things-{n}?utm_source=feed</loc>"
                f"<lastmod>2026-11-{1 + n % 28:02d}</lastmod><priority>0.{n % 10}</priority></url>"
            )
        lines.append("</urlset>")
        out[f"/sitemaps/{f}.xml"] = "\n".join(lines).encode()
    index.append("</sitemapindex>")
    out["/sitemap_index.xml"] = "\n".join(index).encode()
    return out


def _serve(sock: socket.socket, files: int, urls: int, ready: multiprocessing.synchronize.Event) -> None:
    bodies = _bodies(sock.getsockname()[1], files, urls)

    class Conn(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while b"\r\n\r\n" in self.buf:
                head, self.buf = self.buf.split(b"\r\n\r\n", 1)
                path = head.split(b" ", 2)[1].decode()
                body = bodies.get(path)
                status = b"200 OK" if body is not None else b"404 Not Found"
                body = body if body is not None else b"not found"
                self.t.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\nContent-Length: "  # type: ignore[attr-defined]
                             + str(len(body)).encode() + b"\r\n\r\n" + body)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Conn, sock=sock)
        ready.set()
        await server.serve_forever()

    asyncio.run(main())


class AnonPeak:
    """The highest RssAnon (private, non-file memory) of this process, sampled by a thread every 10 ms."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now_kib() -> int:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
        return 0

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak_kib = max(self.peak_kib, self.now_kib())

    def __enter__(self) -> AnonPeak:
        self.peak_kib = self.now_kib()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kib = max(self.peak_kib, self.now_kib())


def ingest(origin: str, db_path: str, heap: bool = False) -> dict[str, float]:
    from harvester import phases
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile

    settings = Settings.load(database_url=f"sqlite:///{db_path}").with_overrides(
        **{"max_pages_per_host": 10_000_000, "discovery.batch_size": 10_000}
    )
    profile = SiteProfile.build(seeds=(origin + "/",), use_feeds=False, use_listings=False)
    import tracemalloc

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if heap:
        tracemalloc.start()
    started = time.perf_counter()
    with FrontierStore.open(settings, upgrade=True) as store:
        with AnonPeak() as anon:
            result = asyncio.run(phases.discover(store, settings, profile))
        wall = time.perf_counter() - started
        # Read before the count: counting maps the whole database file into this process.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        total = store.stats().total
    writer_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    heap_peak = tracemalloc.get_traced_memory()[1] / 2**20 if heap else float("nan")
    return {"urls": total, "wall_s": wall, "urls_per_s": total / wall, "peak_rss_mib": peak / 1024,
            "growth_mib": (peak - base_rss) / 1024, "anon_peak_mib": anon.peak_kib / 1024,
            "writer_rss_mib": writer_peak / 1024, "heap_peak_mib": heap_peak,
            "parsed": result.counters["sitemaps_parsed"]}


def stages(urls: int) -> dict[str, float]:
    """µs per URL of each step, run one after another in this thread on one generated urlset: where the time
    of the end-to-end figure goes (parse: inflate + XML + entry records; admit: canonicalize, scope, traps,
    robots, kind, score; store: ``add_discovered`` of the admitted records in batches of 10,000)."""
    from datetime import UTC, datetime

    from protego import Protego

    from harvester.discovery.sitemaps import parse_sitemap
    from harvester.frontier import FrontierStore
    from harvester.rules.admission import Site
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile

    port = 8080
    origin = f"http://127.0.0.1:{port}"
    bodies = _bodies(port, 2, urls)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(database_url=f"sqlite:///{tmp}/h.db").with_overrides(
            **{"max_pages_per_host": 10_000_000}
        )
        site = Site(settings, SiteProfile.build(seeds=(origin + "/",), use_feeds=False, use_listings=False))
        robots = Protego.parse(bodies["/robots.txt"].decode())
        with FrontierStore.open(settings, upgrade=True) as store:
            for f in range(2):  # the second file is measured: imports, caches and the database are warm
                source = f"{origin}/sitemaps/{f}.xml"
                now = datetime.now(UTC)
                t0 = time.perf_counter()
                entries = list(parse_sitemap(bodies[f"/sitemaps/{f}.xml"], url=source,
                                             settings=settings.discovery).entries)
                t1 = time.perf_counter()
                items = site.admit_published(entries, where=source, origin=origin, now=now, fetched_at=now,
                                             allowed=lambda url: bool(robots.can_fetch(url, "harvester")))
                t2 = time.perf_counter()
                for start in range(0, len(items), 10_000):
                    store.add_discovered(items[start : start + 10_000])
                t3 = time.perf_counter()
                n = len(entries)
                out = {"parse_us": (t1 - t0) / n * 1e6, "admit_us": (t2 - t1) / n * 1e6,
                       "store_us": (t3 - t2) / n * 1e6}
    return out


def sqlite_floor(urls: int) -> float:
    """CPU µs per URL that sqlite3 alone needs to insert ready-made rows into the store's own ``urls`` and
    ``queue`` tables (the schema made by the migrations, the store's pragmas, batches of 10,000 as the ingest
    writes them): the least any ingest into this frontier pays per URL, before parsing, canonicalizing,
    filtering, scoring and merging, which are the harvester's."""
    from harvester.frontier import FrontierStore
    from harvester.frontier.dialects import make_engine
    from harvester.settings import Settings

    origin = "http://127.0.0.1:8080"
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(database_url=f"sqlite:///{tmp}/h.db")
        with FrontierStore.open(settings, upgrade=True):
            pass  # the schema, made by the migrations
        engine = make_engine(settings)  # the store's own pragmas, foreign keys included
        raw = engine.raw_connection()
        conn = raw.driver_connection
        assert conn is not None
        conn.execute("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits) VALUES (1, ?, 0, 0, 0)",
                     (origin,))
        conn.execute("INSERT INTO sources (id, label, kind) VALUES (1, ?, 'sitemap')", (f"sitemap:{origin}/s.xml",))
        now = int(time.time() * 1e6)
        # Four urlsets' worth, so that the unique index is as deep as in the end-to-end run's middle.
        rows = [(1, f"/articles/{n % 97}/story-about-things-{n}", 2, 1, "detail", "queued", n / 7, 1, now, now, now)
                for n in range(4 * urls)]
        insert = ("INSERT INTO urls (host_id, path, canonical_version, source_id, kind, state, score, depth,"
                  " first_seen, last_seen, lastmod) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                  " ON CONFLICT (host_id, path) DO NOTHING")
        spent = 0.0
        for start in range(0, len(rows), 10_000):  # batches of 10,000, as the ingest writes them
            c0 = time.process_time()
            conn.execute("BEGIN IMMEDIATE")
            top = conn.execute("SELECT coalesce(max(id), 0) FROM urls").fetchone()[0]
            conn.executemany(insert, rows[start : start + 10_000])
            conn.execute("INSERT INTO queue (host_id, kind, rank, url_id, due_at) SELECT host_id, kind, -score, id,"
                         " next_fetch_at FROM urls WHERE id > ?", (top,))
            conn.execute("COMMIT")
            spent += time.process_time() - c0
        raw.close()
        engine.dispose()
    return spent / len(rows) * 1e6


def run(files: int, urls: int, heap: bool = False) -> dict[str, float]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    ready = multiprocessing.get_context("fork").Event()
    server = multiprocessing.get_context("fork").Process(target=_serve, args=(sock, files, urls, ready), daemon=True)
    server.start()
    ready.wait(120)
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [sys.executable, __file__, "--worker", origin, str(Path(tmp) / "h.db"), *(["--heap"] if heap else [])],
                capture_output=True, text=True, check=True,
            )
            figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
            return figures
    finally:
        server.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--worker", nargs=2)
    parser.add_argument("--heap", action="store_true", help="also trace the Python heap peak (slower)")
    parser.add_argument("--stages", action="store_true", help="only the per-step breakdown (µs per URL)")
    args = parser.parse_args()
    if args.worker:
        origin, db_path = args.worker
        print(json.dumps(ingest(origin, db_path, heap=args.heap)))
        return
    if args.stages:
        figures = stages(args.urls)
        total = sum(figures.values())
        print("  ".join(f"{name[:-3]} {value:.1f} µs/URL" for name, value in figures.items())
              + f"  sum {total:.1f} µs/URL = {1e6 / total:,.0f} URLs/s one step after another")
        cores = os.cpu_count() or 1
        print(f"bare sqlite3 insert of ready rows {sqlite_floor(args.urls):.1f} CPU µs/URL; at 100k URLs/s, {cores}"
              f" cores give {cores * 10:.1f} CPU µs/URL for everything")
        return
    counts = sorted({max(1, args.files // 4), args.files})
    rows = [(f"{n} x {args.urls}", run(n, args.urls, args.heap)) for n in counts]
    print(f"{'sitemaps':>14} {'URLs':>10} {'wall s':>8} {'URLs/s':>10} {'peak RSS MiB':>13} {'growth MiB':>11}"
          f" {'private MiB':>12} {'writer RSS MiB':>15} {'heap peak MiB':>14}")
    for label, r in rows:
        print(f"{label:>14} {r['urls']:>10.0f} {r['wall_s']:>8.2f} {r['urls_per_s']:>10.0f} {r['peak_rss_mib']:>13.1f}"
              f" {r['growth_mib']:>11.1f} {r['anon_peak_mib']:>12.1f} {r['writer_rss_mib']:>15.1f}"
              f" {r['heap_peak_mib']:>14.1f}")
    print("RSS includes SQLite's page cache (16 MiB at most per connection; no mmap since issue 22)")
    print("private is the peak RssAnon of the ingesting process; the writer child's RSS holds")
    print("the same SQLite mappings. The Python heap peak (--heap) is what the pipeline itself holds.")
    print("target: >= 100k URLs/s into SQLite; peak memory independent of the sitemap count")


if __name__ == "__main__":
    main()
