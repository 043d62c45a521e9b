"""Freshness of the scheduled daily re-crawl, beside a uniform "re-check every page daily" policy, in one run.

    .venv/bin/python bench/freshness.py [--days 14] [--pages 300] [--seed 7]

A three-host test web changes every night (5% of pages edited, 2% new, 1% deleted; on host "quiet" pages change
at known per-page rates instead: 10% of them half the days, 30% one day in ten, 60% one day in a hundred, and
nothing announces its edits: sitemap lastmods are publication dates, its only feed is RSS by publication). Each
day's run starts at 07:00 on the harvester's clock, as cron starts it; nothing is forced due.

Per day, for each policy: requests, bytes, the day's changes caught (announced: a newer sitemap lastmod or an
entry in an Atom feed's head; unannounced), and the snapshot's distance from the site (pages missing, deleted but live,
announced changes held old, unannounced changes held old). At the end: the share of unannounced changes of the
first week caught within 1, 3 and 7 days, requests spent, and changes caught per request, with their ratios.
Policies: "adaptive" is the default settings; "uniform" asks every page every day (no lastmod skip, every
revisit interval one day).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.schedule import run_at, site_versions, snapshot_gap

UNIFORM: dict[str, object] = {
    "revisit.default_s": 86_400.0, "revisit.max_s": 86_400.0, "revisit.min_s": 86_400.0,
    "revisit.lastmod_min_checks": 10**9,
}
"""Every page asked every day: the interval pinned to a day, and no lastmod ever trusted to skip a request."""


@dataclass
class Event:
    """One unannounced change: the page, the day it changed, the version that day made."""

    url: str
    day: int
    version: int
    caught: int | None = None


@dataclass
class Policy:
    name: str
    overrides: dict[str, object]
    rows: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requests: int = 0
    requests_week: int = 0


def specs(pages: int) -> list[HostSpec]:
    return [
        HostSpec("news", pages=pages),
        HostSpec("quiet", pages=pages, sitemap_lastmod="published", feeds=("rss",),
                 change_rates=((0.1, 0.5), (0.3, 0.1), (0.6, 0.01))),
        HostSpec("blog", pages=pages, feed_paging="archive"),
    ]


async def run_day(store: FrontierStore, settings: Settings, profile: SiteProfile) -> None:
    await phases.discover(store, settings, profile)
    await phases.extract(store, settings, profile)


def announced_now(web: TestWeb) -> set[str]:
    return {url for name in web.names for url in web.truth[name].announced_urls()}


def run_policy(policy: Policy, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, TestWeb(specs(args.pages), seed=args.seed, mode="process") as web:
        settings = Settings(database_url=f"sqlite:///{Path(tmp) / 'f.db'}").with_overrides(**policy.overrides)
        profile = SiteProfile(name=f"freshness-{policy.name}", seeds=tuple(web.seeds))
        with FrontierStore.open(settings, upgrade=True) as store:
            CLOCK.travel_to(run_at(0))
            asyncio.run(run_day(store, settings, profile))
            first = web.records()
            policy.rows.append(f"  day 0: {len(first):6d} requests {sum(r.bytes for r in first):12,d} bytes "
                               f"(the first harvest) | {snapshot_gap(store, web).summary()}")
            for day in range(1, args.days + 1):
                before = site_versions(web)
                change = web.advance_day(changed=0.05, new=0.02, gone=0.01)
                after = site_versions(web)
                told = announced_now(web)
                changed = [u for u in change.all("changed") if u in after and after[u] != before.get(u)]
                silent = [u for u in changed if u not in told]
                policy.events += [Event(u, day, after[u]) for u in silent]
                web.clear_records()
                CLOCK.travel_to(run_at(day))
                asyncio.run(run_day(store, settings, profile))
                records = web.records()
                held = {p.url: int(p.etag.split("v")[-1].rstrip('"')) for p in store.iter_pages(latest=True)
                        if p.etag and p.etag.startswith('W/"p')}
                for event in policy.events:
                    if event.caught is None and held.get(event.url, -1) >= event.version:
                        event.caught = day
                gap = snapshot_gap(store, web)
                caught_told = sum(1 for u in changed if u in told and held.get(u) == after[u])
                caught_silent = sum(1 for u in silent if held.get(u) == after[u])
                policy.requests += len(records)
                if day <= 7:
                    policy.requests_week += len(records)
                policy.rows.append(
                    f"  day {day}: {len(records):6d} requests {sum(r.bytes for r in records):12,d} bytes | changes "
                    f"caught: announced {caught_told}/{len(changed) - len(silent)}, unannounced "
                    f"{caught_silent}/{len(silent)} | {gap.summary()}"
                )
    CLOCK.reset()


def within(events: list[Event], days: int) -> float:
    week = [e for e in events if e.day <= 7]
    return sum(1 for e in week if e.caught is not None and e.caught - e.day < days) / max(1, len(week))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=14, help="days re-crawled (the first 7 days' changes are scored)")
    parser.add_argument("--pages", type=int, default=300, help="pages per host on day 0")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.days < 7:
        sys.exit("--days must be at least 7: changes of the first week are followed for up to 7 days")
    policies = [Policy("adaptive", {}), Policy("uniform", UNIFORM)]
    for policy in policies:
        run_policy(policy, args)
    for policy in policies:
        print(f"{policy.name}:")
        print("\n".join(policy.rows))
    print(f"\nunannounced changes of days 1-7 (followed to day {args.days}), caught within 1 / 3 / 7 days:")
    scores = {}
    for policy in policies:
        week = [e for e in policy.events if e.day <= 7]
        caught = sum(1 for e in week if e.caught is not None and e.caught - e.day < 7)
        per_request = caught / max(1, policy.requests_week)
        scores[policy.name] = (per_request, policy.requests_week, within(policy.events, 1), within(policy.events, 3))
        print(f"  {policy.name:9s} {within(policy.events, 1):6.1%} / {within(policy.events, 3):6.1%} / "
              f"{within(policy.events, 7):6.1%} of {len(week)} | requests days 1-7 {policy.requests_week:,} | "
              f"changes caught per 1,000 requests {1000 * per_request:.1f}")
    adaptive, uniform = scores["adaptive"], scores["uniform"]
    print(f"adaptive / uniform: requests {adaptive[1] / max(1, uniform[1]):.2f}, changes caught per request "
          f"{adaptive[0] / max(1e-9, uniform[0]):.2f}, caught within 1 day {adaptive[2] / max(1e-9, uniform[2]):.2f}")


if __name__ == "__main__":
    main()
