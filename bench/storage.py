"""Disk per page per daily run: a site re-crawled on the daily schedule, every version kept (DESIGN invariant 12).

    .venv/bin/python bench/storage.py [--hosts 3] [--pages 300] [--days 7] [--changed 0.05] [--new 0.02]
                                      [--gone 0.01] [--restyled 0.02] [--seed 7]

Day 0 harvests the test web into a SQLite file; each later day the site moves on (edited, new, deleted and
restyled pages: bytes outside the main text) and ``arecrawl`` runs at the same clock time as the day before, as cron
runs it. After each day the file's used bytes (pages in use, ``PRAGMA page_count - freelist_count``) are read, and
the day's growth is divided by the live detail pages: bytes per page per daily run, what a year of daily runs costs
per page being 365 times it. Beside it, side by side in the same run: the payload bytes the day added to ``bodies``
(compressed, one row per digest), the bytes the same versions would have cost stored once per version row without
dedup (the pre-0008 shape), and the fetch log's rows. Deterministic for a seed but for timing, which is not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
from pathlib import Path

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.schedule import run_at


def used(path: Path) -> dict[str, int]:
    """Bytes in use in the file, and the storage rows that matter (a pre-0008 schema, bodies in ``pages``, too:
    run this file with ``PYTHONPATH`` at an older checkout to compare, ``--restyled 0``)."""
    with sqlite3.connect(path) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
        if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'bodies'").fetchone()[0]:
            bodies, body_bytes = conn.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM bodies").fetchone()
            versions, undeduped = conn.execute(
                "SELECT count(*), coalesce(sum(length(b.body)), 0) FROM pages p JOIN bodies b ON b.id = p.body_id"
            ).fetchone()
        else:
            versions, undeduped = conn.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM pages").fetchone()
            bodies, body_bytes = versions, undeduped
        fetches = conn.execute("SELECT count(*) FROM fetches").fetchone()[0]
    return {"file": pages * page_size, "bodies": bodies, "body_bytes": body_bytes, "versions": versions,
            "undeduped_bytes": undeduped, "fetches": fetches}


async def run(args: argparse.Namespace) -> None:
    specs = [HostSpec(f"h{i}", pages=args.pages) for i in range(args.hosts)]
    with tempfile.TemporaryDirectory() as tmp, TestWeb(specs, seed=args.seed, mode="process") as web:
        path = Path(tmp) / "bench.db"
        settings = Settings.load(database_url=f"sqlite:///{path}")
        profile = SiteProfile.build(seeds=tuple(web.seeds), name="bench")
        with FrontierStore.open(settings, upgrade=True):
            CLOCK.travel_to(run_at(0))
            await aharvest(settings, profile)
            before = used(path)
            live = sum(len(web.truth[name].allowed_detail_urls()) for name in web.names)
            print(f"day 0: {live} live pages, file {before['file'] / 2**20:.2f} MiB, "
                  f"{before['file'] / live:.0f} B/page; {before['versions']} versions in {before['bodies']} bodies")
            print("day  live  changed+new+restyled  file+B/page/day  bodies+B  undeduped+B  versions+  fetches+")
            growth = []
            for day in range(1, args.days + 1):
                moves = {"changed": args.changed, "new": args.new, "gone": args.gone}
                if args.restyled:
                    moves["restyled"] = args.restyled
                change = web.advance_day(**moves)
                CLOCK.travel_to(run_at(day))
                await arecrawl(settings, profile)
                after = used(path)
                live = sum(len(web.truth[name].allowed_detail_urls()) for name in web.names)
                delta = {key: after[key] - before[key] for key in after}
                moved = sum(len(change.all(kind)) for kind in ("changed", "new", "restyled") if hasattr(change, kind))
                per_page = delta["file"] / live
                growth.append(per_page)
                print(f"{day:>3} {live:>5} {moved:>21} {per_page:>16.0f} {delta['body_bytes']:>9} "
                      f"{delta['undeduped_bytes']:>12} {delta['versions']:>9} {delta['fetches']:>9}")
                before = after
        CLOCK.reset()
    mean = sum(growth) / len(growth)
    print(f"mean: {mean:.0f} bytes per live page per daily run ({mean * 365 / 2**10:.0f} KiB per page per year)")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--changed", type=float, default=0.05)
    parser.add_argument("--new", type=float, default=0.02)
    parser.add_argument("--gone", type=float, default=0.01)
    parser.add_argument("--restyled", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=7)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
