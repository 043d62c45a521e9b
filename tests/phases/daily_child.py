"""The scheduled run the daily kill test interrupts, served by a fork server so the imports are paid once.

Run as ``python daily_child.py SEED...``; then each stdin line ``run DB_PATH ISO_INSTANT`` forks a child that
leads a process group of its own, sets the harvester's clock to the instant (the run's scheduled start) and runs
the re-crawl (harvester.arecrawl) on that SQLite file; it answers the child's pid. ``wait PID`` answers its exit status
(negative: the signal that killed it). Children exit 0 when both phases complete. Never imported by tests.
"""

from __future__ import annotations

import asyncio
import os
import sys

from harvester import FrontierStore, arecrawl
from harvester.runtime import CLOCK, parse_instant
from harvester.settings import Settings, SiteProfile

OVERRIDES: dict[str, object] = {
    "discovery.batch_size": 20,  # many small upserts: kills land between and inside commits
    "politeness.per_host_limit": 2,
    "http.timeout_s": 5.0,
}


async def run_day(db: str, seeds: tuple[str, ...]) -> None:
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**OVERRIDES)
    FrontierStore.open(settings, upgrade=True).close()  # a kill during a first run's migration is resumed too
    await arecrawl(settings, SiteProfile.build(seeds=seeds))  # the day's scheduled run, as a library call


def serve(seeds: tuple[str, ...]) -> None:
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "run":
            db, _, instant = arg.partition(" ")
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    os.setpgid(0, 0)
                    CLOCK.travel_to(parse_instant(instant, source="run"))
                    asyncio.run(run_day(db, seeds))
                    code = 0
                finally:
                    os._exit(code)
            answer = str(pid)
        elif command == "wait":
            _, status = os.waitpid(int(arg), 0)
            answer = str(os.waitstatus_to_exitcode(status))
        else:
            answer = f"unknown command {command!r}"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(tuple(sys.argv[1:]))
