"""Parse step alone: the regex scan of plain urlsets ("auto") against the streaming lxml path, side by side.

    .venv/bin/python bench/sitemap_parse.py                  # 50,000-URL urlsets, 5 rounds, best round kept
    .venv/bin/python bench/sitemap_parse.py --urls 10000 --rounds 3

Two urlset shapes: bench/sitemaps.py's news/blog one (a distinct lastmod with a time per URL) and
bench/ingest.py's (day dates, a query string, no changefreq). Each round parses the same bytes with both paths
in alternating order and drains the entries the way discovery does (one at a time, nothing kept), so both pay
the same garbage-collector and cache conditions; the best round per path is printed. The machine is shared:
compare the two columns of one run, not figures across runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sitemaps import make_urlset  # bench/sitemaps.py

from harvester.discovery.sitemap_model import SitemapDoc
from harvester.discovery.sitemaps import parse_sitemap
from harvester.settings import DiscoverySettings

SETTINGS = DiscoverySettings()
URL = "https://bench.example/sitemap.xml"


def ingest_urlset(n: int, origin: str = "http://127.0.0.1:8080") -> bytes:
    """bench/ingest.py's urlset (its ``_bodies``), rebuilt here so the server code is not imported."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    for i in range(n):
        lines.append(
            f"<url><loc>{origin}/articles/{i % 97}/story-about-things-{i}?utm_source=feed</loc>"
            f"<lastmod>2026-11-{1 + i % 28:02d}</lastmod><priority>0.{i % 10}</priority></url>"
        )
    lines.append("</urlset>")
    return "\n".join(lines).encode()


def timed(body: bytes, parser: str) -> tuple[float, int, SitemapDoc]:
    """Seconds to parse ``body`` and drain its entries (none kept), the entry count and the document."""
    start = time.perf_counter()
    doc = parse_sitemap(body, url=URL, settings=SETTINGS, parser=parser)  # type: ignore[arg-type]
    count = 0
    for _ in doc.entries:
        count += 1
    return time.perf_counter() - start, count, doc


def compare(name: str, body: bytes, rounds: int) -> tuple[float, float]:
    """Best µs/URL of the lxml path and of "auto", after checking both give the same entries and report."""
    lxml_doc = parse_sitemap(body, url=URL, settings=SETTINGS, parser="lxml")
    auto_doc = parse_sitemap(body, url=URL, settings=SETTINGS, parser="auto")
    if list(lxml_doc.entries) != list(auto_doc.entries) or lxml_doc.counts != auto_doc.counts:
        raise SystemExit(f"{name}: the two paths disagree")
    if auto_doc.parser != "scan":
        raise SystemExit(f"{name}: auto did not take the scan (parser={auto_doc.parser!r})")
    del lxml_doc, auto_doc
    gc.collect()
    best = {"lxml": float("inf"), "auto": float("inf")}
    count = 0
    for index in range(rounds):
        order: tuple[str, ...] = ("lxml", "auto") if index % 2 == 0 else ("auto", "lxml")
        for parser in order:
            seconds, count, _ = timed(body, parser)
            best[parser] = min(best[parser], seconds)
    per_url: Callable[[float], float] = lambda s: s / max(1, count) * 1e6  # noqa: E731
    return per_url(best["lxml"]), per_url(best["auto"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    shapes = {"sitemaps.py shape": make_urlset(0, args.urls), "ingest.py shape": ingest_urlset(args.urls)}
    print(f"{args.urls:,} URLs per urlset, best of {args.rounds} alternating rounds; machine shared, figures noisy")
    print(f"{'urlset':<20}{'MiB':>6}{'lxml µs/URL':>14}{'scan µs/URL':>14}{'lxml/scan':>11}")
    for name, body in shapes.items():
        lxml_us, scan_us = compare(name, body, args.rounds)
        print(f"{name:<20}{len(body) / 2**20:>6.1f}{lxml_us:>14.2f}{scan_us:>14.2f}{lxml_us / scan_us:>10.1f}x")


if __name__ == "__main__":
    main()
