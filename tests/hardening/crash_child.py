"""The harvest the crash suite kills, served by a fork server so the ~3 s of imports are paid once.

Run as ``python crash_child.py SEED...``; then each stdin line ``run DB_PATH`` forks a child that runs
the library's harvest (``aharvest``) on that SQLite file and answers its pid; ``wait PID`` answers its exit status
(negative: the signal that killed it). Children exit 0 when both phases complete. Never imported by tests.
"""

from __future__ import annotations

import asyncio
import os
import sys

from harvester import FrontierStore, aharvest
from harvester.settings import Settings, SiteProfile

OVERRIDES: dict[str, object] = {
    "discovery.batch_size": 5,  # many small upserts: kills land between and inside commits
    "store.claim_batch": 4,
    "politeness.per_host_limit": 2,
    "http.timeout_s": 5.0,
}


async def harvest(db: str, seeds: tuple[str, ...]) -> None:
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**OVERRIDES)
    FrontierStore.open(settings, upgrade=True).close()  # a kill during the first run's migration is resumed too
    await aharvest(settings, SiteProfile.build(seeds=seeds))


def serve(seeds: tuple[str, ...]) -> None:
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "run":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    asyncio.run(harvest(arg, seeds))
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
