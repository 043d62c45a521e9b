"""How long one large sitemap holds the event loop: parsed on the loop vs prepared in a worker thread.

    .venv/bin/python bench/loop_stall.py [--urls 50000] [--repeat 7]

A discovery host reads sitemaps on the event loop that every other host's requests share, so the longest
stretch the loop cannot run is the delay a sitemap inflicts on them. A 1 ms ticker runs beside the ingestion of
one urlset (plain and gzipped; entries read 1,000 at a time with a yield between, as ``_ingest_entries`` does):

- "on the loop": ``parse_sitemap`` called on the loop thread;
- "prepared in a thread": ``prepare_sitemap`` in ``asyncio.to_thread`` (as ``discovery_host`` does), then the
  entries read on the loop.

Prints the ticker's longest gap per run (median and worst) for each, side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvester.discovery.sitemap_model import SitemapDoc
from harvester.discovery.sitemaps import finish_sitemap, parse_sitemap, prepare_sitemap
from harvester.settings import DiscoverySettings

SETTINGS = DiscoverySettings()
URL = "http://127.0.0.1:8000/sitemaps/0.xml"


def make_urlset(urls: int) -> bytes:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">']
    lines += [
        f"<url><loc>http://127.0.0.1:8000/articles/{n % 97}/story-about-things-{n}?utm_source=feed</loc>"
        f"<lastmod>2026-11-{1 + n % 28:02d}</lastmod><priority>0.{n % 10}</priority></url>"
        for n in range(urls)
    ]
    lines.append("</urlset>")
    return "\n".join(lines).encode()


async def _ticker(gaps: list[float], stop: asyncio.Event) -> None:
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


async def _consume(doc: SitemapDoc) -> int:
    entries = iter(doc.entries)
    count = 0
    while chunk := list(islice(entries, 1000)):
        count += len(chunk)
        await asyncio.sleep(0)
    return count


async def on_the_loop(body: bytes) -> int:
    return await _consume(parse_sitemap(body, url=URL, settings=SETTINGS, feeds=False))


async def prepared_in_a_thread(body: bytes) -> int:
    prepared = await asyncio.to_thread(prepare_sitemap, body, url=URL, settings=SETTINGS)
    if not isinstance(prepared, SitemapDoc):
        prepared = finish_sitemap(prepared, settings=SETTINGS, feeds=False)
    return await _consume(prepared)


async def longest_stall_ms(read: Callable[[bytes], Awaitable[int]], body: bytes, urls: int) -> float:
    gaps: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.create_task(_ticker(gaps, stop))
    await asyncio.sleep(0.01)
    count = await read(body)
    stop.set()
    await ticker
    if count != urls:
        raise SystemExit(f"read {count} entries, expected {urls}")
    return max(gaps) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--urls", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    plain = make_urlset(args.urls)
    bodies = {"plain": plain, "gzip": gzip.compress(plain)}
    print(f"one urlset of {args.urls:,} URLs: {len(plain):,} bytes, {len(bodies['gzip']):,} gzipped")
    print(f"{'':24s}{'file':>7s}{'median ms':>11s}{'worst ms':>10s}")
    for label, read in (("on the loop", on_the_loop), ("prepared in a thread", prepared_in_a_thread)):
        for kind, body in bodies.items():
            stalls = [await longest_stall_ms(read, body, args.urls) for _ in range(args.repeat)]
            print(f"{label:24s}{kind:>7s}{statistics.median(stalls):11.1f}{max(stalls):10.1f}")
    print("longest gap of a 1 ms ticker on the same loop while the sitemap is read (lower is better)")


if __name__ == "__main__":
    asyncio.run(main())
