"""Requests per detail page, and filter-page requests per facet parameter per host, on a multi-host shop/blog
test web with sitemaps, feeds, paginated listings and filters (``?color=``, ``?size=``, ``?brand=``) whose pages
re-list items the plain listing shows pages later (issue 31, item 5).

    .venv/bin/python bench/facets.py [--hosts 4] [--pages 400] [--page-size 20] [--feed-entries 10] [--seed 5]

One harvest (discovery and extraction, the library's ``aharvest``) into a fresh SQLite file; counts come from the
test web's request record, so they are deterministic for a seed (times are not printed: nothing here is timed).
Targets: at most 3 filter requests per parameter per host; requests per detail page at most 1.12.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

from harvester import aharvest
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.sites import LISTING_FACETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--page-size", type=int, default=20)
    parser.add_argument("--feed-entries", type=int, default=HostSpec("x").feed_entries)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    specs = [HostSpec(f"h{i}", pages=args.pages, listing_page_size=args.page_size, feed_entries=args.feed_entries,
                      facets=True) for i in range(args.hosts)]
    with TestWeb(specs, seed=args.seed, mode="process") as web, tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(database_url=f"sqlite:///{Path(tmp) / 'facets.db'}")
        asyncio.run(aharvest(settings, SiteProfile.build(seeds=tuple(web.seeds))))
        records = web.records()
        details = sum(len(web.truth[name].allowed_detail_urls()) for name in web.names)
    variants: Counter[tuple[str, str]] = Counter()
    kinds: Counter[str] = Counter()
    for record in records:
        query = urlsplit(record.path).query
        names = [name for name in LISTING_FACETS if f"{name}=" in query]
        for name in names:
            variants[(record.host, name)] += 1
        kinds["filter" if names else record.path.strip("/").split("/")[0].split("?")[0] or "home"] += 1
    print(f"seed {args.seed}: {args.hosts} hosts x {args.pages} pages, listing pages of {args.page_size}, "
          f"feeds of {args.feed_entries}")
    print(f"requests {len(records)}, allowed detail pages {details}: {len(records) / details:.3f} per detail page "
          f"(target <= 1.12)")
    print(f"filter requests {sum(variants.values())}, at most {max(variants.values(), default=0)} per parameter "
          f"per host (target <= 3)")
    print("requests by first path segment: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))


if __name__ == "__main__":
    main()
