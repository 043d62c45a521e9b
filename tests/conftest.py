"""Shared fixtures: a database URL parametrized over a SQLite file and a real PostgreSQL database.

PostgreSQL is at 127.0.0.1:5432 (user postgres, trust auth). With HARVESTER_REQUIRE_POSTGRES=1 (CI) a
missing server fails the run; elsewhere its cases skip with the reason printed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import hypothesis
import psycopg
import pytest

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_URL_TEMPLATE = "postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
REQUIRE_POSTGRES = os.environ.get("HARVESTER_REQUIRE_POSTGRES") == "1"

pytest_plugins = ["harvester.testing.fixtures"] if importlib.util.find_spec("harvester.testing.fixtures") else []


# Hypothesis bounds each example's wall time (200 ms) and fails a slow data generation: a timing check, which a
# machine with other work on it fails at random. The properties are about values, so neither is kept.
hypothesis.settings.register_profile(
    "harvester", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.load_profile("harvester")


# The slowest files, slowest first, so `make test`'s two workers (--dist loadfile: a file stays on one worker) end
# together. xdist's default reorder (most tests first; the Makefile turns it off) put these few-test files last.
# Seconds per file: the sum of its tests' setup, call and teardown in one whole two-worker run of a fresh clone
# (`make test PYTEST_ARGS=--durations=0`, 18.7 min, green, at a load of 4-7 beside three helpers). Those on
# migrated_db_url since: the old figure less the PostgreSQL cases' saving (measured at a load of 12-15 where it says
# so, else ~1.5 s a case), until the next whole profile.
SLOWEST_FIRST: tuple[str, ...] = (
    # First of all, not for its time: it asserts the healing automations are not there yet, and tests/flows shares a
    # Prefect server per worker that test_shutdown's and test_operations' `harvester deployments` leave them on.
    "tests/flows/test_healing.py",
    "tests/flows/test_shutdown.py",  # 83 s
    "tests/test_writer.py",  # 62 s
    "tests/phases/test_gone_relisted.py",  # 59 s (was 72: its PostgreSQL cases measured on migrated_db_url)
    "tests/phases/test_moved_revisits.py",  # 53 s (was 60: its PostgreSQL cases measured on migrated_db_url)
    "tests/flows/test_lifeline.py",  # 51 s
    "tests/phases/test_daily_schedule.py",  # 50 s
    "tests/flows/test_operations.py",  # 48 s
    "tests/phases/test_scaleout.py",  # 47 s
    "tests/phases/test_harvest.py",  # 46 s
    "tests/hardening/test_db_outage.py",  # 45 s
    "tests/test_packaging.py",  # 38 s
    "tests/flows/test_parameters.py",  # 35 s
    "tests/phases/test_handover.py",  # 34 s
    "tests/hardening/test_faults.py",  # 34 s
    "tests/phases/test_midnight_lastmod.py",  # 32 s (was 36: estimated on migrated_db_url)
    "tests/phases/test_budget.py",  # 32 s (was 36: estimated on migrated_db_url)
    "tests/flows/test_names_and_home.py",  # 32 s
    "tests/test_export_warc_requests.py",  # 30 s (was 36: estimated on migrated_db_url)
    "tests/phases/test_moved_target_read_once.py",  # 29 s (was 33: estimated on migrated_db_url)
    "tests/phases/test_recrawl.py",  # 28 s (was 32: estimated on migrated_db_url)
    "tests/phases/test_robots_change.py",  # 27 s (was 31: estimated on migrated_db_url)
    "tests/hardening/test_hostile.py",  # 27 s
    "tests/test_discovery_documents_truth.py",  # 27 s
    "tests/phases/test_counts_truth.py",  # 26 s
    "tests/flows/test_flow_crash.py",  # 26 s
    "tests/phases/test_cycles.py",  # 24 s (was 33: estimated on migrated_db_url)
    "tests/flows/test_sites.py",  # 24 s
    "tests/flows/test_serve.py",  # 24 s
    "tests/phases/test_robots_refused.py",  # 23 s (was 29: estimated on migrated_db_url)
    "tests/test_status_after_stop.py",  # 23 s
    "tests/test_export_replay.py",  # 23 s
    "tests/flows/test_flow_truth.py",  # 20 s
    "tests/phases/test_failed_and_duplicates_return.py",  # 19 s (was 28: estimated on migrated_db_url)
    "tests/test_status_truth.py",  # 19 s (was 25: estimated on migrated_db_url)
    "tests/phases/test_contradicting_304.py",  # 19 s (was 23: estimated on migrated_db_url)
    "tests/phases/test_extraction_lock.py",  # 19 s
    "tests/rules/test_urls.py",  # 19 s
    "tests/phases/test_host_policy.py",  # 18 s (was 22: estimated on migrated_db_url)
    "tests/discovery/test_listings.py",  # 18 s
    "tests/test_robots_rejudge_truth.py",  # 15 s (was 19: estimated on migrated_db_url)
    "tests/test_feed_names_a_listing.py",  # 14 s (was 18: estimated on migrated_db_url)
    "tests/test_export.py",  # 12 s (was 22: its PostgreSQL cases measured on migrated_db_url)
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every xdist worker collects the same order (the scheduler checks): a stable sort, files not listed after."""
    rank = {path: n for n, path in enumerate(SLOWEST_FIRST)}
    root = config.rootpath
    items.sort(key=lambda item: rank.get(item.path.relative_to(root).as_posix(), len(rank)))


