"""Sitemap parsing and URL-pipeline throughput: ultimate-sitemap-parser vs the streaming lxml path.

    .venv/bin/python bench/sitemaps.py                 # 20 x 50,000 URLs, both parsers, pipeline stages
    .venv/bin/python bench/sitemaps.py --files 4       # quicker

Each parser runs in its own subprocess so peak RSS (ru_maxrss) belongs to that path alone; the figure printed is
the growth over the worker's baseline after imports. Urlsets are generated in memory, one at a time (the set
is never held whole), so a flat peak across file counts shows bounded memory.

The end-to-end benchmark (fetch from the test web + upsert into the frontier) reuses ``ingest()``: pass the
fetched bodies and a ``sink`` that upserts each batch.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvester.discovery.sitemaps import parse_sitemap
from harvester.records import DiscoveredUrl, Source, UrlKind, provenance
from harvester.rules.scope import UrlFilter
from harvester.rules.scoring import score
from harvester.rules.urls import canonicalizer_for
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

HOST = "https://bench.example"
URLS_PER_FILE = 50_000
BASE = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ("alpha", "bravo", "harbour", "museum", "garden", "railway", "carbon", "budget", "village", "summit")


def make_urlset(index: int, n: int = URLS_PER_FILE, host: str = HOST) -> bytes:
    """One deterministic urlset of ``n`` entries shaped like a news/blog sitemap (~170 bytes per entry)."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n']
    for i in range(n):
        uid = index * n + i
        slug = f"{WORDS[uid % 10]}-{WORDS[(uid // 10) % 10]}-{WORDS[(uid // 100) % 10]}-{uid}"
        day = BASE - timedelta(minutes=uid * 7)
        parts.append(
            f"<url><loc>{host}/articles/{day:%Y/%m}/{slug}</loc><lastmod>{day:%Y-%m-%dT%H:%M:%S}+00:00</lastmod>"
            f"<changefreq>weekly</changefreq><priority>0.{uid % 10}</priority></url>\n"
        )
    parts.append("</urlset>\n")
    return "".join(parts).encode()


def bodies(files: int, n: int = URLS_PER_FILE) -> Iterator[bytes]:
    for index in range(files):
        yield make_urlset(index, n)


# --- the reusable pipeline ---------------------------------------------------------------------------------


@dataclass
class IngestStats:
    files: int = 0
    entries: int = 0
    queued: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    seconds: float = 0.0

    @property
    def urls_per_s(self) -> float:
        return self.entries / self.seconds if self.seconds else 0.0


def ingest(
    documents: Iterable[tuple[str, bytes]] | Iterable[bytes],
    *,
    settings: Settings,
    profile: SiteProfile,
    sink: Callable[[list[DiscoveredUrl]], object] | None = None,
    parser: str = "lxml",
    stages: str = "all",
) -> IngestStats:
    """Parse → canonicalize → filter → score → batches handed to ``sink`` (the end-to-end bench's upsert).

    ``documents`` are bodies or (url, body) pairs. ``stages``: "parse" stops after parsing, "canon" after
    canonicalization, "all" runs the full per-URL path (filter + score + record).
    """
    canon = canonicalizer_for(settings.urls)
    url_filter = UrlFilter(settings, profile)
    batch_size = settings.discovery.batch_size
    now = BASE
    stats = IngestStats()
    batch: list[DiscoveredUrl] = []
    start = time.perf_counter()
    outside = 0.0  # time spent producing the documents (generating or fetching): not the pipeline's
    source = iter(documents)
    while True:
        before = time.perf_counter()
        item = next(source, None)
        outside += time.perf_counter() - before
        if item is None:
            break
        url, body = item if isinstance(item, tuple) else (f"{HOST}/sitemap-{stats.files}.xml", item)
        stats.files += 1
        doc = parse_sitemap(body, url=url, settings=settings.discovery, parser=parser)  # type: ignore[arg-type]
        label = provenance(Source.SITEMAP, url)
        for entry in doc.entries:
            stats.entries += 1
            if stages == "parse":
                continue
            canonical = canon(entry.loc)
            if stages == "canon" or canonical is None:
                continue
            verdict = url_filter.check(canonical, trusted=True)
            if verdict is not None:
                stats.rejected[verdict.value] = stats.rejected.get(verdict.value, 0) + 1
                continue
            value = score(
                canonical,
                kind=UrlKind.DETAIL,
                source=Source.SITEMAP,
                depth=1,
                priority=entry.priority,
                lastmod=entry.lastmod,
                now=now,
                profile=profile,
            )
            batch.append(
                DiscoveredUrl(
                    url=canonical,
                    kind=UrlKind.DETAIL,
                    source=label,
                    depth=1,
                    score=value,
                    lastmod=entry.lastmod,
                    changefreq=entry.changefreq,
                    priority=entry.priority,
                )
            )
            stats.queued += 1
            if len(batch) >= batch_size:
                if sink is not None:
                    sink(batch)
                stats.batches += 1
                batch = []
    if batch:
        if sink is not None:
            sink(batch)
        stats.batches += 1
    stats.seconds = time.perf_counter() - start - outside
    return stats


def bench_settings() -> tuple[Settings, SiteProfile]:
    """Defaults, except a page budget above the benchmark's million URLs on one host."""
    settings = Settings().with_overrides(max_pages_per_host=10**8)
    return settings, SiteProfile(seeds=(HOST + "/",))


# --- workers (one per subprocess) --------------------------------------------------------------------------


