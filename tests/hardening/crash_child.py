"""The harvest the crash suite kills, served by a fork server so the ~3 s of imports are paid once.

Run as ``python crash_child.py SEED...`` (``harvester.testing.forkserver``): each ``run DB_PATH`` forks a child
that runs the library's harvest (``aharvest``) on that SQLite file. Never imported by tests.
"""

from __future__ import annotations

import sys

import alembic.command  # noqa: F401 -- what each child's migration loads (alembic, SQLAlchemy's PostgreSQL
import sqlalchemy.dialects.postgresql  # noqa: F401 -- dialect its scripts name): paid once here, not per killed child

from harvester import FrontierStore, aharvest
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.forkserver import serve

OVERRIDES: dict[str, object] = {
    "discovery.batch_size": 5,  # many small upserts: kills land between and inside commits
    "store.claim_batch": 4,
    "politeness.per_host_start": 2,
    "http.timeout_s": 5.0,
}


async def harvest(db: str, seeds: tuple[str, ...]) -> None:
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**OVERRIDES)
    FrontierStore.open(settings, upgrade=True).close()  # a kill during the first run's migration is resumed too
    await aharvest(settings, SiteProfile.build(seeds=seeds))


def main(seeds: tuple[str, ...]) -> None:
    serve(lambda db: harvest(db, seeds))


if __name__ == "__main__":
    main(tuple(sys.argv[1:]))