@functools.cache
def postgres_problem() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it answers."""
    try:
        with psycopg.connect(PG_ADMIN_DSN) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at 127.0.0.1:5432 is not reachable: {exc}".strip()
    return None


def require_postgres() -> None:
    """Fail (CI) or skip (elsewhere) when PostgreSQL is missing."""
    problem = postgres_problem()
    if problem is None:
        return
    if REQUIRE_POSTGRES:
        pytest.fail(f"{problem} (HARVESTER_REQUIRE_POSTGRES=1: PostgreSQL tests are required here)")
    pytest.skip(problem)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    require_postgres()
    name = f"hv_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_URL_TEMPLATE.format(name=name)
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def _migrated_postgres() -> Iterator[str]:
    """The name of one PostgreSQL database migrated to head, for ``migrated_pg_url``; dropped at the end."""
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings

    require_postgres()
    name = f"hv_test_migrated_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        FrontierStore.open(Settings(database_url=PG_URL_TEMPLATE.format(name=name)), upgrade=True).close()
        yield name
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def migrated_pg_url(_migrated_postgres: str) -> str:
    """A PostgreSQL database migrated to head and empty, as a fresh database migrated for this test holds it (the
    migrations insert no row but Alembic's version): one database per session, its sessions of an earlier test
    ended, every table but Alembic's truncated and its ids restarted. A database of its own per test costs ~2 s of
    CREATE and DROP DATABASE (checkpoint-bound on a loaded machine); for a test of the migrations, use ``pg_url``."""
    name = _migrated_postgres
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    with psycopg.connect(PG_ADMIN_DSN.replace("dbname=postgres", f"dbname={name}"), autocommit=True) as conn:
        conn.execute("SET lock_timeout = '60s'")  # a lock left behind fails the test, it does not hang it
        tables = [row[0] for row in conn.execute(
            "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public'"
            " AND tablename <> 'alembic_version'")]
        assert tables, f"control: {name} holds the frontier's tables"
        conn.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")
    return PG_URL_TEMPLATE.format(name=name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'harvester.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same test against a SQLite file and a real PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'harvester.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """``db_url``'s two cases for a test that is not about the migrations: a fresh SQLite file (the store's first
    open makes its schema, ~0.06 s) and ``migrated_pg_url``, the session's migrated PostgreSQL database emptied,
    instead of a database created, migrated and dropped for the test (~2 s). A module opts in by overriding
    ``db_url`` with it; the migrations are tested from an empty database in tests/frontier/test_migrations.py."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'harvester.db'}"
    url: str = request.getfixturevalue("migrated_pg_url")
    return url


@pytest.fixture
def clock() -> Iterator[None]:
    """For a test that moves the harvester's clock (``CLOCK.travel_to``): back to the real time afterwards."""
    from harvester.runtime import CLOCK

    yield
    CLOCK.reset()


@pytest.fixture
def cli(tmp_path: Path, clock: None) -> Callable[..., str]:
    """``cli(*args)`` → the output of ``harvester ARGS --db <a SQLite file in tmp_path>``, run in this process
    (typer's runner); a non-zero exit fails the test with that output. The harvester's clock is put back
    afterwards, for tests that move it (``CLOCK.travel_to``)."""
    from typer.testing import CliRunner

    from harvester.cli import app

    runner = CliRunner()
    db = f"sqlite:///{tmp_path / 'harvester.db'}"

    def invoke(*args: str) -> str:
        out = runner.invoke(app, [*args, "--db", db])
        assert out.exit_code == 0, out.output
        return out.output

    return invoke


@pytest.fixture
def harvested_on_day_0(make_web, db_url: str, clock: None):  # type: ignore[no-untyped-def]
    """``await harvested_on_day_0(specs, seed=...)`` → ``(web, settings, profile)``: a test web harvested whole into
    a migrated database (``db_url``) at the start of day 0 on the harvester's clock, for the tests of later days."""
    from harvester import aharvest
    from harvester.frontier import FrontierStore
    from harvester.runtime import CLOCK
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile
    from harvester.testing.schedule import run_at

    async def harvest(specs, *, seed: int):  # type: ignore[no-untyped-def]
        web = make_web(specs, seed=seed)
        settings = Settings.load(database_url=db_url)
        profile = SiteProfile.build(seeds=tuple(web.seeds), name="site")
        with FrontierStore.open(settings, upgrade=True):
            pass
        CLOCK.travel_to(run_at(0))
        await aharvest(settings, profile)
        return web, settings, profile

    return harvest


@pytest.fixture
async def serve():
    """``await serve(handler)`` → the origin of a real aiohttp server on 127.0.0.1 answering every GET with
    ``handler(request)``: for the one-off sites a test needs beyond the test web. Stopped after the test."""
    from aiohttp import web

    runners: list[web.AppRunner] = []

    async def start(handler) -> str:  # type: ignore[no-untyped-def]
        app = web.Application()
        app.router.add_get("/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    yield start
    for runner in runners:
        await runner.cleanup()
