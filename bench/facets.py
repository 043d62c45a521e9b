"""Requests per detail page, and filter-page requests per facet parameter per host, on a multi-host shop/blog
test web with sitemaps, feeds, paginated listings and filters (``?color=``, ``?size=``, ``?brand=``) whose pages
re-list items the plain listing shows pages later (issue 31, item 5).

    .venv/bin/python bench/facets.py [--hosts 4] [--pages 400] [--page-size 20] [--feed-entries 10] [--seed 5]
                                     [--quirks]

One harvest (discovery and extraction, the library's ``aharvest``) into a fresh SQLite file; counts come from the
test web's request record, so they are deterministic for a seed (times are not printed: nothing here is timed).
Targets: at most 3 filter requests per parameter per host; requests per detail page at most 1.12; every allowed
detail page harvested; no discovery document (robots.txt, sitemap, feed page, listing page) asked twice.

The floor printed beside the ratio is what a first harvest cannot go below without losing a page, read from the
test web's truth: per host robots.txt, the sitemap index and its children, the home page, every listing page and
every page of one feed (each listing or feed page may hold items published nowhere else, and nothing tells which
before it is read), then the detail pages. It leaves out the filter pages and the second feed's head, which a
crawler needs to judge but which taught nothing here.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from harvester import aharvest
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.sites import LISTING_FACETS, RobotsSpec
from harvester.testing.truth import HostTruth


def floor_requests(truth: HostTruth) -> int:
    """The requests a first harvest of this host cannot avoid (see the module's doc), detail pages excluded."""
    spec, model = truth.spec, truth.model
    feed_pages = max((math.ceil(len(model.feed_items("published")) / spec.feed_entries) for kind in spec.feeds
                      if kind in ("rss", "atom")), default=0)
    return 1 + len(truth.sitemap_documents()) + 1 + len(truth.listing_urls()) + feed_pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--page-size", type=int, default=20)
    parser.add_argument("--feed-entries", type=int, default=HostSpec("x").feed_entries)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--quirks", action="store_true",
                        help="make the last host's robots.txt answer 404 and its /sitemap.xml redirect to the index")
    args = parser.parse_args()
    specs = [HostSpec(f"h{i}", pages=args.pages, listing_page_size=args.page_size, feed_entries=args.feed_entries,
                      facets=True) for i in range(args.hosts)]
    if args.quirks:
        specs[-1] = replace(specs[-1], robots=RobotsSpec(status=404), sitemap_redirect=True)
    with TestWeb(specs, seed=args.seed, mode="process") as web, tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(database_url=f"sqlite:///{Path(tmp) / 'facets.db'}")
        asyncio.run(aharvest(settings, SiteProfile.build(seeds=tuple(web.seeds))))
        records = web.records()
        truth = {url for name in web.names for url in web.truth[name].allowed_detail_urls()}
        details = len(truth)
        floor = details + sum(floor_requests(web.truth[name]) for name in web.names)
        with FrontierStore.open(settings) as store:
            harvested = {page.url for page in store.iter_pages(latest=True)}
        truth_paths = {url.split("/", 3)[3] for url in truth}
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
          f"(target <= 1.12; floor {floor / details:.3f})")
    missing = truth - harvested
    print(f"detail pages harvested {len(truth) - len(missing)} of {len(truth)}" + (
        f", missing: {sorted(missing)[:3]}" if missing else " (100%)"))
    asked = Counter((record.host, record.path) for record in records if record.path.lstrip("/") not in truth_paths)
    twice = sorted(f"{host}{path} x{n}" for (host, path), n in asked.items() if n > 1)
    print(f"other documents asked more than once: {len(twice)}" + (f" ({', '.join(twice[:5])})" if twice else ""))
    fetched = Counter((record.host, record.path) for record in records if record.path.lstrip("/") in truth_paths)
    print(f"detail pages asked more than once: {sum(1 for n in fetched.values() if n > 1)}")
    print(f"filter requests {sum(variants.values())}, at most {max(variants.values(), default=0)} per parameter "
          f"per host (target <= 3)")
    print("requests by first path segment: " + ", ".join(f"{k} {v}" for k, v in kinds.most_common()))


if __name__ == "__main__":
    main()
