"""Day-2 cost of an incremental re-crawl, as a ratio of day 1, against the test web (process mode).

    .venv/bin/python bench/recrawl.py [--hosts 4] [--pages 250] [--changed 0.05] [--new 0.02] [--gone 0.01]
                                      [--feed-entries 10] [--seed 7] [--quirks]

Day 1: discover + extract every host. The day advances (changed / new / gone fractions). Day 2: every known
URL and document is made due now (``phases.mark_due``; still conditional) and discover + extract run again.
Bytes and requests come from the test web's request record (bytes sent by the server, headers included).
Target: day-2 bytes ≤ 2% of day 1 + the changed and new pages' own size (their day-2 200 responses).
Also checked: changed and new pages all fetched, gone pages all marked gone, share of conditional requests
for unchanged known pages. Byte and request counts are deterministic for a seed; times are noisy on a shared
2-core machine (client CPU seconds are printed beside wall seconds). The test web's feeds list the newest
``--feed-entries`` entries (RFC 5005 rel="next" pages behind them); its clock is fixed (day 0 = 2026-01-05).
``--quirks`` adds two hosts of the same size: one whose robots.txt answers 404 and whose ``/sitemap.xml`` redirects
to ``/sitemap_index.xml``, one whose robots.txt also names three unusable sitemaps (billion laughs, XXE, a gzip
bomb; its other odd routes are out of scope). Day 2 runs one day later on the harvester's clock, as the daily
schedule would.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.record import RequestRecord
from harvester.testing.sites import RobotsSpec

UNUSABLE_SITEMAPS = ("/hostile/sitemap-billion-laughs.xml", "/hostile/sitemap-xxe.xml", "/hostile/sitemap-bomb.xml.gz")


def quirky_hosts(pages: int, feed_entries: int) -> list[HostSpec]:
    """A robots-404 host whose /sitemap.xml redirects, and a host whose robots.txt names unusable sitemaps."""
    named = "".join(f"Sitemap: {{origin}}{path}\n" for path in UNUSABLE_SITEMAPS)
    return [
        HostSpec("redirecting", pages=pages, disallowed_in_sitemap=0.0, feed_entries=feed_entries,
                 robots=RobotsSpec(status=404), sitemap_redirect=True),
        HostSpec("unusable", pages=pages, disallowed_in_sitemap=0.0, feed_entries=feed_entries, hostile=True,
                 robots=RobotsSpec(body=f"User-agent: *\nDisallow:\nSitemap: {{origin}}/sitemap_index.xml\n{named}")),
    ]


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def harvest(settings: Settings, profile: SiteProfile, *, refresh: bool) -> dict[str, int]:
    with FrontierStore.open(settings, upgrade=True) as store:
        discovered = await phases.discover(store, settings, profile, refresh=refresh)
        extracted = await phases.extract(store, settings, profile)
    return {**{f"discover:{k}": v for k, v in discovered.counters.items()},
            **{f"extract:{k}": v for k, v in extracted.counters.items()}}


def totals(records: Sequence[RequestRecord]) -> tuple[int, int]:
    return sum(r.bytes for r in records), len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=250)
    parser.add_argument("--changed", type=float, default=0.05)
    parser.add_argument("--new", type=float, default=0.02)
    parser.add_argument("--gone", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--feed-entries", type=int, default=HostSpec("x").feed_entries)
    parser.add_argument("--quirks", action="store_true", help="add the redirecting and unusable-sitemap hosts")
    args = parser.parse_args()

    specs = [
        HostSpec(f"h{i}", pages=args.pages, disallowed_in_sitemap=0.0, feed_entries=args.feed_entries)
        for i in range(args.hosts)
    ] + (quirky_hosts(args.pages, args.feed_entries) if args.quirks else [])
    with tempfile.TemporaryDirectory() as tmp, TestWeb(specs, seed=args.seed, mode="process") as web:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'recrawl.db'}").with_overrides(
            **{"politeness.per_host_start": 4, "politeness.max_per_host_limit": 8}
        )
        profile = SiteProfile.build(name="recrawl-bench", seeds=tuple(web.seeds),
                                    scope={"deny_patterns": (r"/hostile/(?!sitemap)",)})

        started, cpu = time.perf_counter(), time.process_time()
        day1_counters = asyncio.run(harvest(settings, profile, refresh=False))
        day1_s, day1_cpu = time.perf_counter() - started, time.process_time() - cpu
        day1 = web.records()
        day1_bytes, day1_requests = totals(day1)
        known = {name: set(web.truth[name].detail_urls()) for name in web.truth}
        web.clear_records()

        change = web.advance_day(changed=args.changed, new=args.new, gone=args.gone)
        CLOCK.travel_to(utcnow() + timedelta(days=1))  # the next day's run, as the schedule would start it
        asyncio.run(phases.mark_due(settings, profile))
        started, cpu = time.perf_counter(), time.process_time()
        day2_counters = asyncio.run(harvest(settings, profile, refresh=True))
        day2_s, day2_cpu = time.perf_counter() - started, time.process_time() - cpu
        day2 = web.records()
        day2_bytes, day2_requests = totals(day2)

        changed, new, gone = change.all("changed"), change.all("new"), change.all("gone")
        fetched_200 = {(r.host, r.path) for r in day2 if r.status == 200}
        by_key = {(web.host_name(u), path_of(u)): u for u in changed | new | gone}
        own_size = sum(r.bytes for r in day2 if r.status == 200 and (r.host, r.path) in by_key
                       and by_key[(r.host, r.path)] in changed | new)
        changed_fetched = sum(1 for u in changed if (web.host_name(u), path_of(u)) in fetched_200)
        new_fetched = sum(1 for u in new if (web.host_name(u), path_of(u)) in fetched_200)
        unchanged_known = {(name, path_of(u)) for name, urls in known.items() for u in urls
                           if u not in changed and u not in gone}
        detail_requests = [r for r in day2 if (r.host, r.path) in unchanged_known]
        conditional = sum(1 for r in detail_requests if r.if_none_match or r.if_modified_since)
        requested_unchanged = {(r.host, r.path) for r in detail_requests}
        skipped = len(unchanged_known - requested_unchanged)
        with FrontierStore.open(settings) as store:
            states = store.url_states()
            infos = [store.url_info(u) for urls in known.values() for u in urls]
            kinds = Counter(str(info.kind if info else None) for info in infos)
        gone_marked = sum(1 for u in gone if states.get(u, ("",))[0] == "gone")
        detail_bytes = sum(r.bytes for r in day2 if (r.host, r.path) in unchanged_known or (r.host, r.path) in by_key)
        statuses = Counter(r.status for r in day2)
        detail_keys = {(name, path_of(u)) for name in web.truth for u in web.truth[name].detail_urls()} | set(by_key)
        other: Counter[str] = Counter()
        other_n: Counter[str] = Counter()
        for r in day2:
            if (r.host, r.path) not in detail_keys:
                first = r.path.strip("/").split("/")[0].split("?")[0]
                kind = "robots" if r.path.startswith("/robots") else first or "home"
                other[f"{kind}:{r.status}"] += r.bytes
                other_n[f"{kind}:{r.status}"] += 1

    budget = 0.02 * day1_bytes + own_size
    print(f"seed {args.seed}, {len(specs)} hosts x {args.pages} pages, feeds list {args.feed_entries} entries")
    print(f"day 1: {day1_requests} requests, {day1_bytes:,} bytes, {day1_s:.2f} s ({day1_cpu:.2f} s client CPU)")
    print(f"day 2: {day2_requests} requests, {day2_bytes:,} bytes, {day2_s:.2f} s ({day2_cpu:.2f} s client CPU)   "
          f"statuses {dict(statuses)}")
    print(f"ratio day2/day1: bytes {day2_bytes / day1_bytes:.4f}, requests {day2_requests / day1_requests:.4f}")
    print(f"target: day-2 bytes ≤ 2% of day 1 ({0.02 * day1_bytes:,.0f}) + changed/new pages' own size "
          f"({own_size:,}) = {budget:,.0f} -> {'MET' if day2_bytes <= budget else 'MISSED'} "
          f"(day 2 is {day2_bytes / budget:.2f} x the budget)")
    print(f"detail pages only: {detail_bytes:,} bytes vs 2% + own size {budget:,.0f} -> "
          f"{'MET' if detail_bytes <= budget else 'MISSED'}; day-1 detail URLs by stored kind: {dict(kinds)}")
    print(f"changed fetched {changed_fetched}/{len(changed)}, new fetched {new_fetched}/{len(new)}, "
          f"gone marked {gone_marked}/{len(gone)}")
    share = conditional / len(detail_requests) if detail_requests else 1.0
    print(f"unchanged known pages: {len(unchanged_known)}; requested {len(requested_unchanged)} "
          f"({share:.1%} conditional), skipped without a request {skipped}")
    print(f"day-2 extract counters: { {k: v for k, v in day2_counters.items() if k.startswith('extract')} }")
    economies = ("documents_skipped", "sitemaps_unchanged_per_index", "sitemaps_not_modified", "feeds_not_modified",
                 "feed_pages_not_needed", "feed_mirrors_skipped", "feed_archives_known", "listing_pages_not_needed",
                 "urls_dropped_from_sitemaps")
    print("day-2 discovery economies: "
          + ", ".join(f"{k} {day2_counters.get(f'discover:{k}', 0)}" for k in economies))
    print("day-2 bytes outside detail pages (kind:status -> bytes/requests): "
          + ", ".join(f"{k} {other[k]:,}/{other_n[k]}" for k in sorted(other, key=lambda k: -other[k])))
    del day1_counters


if __name__ == "__main__":
    main()
