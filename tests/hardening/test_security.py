"""Security: no request leaves the configured scope (redirects included), only http(s) is ever fetched, a
database password never reaches logs, results or artifacts, and no file is named after a URL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from harvester import phases
from harvester.errors import StoreError
from harvester.fetch.engine import PoliteClient
from harvester.frontier import FrontierStore
from harvester.records import ErrorClass
from harvester.rules.admission import Site
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb

SECRET = "s3cret-Pa55word"


@pytest.fixture
def two_hosts() -> Iterator[TestWeb]:
    with TestWeb([HostSpec("a", pages=16, hostile=True), HostSpec("outside", pages=4)], seed=9) as web:
        yield web


def away(web: TestWeb, target: str) -> str:
    return web.url("a", "/hostile/redirect-out?to=" + quote(target, safe=""))


async def test_a_harvest_never_requests_a_host_outside_its_scope_even_through_redirects(two_hosts: TestWeb,
                                                                                       tmp_path: Path):
    web = two_hosts
    outside = web.url("outside", "/")
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'h.db'}")
    # Seeds on host a only; one of them redirects to the other host, one to another scheme.
    seeds = (web.url("a", "/"), away(web, outside), away(web, "ftp://127.0.0.1/file.txt"))
    profile = SiteProfile.build(seeds=seeds, listing_patterns=(r"/hostile/redirect-out",))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        states = store.url_states()
    records = web.records()
    assert [r for r in records if r.host == "outside"] == []
    assert not [u for u in states if u.startswith(web.origin("outside"))]
    # Control: both redirecting seeds were asked (the bare route, linked from the hostile index, answers 404).
    assert [r.status for r in records if r.path.startswith("/hostile/redirect-out?to=")] == [302, 302]
    assert all(states[u][0] == "done" for u in web.truth["a"].allowed_detail_urls())


async def test_redirects_out_of_scope_or_to_other_schemes_are_refused_without_a_request(two_hosts: TestWeb):
    web = two_hosts
    settings = Settings.load()
    profile = SiteProfile.build(seeds=(web.url("a", "/"),))
    site = Site(settings, profile)
    async with PoliteClient(settings, in_scope=site.in_scope, seeds=profile.seeds) as client:
        out = await client.fetch(away(web, web.url("outside", "/")))
        ftp = await client.fetch(away(web, "ftp://127.0.0.1/file.txt"))
        file = await client.fetch(away(web, "file:///etc/passwd"))
        inside = await client.fetch(away(web, web.url("a", "/")))  # control: an in-scope hop is followed
    assert out.error_class is ErrorClass.OUT_OF_SCOPE and out.body is None
    assert ftp.error_class is ErrorClass.OUT_OF_SCOPE and file.error_class is ErrorClass.OUT_OF_SCOPE
    assert inside.ok and inside.final_url.rstrip("/") == web.origin("a")
    assert [r for r in web.records() if r.host == "outside"] == []


@pytest.mark.parametrize(
    "url", ["ftp://127.0.0.1/x", "file:///etc/passwd", "javascript:alert(1)", "data:text/html,hi", "gopher://127.0.0.1/"]
)
async def test_only_http_and_https_are_ever_fetched(url: str, two_hosts: TestWeb):
    async with PoliteClient(Settings.load()) as client:
        result = await client.fetch(url)
    assert result.error_class is ErrorClass.OUT_OF_SCOPE and result.status is None and result.bytes_read == 0
    assert two_hosts.records() == []


# --- secrets ---------------------------------------------------------------------------------------------------


@pytest.fixture
def pg_url_with_password(pg_url: str) -> str:
    """The same database with a password in the URL (the server trusts loopback, so any password is accepted)."""
    with_password = pg_url.replace("postgres@", f"postgres:{SECRET}@", 1)
    assert SECRET in with_password
    return with_password


@pytest.mark.postgres
async def test_a_database_password_never_reaches_logs_results_or_artifacts(
    pg_url_with_password: str, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    settings = Settings.load(database_url=pg_url_with_password)
    with TestWeb([HostSpec("a", pages=12, hostile=True)], seed=2) as web:
        profile = SiteProfile.build(seeds=tuple(web.seeds))
        with FrontierStore.open(settings, upgrade=True) as store:
            found = await phases.discover(store, settings, profile)
            done = await phases.extract(store, settings, profile)
            stats = store.stats().as_dict()
            display = store.url_display
        run_id = await phases.begin_run(settings, "extract", profile)
        result, final_stats = await phases.finish_run(settings, run_id, "extract", [done])
    artifacts = json.dumps([found.as_dict(), done.as_dict(), stats, result.as_dict(), final_stats], default=str)
    assert done.counters["state:done"] > 0  # control: the harvest ran against this database
    assert SECRET not in artifacts
    assert SECRET not in display and "***" in display
    assert SECRET not in caplog.text
    with psycopg.connect(pg_url_with_password.replace("postgresql+psycopg", "postgresql")) as conn:
        rows = conn.execute("SELECT counters::text, profile::text FROM runs").fetchall()
    assert rows and not [row for row in rows if SECRET in "".join(str(c) for c in row)]


@pytest.mark.postgres
def test_a_database_error_names_the_database_without_its_password(pg_url_with_password: str):
    missing = pg_url_with_password.rsplit("/", 1)[0] + "/hv_no_such_database"
    with pytest.raises(StoreError) as caught:
        FrontierStore.open(Settings.load(database_url=missing), upgrade=True)
    assert "hv_no_such_database" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value.__cause__ or "")


# --- files ---------------------------------------------------------------------------------------------------


async def test_no_file_is_ever_named_after_a_url(two_hosts: TestWeb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # Bodies live in the database (compressed), never in files named after URLs: a harvest leaves only the
    # database files behind in its working directory.
    monkeypatch.chdir(tmp_path)
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'h.db'}")
    profile = SiteProfile.build(seeds=(two_hosts.url("a", "/"),))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        assert store.stats().pages > 0
    left = sorted(p.name for p in tmp_path.rglob("*"))
    assert set(left) <= {"h.db", "h.db-wal", "h.db-shm", "h.db.extract.lock"}, left  # the lock: phases.extraction_lock
