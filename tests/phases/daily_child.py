"""The scheduled run the daily kill test interrupts, served by a fork server so the imports are paid once.

Run as ``python daily_child.py SEED...`` (``harvester.testing.forkserver``): each ``run DB_PATH ISO_INSTANT`` forks
a child that leads a process group of its own, sets the harvester's clock to the instant (the run's scheduled
start) and runs the re-crawl (``harvester.arecrawl``) on that SQLite file. Never imported by tests.
"""

from __future__ import annotations

import sys

from harvester import FrontierStore, arecrawl
from harvester.runtime import CLOCK, parse_instant
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.forkserver import serve

OVERRIDES: dict[str, object] = {
    "discovery.batch_size": 20,  # many small upserts: kills land between and inside commits
    "politeness.per_host_start": 2,
    "http.timeout_s": 5.0,
}


async def run_day(db: str, seeds: tuple[str, ...]) -> None:
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**OVERRIDES)
    FrontierStore.open(settings, upgrade=True).close()  # a kill during a first run's migration is resumed too
    await arecrawl(settings, SiteProfile.build(seeds=seeds))  # the day's scheduled run, as a library call


async def run(arg: str, seeds: tuple[str, ...]) -> None:
    db, _, instant = arg.partition(" ")
    CLOCK.travel_to(parse_instant(instant, source="run"))
    await run_day(db, seeds)


def main(seeds: tuple[str, ...]) -> None:
    serve(lambda arg: run(arg, seeds), own_process_group=True)


if __name__ == "__main__":
    main(tuple(sys.argv[1:]))