def _rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def worker(mode: str, files: int, n: int) -> dict[str, object]:
    settings, profile = bench_settings()
    make_urlset(0, 10)  # warm imports and code paths before the baseline
    list(parse_sitemap(make_urlset(0, 10), url="u", settings=settings.discovery, parser="usp").entries)
    baseline = _rss_kib()
    if mode in ("usp", "lxml"):
        stats = ingest(bodies(files, n), settings=settings, profile=profile, parser=mode, stages="parse")
    elif mode == "canon":
        stats = ingest(bodies(files, n), settings=settings, profile=profile, stages="canon")
    elif mode == "pipeline":
        stats = ingest(bodies(files, n), settings=settings, profile=profile, stages="all")
    elif mode == "site_admit":
        stats = _site_admit(files, n, settings, profile)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return {"mode": mode, **asdict(stats), "urls_per_s": stats.urls_per_s, "rss_growth_kib": _rss_kib() - baseline}


def _site_admit(files: int, n: int, settings: Settings, profile: SiteProfile) -> IngestStats:
    """The lead's per-URL path (harvester.rules.admission.Site.admit), when it exists: what discovery really runs."""
    from harvester.rules.admission import Site

    site = Site(settings, profile)
    stats = IngestStats()
    start = time.perf_counter()
    outside = 0.0
    for index in range(files):
        before = time.perf_counter()
        body = make_urlset(index, n)
        outside += time.perf_counter() - before
        url = f"{HOST}/sitemap-{index}.xml"
        doc = parse_sitemap(body, url=url, settings=settings.discovery)
        for entry in doc.entries:
            stats.entries += 1
            item = site.admit(
                entry.loc,
                base=url,
                source=Source.SITEMAP,
                where=url,
                depth=1,
                now=BASE,
                kind=site.published_kind(entry.loc),
                lastmod=entry.lastmod,
                changefreq=entry.changefreq,
                priority=entry.priority,
                trusted=True,
                fetched_at=BASE,
                report_to=HOST,
            )
            stats.queued += item is not None
        stats.files += 1
    stats.seconds = time.perf_counter() - start - outside
    return stats


def canonicalize_rates(n: int = 100_000) -> list[tuple[str, float]]:
    """canonicalize() per URL shape, in this process (the per-URL cost discovery pays before anything else)."""
    from harvester.rules.urls import Canonicalizer

    canon = Canonicalizer(Settings().urls)
    base = "https://www.example.com/news/world/index.html"
    cases = {
        "sitemap loc (canonical)": ([f"https://www.example.com/articles/some-slug-{i}" for i in range(n)], None),
        "plain query": ([f"https://www.example.com/list?page={i}&order=recent" for i in range(n)], None),
        "tracking params": ([f"https://www.example.com/a/s-{i}?utm_source=x&utm_medium=y" for i in range(n)], None),
        "upper-case host": ([f"https://WWW.Example.com/a/s-{i}" for i in range(n)], None),
        "root-relative link": ([f"/a/s-{i}" for i in range(n)], base),
        "dot-relative link": ([f"../s-{i}" for i in range(n)], base),
        "escapes + fragment": ([f"https://www.example.com/caf%c3%a9/{i}#x" for i in range(n)], None),
        "repeated nav links": ([f"../section-{i % 200}/" for i in range(n)], base),
    }
    rates = []
    for name, (urls, page) in cases.items():
        start = time.perf_counter()
        for url in urls:
            canon(url, page)
        rates.append((name, n / (time.perf_counter() - start)))
    return rates


def run_worker(mode: str, files: int, n: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", mode, "--files", str(files), "--urls", str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        return {"mode": mode, "error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--urls", type=int, default=URLS_PER_FILE)
    parser.add_argument("--worker", default=None)
    parser.add_argument("--modes", default="usp,lxml,canon,pipeline,site_admit")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.files, args.urls)))
        return
    body = make_urlset(0, args.urls)
    print(f"{args.files} urlsets x {args.urls:,} URLs ({len(body) / 2**20:.1f} MiB each), one subprocess per row")
    print("machine shared with other work: figures are noisy")
    print(f"{'path':<12}{'URLs':>12}{'seconds':>10}{'URLs/s':>12}{'peak RSS growth':>18}{'queued':>10}")
    rows: dict[str, dict[str, Any]] = {}
    for mode in args.modes.split(","):
        row = run_worker(mode, args.files, args.urls)
        rows[mode] = row
        if "error" in row:
            print(f"{mode:<12}  error: {row['error']}")
            continue
        print(
            f"{mode:<12}{row['entries']:>12,}{row['seconds']:>10.2f}{row['urls_per_s']:>12,.0f}"
            f"{row['rss_growth_kib'] / 1024:>15.1f} MiB{row['queued']:>10,}"
        )
    print("\ncanonicalize() alone, per URL shape (in process):")
    for name, rate in canonicalize_rates():
        print(f"  {name:<26}{rate:>12,.0f} URLs/s")
    if "usp" in rows and "lxml" in rows and "error" not in rows["usp"] and "error" not in rows["lxml"]:
        usp, lxml = rows["usp"], rows["lxml"]
        speed = float(lxml["urls_per_s"]) / max(1.0, float(usp["urls_per_s"]))
        print(
            f"lxml vs usp: {speed:.1f}x the parse rate, peak RSS growth "
            f"{float(lxml['rss_growth_kib']) / 1024:.0f} vs {float(usp['rss_growth_kib']) / 1024:.0f} MiB"
        )


if __name__ == "__main__":
    main()
