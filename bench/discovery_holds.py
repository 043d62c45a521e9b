"""How long each discovery document's answer is held before it is committed: what a kill -9 then repeats (issue 31).

    .venv/bin/python bench/discovery_holds.py [--hosts 3] [--pages 2000] [--latency 0.02] [--seed 5]

One discovery of the test web (thread mode) into a fresh SQLite file. For each answered discovery document
(robots.txt, sitemap, feed, listing page) the time from its answer's arrival (the polite client's fetch returning)
to the end of the store call that commits it (``save_robots``, ``save_document``, ``complete_many``) is its hold:
a kill -9 within it asks the document again on the rerun. Prints, per kind, the documents answered, the median
and largest hold and the documents held over 0.5 s, and the store writes of the harvest (transactions that commit
discovery's results). Times are noisy on a shared machine; the holds' shape (which documents wait for what) is not.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harvester import phases
from harvester.fetch.engine import PoliteClient
from harvester.frontier import FrontierStore
from harvester.frontier.discovered import Discovered
from harvester.frontier.documents import Documents
from harvester.frontier.hosts import Hosts
from harvester.frontier.outcomes import Outcomes
from harvester.phases.discover_listings import ListingCrawl
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb


def instrument() -> tuple[dict[str, float], dict[str, list[tuple[float, str]]], Counter[str]]:
    """Wrap the client and the store: answered URL → monotonic time; kind → holds; store call → count."""
    answered: dict[str, float] = {}
    holds: dict[str, list[tuple[float, str]]] = defaultdict(list)
    writes: Counter[str] = Counter()
    claimed_urls: dict[int, str] = {}

    def held(url: str, kind: str) -> None:
        at = answered.pop(url, None)
        if at is not None:
            holds[kind].append((time.monotonic() - at, url))

    fetch = PoliteClient.fetch

    async def timed_fetch(self: PoliteClient, url: str, *args: Any, **kwargs: Any) -> Any:
        result = await fetch(self, url, *args, **kwargs)
        if result.status is not None:
            answered[url] = time.monotonic()
        return result

    robots = PoliteClient._fetch_robots

    async def timed_robots(self: PoliteClient, origin: str, *args: Any, **kwargs: Any) -> Any:
        result = await robots(self, origin, *args, **kwargs)
        answered[origin + "/robots.txt"] = time.monotonic()
        return result

    read_listing = ListingCrawl._read_listing

    async def named_listing(self: ListingCrawl, claimed: Any) -> Any:
        claimed_urls[claimed.id] = claimed.target
        return await read_listing(self, claimed)

    save_robots = Hosts.save_robots

    def counted_robots(self: Any, state: Any) -> Any:
        done = save_robots(self, state)
        writes["save_robots"] += 1
        held(state.origin + "/robots.txt", "robots")
        return done

    save_document = Documents.save_document

    def counted_document(self: Any, doc: Any, **kwargs: Any) -> Any:
        done = save_document(self, doc, **kwargs)
        writes["save_document"] += 1
        held(doc.url, "feed" if doc.kind.startswith("feed") else "sitemap")
        return done

    complete_many = Outcomes.complete_many

    def counted_completions(self: Any, owner: str, items: Any, **kwargs: Any) -> Any:
        done = complete_many(self, owner, items, **kwargs)
        writes["complete_many"] += 1
        for completion, _ in items:
            url = claimed_urls.get(completion.url_id)
            if url is not None:
                held(url, "listing")
        return done

    add_discovered = Discovered.add_discovered

    def counted_adds(self: Any, *args: Any, **kwargs: Any) -> Any:
        writes["add_discovered"] += 1
        return add_discovered(self, *args, **kwargs)

    PoliteClient.fetch = timed_fetch  # type: ignore[method-assign]
    PoliteClient._fetch_robots = timed_robots  # type: ignore[method-assign]
    ListingCrawl._read_listing = named_listing  # type: ignore[method-assign]
    # The store's concerns, before it is opened: ``FrontierStore`` binds their methods when it is made.
    Hosts.save_robots = counted_robots  # type: ignore[method-assign]
    Documents.save_document = counted_document  # type: ignore[method-assign]
    Outcomes.complete_many = counted_completions  # type: ignore[method-assign]
    Discovered.add_discovered = counted_adds  # type: ignore[method-assign]
    return answered, holds, writes


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    specs = [HostSpec(f"h{n}", pages=args.pages, latency_s=args.latency) for n in range(args.hosts)]
    answered, holds, writes = instrument()
    with TestWeb(specs, seed=args.seed) as web, tempfile.TemporaryDirectory() as tmp:
        settings = Settings.load(database_url=f"sqlite:///{Path(tmp) / 'holds.db'}")
        profile = SiteProfile.build(seeds=tuple(web.seeds), name="holds")
        started = time.monotonic()
        with FrontierStore.open(settings, upgrade=True) as store:
            result = await phases.discover(store, settings, profile)
        wall = time.monotonic() - started
    print(f"{args.hosts} hosts x {args.pages} pages, {args.latency * 1000:.0f} ms latency: discovery in {wall:.1f} s, "
          f"{result.counters['sitemaps_parsed']} sitemaps, {result.counters['feeds_parsed']} feeds")
    print(f"{'kind':8} {'answered':>8} {'median s':>9} {'max s':>7} {'> 0.5 s':>8}")
    for kind in ("robots", "sitemap", "feed", "listing"):
        values = sorted(holds.get(kind, []), reverse=True)
        if values:
            seconds = [value for value, _ in values]
            longest = ", ".join(f"{urlsplit(url).path} {value:.2f}" for value, url in values[:3])
            print(f"{kind:8} {len(values):8d} {statistics.median(seconds):9.3f} {seconds[0]:7.3f} "
                  f"{sum(1 for v in seconds if v > 0.5):8d}  longest: {longest}")
    print(f"answered, never committed (404 probes, guesses past a feed's end ...): {len(answered)}")
    print("store writes: " + ", ".join(f"{name} {count}" for name, count in sorted(writes.items())) +
          f"; {sum(writes.values())} in all")


if __name__ == "__main__":
    asyncio.run(main())
