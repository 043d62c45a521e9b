"""Database faults: a SQLite file locked by another process, a full disk under the SQLite file, and PostgreSQL
restarted in the middle of an extraction. Each ends in a clear StoreError or a bounded wait, never in
corruption (PRAGMA integrity_check), and a rerun completes without refetching completed work.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harvester import phases
from harvester.errors import StoreError
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb

from .private_pg import PrivatePostgres

LOCKER = (
    "import sqlite3, sys\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
    "c.execute('BEGIN EXCLUSIVE')\n"
    "c.execute('UPDATE hosts SET failures = failures')\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)
"""Another process holding the SQLite write lock until its stdin closes."""


class Locker:
    def __init__(self, db: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


EXTRACT = (
    "import asyncio, sys\n"
    "from harvester import phases\n"
    "from harvester.frontier import FrontierStore\n"
    "from harvester.settings import Settings; from harvester.site_profile import SiteProfile\n"
    "url = sys.argv[1] if '://' in sys.argv[1] else 'sqlite:///' + sys.argv[1]\n"
    "settings = Settings.load(database_url=url)\n"
    "profile = SiteProfile.build(seeds=tuple(sys.argv[2:]))\n"
    "async def main():\n"
    "    with FrontierStore.open(settings) as store:\n"
    "        await phases.extract(store, settings, profile)\n"
    "asyncio.run(main())\n"
)
"""Extraction in a process of its own (``python -c EXTRACT DB SEED...``)."""


def extract_in_process(db: Path | str, seeds: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", EXTRACT, str(db), *seeds], capture_output=True, text=True,
                          timeout=300, cwd=cwd)  # a bound, generous: 127 s at load ~35


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def done_details(web: TestWeb, name: str, states: dict[str, tuple[str, str | None]]) -> list[str]:
    return [u for u in web.truth[name].allowed_detail_urls() if states.get(u, ("",))[0] == "done"]


@pytest.fixture
def small_web() -> Iterator[TestWeb]:
    with TestWeb([HostSpec("a", pages=24)], seed=3) as web:
        yield web


async def discovered(settings: Settings, profile: SiteProfile) -> None:
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)


async def extracted(settings: Settings, profile: SiteProfile) -> dict[str, tuple[str, str | None]]:
    with FrontierStore.open(settings) as store:
        await phases.extract(store, settings, profile)
        return store.url_states()


# --- SQLite locked by another process ----------------------------------------------------------------------


async def test_a_locked_sqlite_file_is_a_clear_store_error_then_a_rerun_completes(small_web: TestWeb, tmp_path: Path):
    db = tmp_path / "harvester.db"
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**{"store.sqlite_busy_timeout_s": 0.3})
    profile = SiteProfile.build(seeds=tuple(small_web.seeds))
    await discovered(settings, profile)
    locker = Locker(db)
    try:
        with pytest.raises(StoreError, match="database is locked") as caught:
            await extracted(settings, profile)
        assert str(db) in str(caught.value)
    finally:
        locker.release()
    # The store already open when the lock is taken: its first write fails the same way.
    with FrontierStore.open(settings) as store:
        locker = Locker(db)
        try:
            with pytest.raises(StoreError, match="database is locked"):
                await phases.extract(store, settings, profile)
        finally:
            locker.release()
    small_web.clear_records()
    assert integrity(db) == "ok"
    states = await extracted(settings, profile)
    allowed = small_web.truth["a"].allowed_detail_urls()
    assert done_details(small_web, "a", states) == allowed
    assert integrity(db) == "ok"


async def test_a_short_lock_is_waited_out_within_the_busy_timeout(small_web: TestWeb, tmp_path: Path):
    db = tmp_path / "harvester.db"
    settings = Settings.load(database_url=f"sqlite:///{db}").with_overrides(**{"store.sqlite_busy_timeout_s": 20.0})
    profile = SiteProfile.build(seeds=tuple(small_web.seeds))
    await discovered(settings, profile)
    locker = Locker(db)
    releaser = threading.Timer(0.5, locker.release)
    releaser.start()
    try:
        states = await extracted(settings, profile)
    finally:
        releaser.cancel()
        locker.release()
    assert locker.proc.returncode == 0  # control: the lock really was held until the timer released it
    assert done_details(small_web, "a", states) == small_web.truth["a"].allowed_detail_urls()
    assert integrity(db) == "ok"


# --- disk full -----------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root); unmounted afterwards."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_stops_the_harvest_cleanly_and_loses_nothing_stored(tiny_disk: Path):
    # Big, barely compressible pages: the 2 MiB disk fills long before the site is harvested.
    # Answers paced (0.1 s each) so completions are written in batches of a few pages, as on a real site: on an idle
    # machine an instant web filled the first batch (64 pages, ~5 MB) past the disk before anything was stored.
    with TestWeb([HostSpec("a", pages=120, page_bytes=(60_000, 90_000), latency_s=0.1)], seed=4) as web:
        db = tiny_disk / "harvester.db"
        settings = Settings.load(database_url=f"sqlite:///{db}")
        profile = SiteProfile.build(seeds=tuple(web.seeds))
        await discovered(settings, profile)
        # Extraction in a process of its own, as in production: when it stops, its leases die with it.
        first = extract_in_process(db, web.seeds, tiny_disk)
        assert first.returncode != 0
        error = first.stderr.strip().splitlines()[-1]
        assert error.startswith("harvester.errors.StoreError") and "full" in error and str(db) in error, error
        assert integrity(db) == "ok"
        with FrontierStore.open(settings) as store:
            states = store.url_states()
            pages = {page.url: page for page in store.iter_pages()}
        done = done_details(web, "a", states)
        assert 0 < len(done) < len(web.truth["a"].allowed_detail_urls())  # control: the disk really filled
        # Nothing already stored is lost: every done page has its body, and the body hashes as it did.
        for url in done:
            page = pages[url]
            assert page.body and page.status == 200
        assert all(hashlib.sha256(p.body).hexdigest() for p in pages.values())
        # Free space (a bigger disk): the rerun completes and fetches no page already done.
        subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)
        web.clear_records()
        # The rerun is a new process, as after a real stop: the dead run's leases are recovered.
        rerun = extract_in_process(db, web.seeds, tiny_disk)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        with FrontierStore.open(settings) as store:
            final = store.url_states()
        asked = {r.path for r in web.records() if r.status == 200}
        assert not [u for u in done if path_of(u) in asked]
        assert done_details(web, "a", final) == web.truth["a"].allowed_detail_urls()
        assert integrity(db) == "ok"


# --- PostgreSQL restarted during extraction -------------------------------------------------------------------


@pytest.mark.postgres
async def test_postgres_restarted_during_extraction_is_survived(private_pg: PrivatePostgres, tmp_path: Path):
    """The server is the test's own: restarting the shared one (as this test did) closed the connections of every
    other test running beside it."""
    pg_url = private_pg.url
    with TestWeb([HostSpec("a", pages=60, latency_s=0.05)], seed=5) as web:
        settings = Settings.load(database_url=pg_url)
        profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=1)
        await discovered(settings, profile)
        web.clear_records()
        restarted = threading.Event()

        def restart_soon() -> None:
            # In the middle of the extraction: once a dozen pages were served and the writer had time to commit.
            deadline = time.monotonic() + 60
            while len(web.records()) < 12 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)
            private_pg.restart()
            restarted.set()

        restarter = threading.Thread(target=restart_soon)
        restarter.start()
        try:
            first = await asyncio.to_thread(extract_in_process, pg_url, web.seeds, tmp_path)
        finally:
            await asyncio.to_thread(restarter.join, 90)
        assert restarted.is_set()
        # Either no traceback, or the one the run ended with is the store's own error (whose driver message may
        # span lines, so the exception line is found by its name, not as the last line of stderr).
        raised = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception|Lost)): ", first.stderr, re.MULTILINE)
        assert "Traceback" not in first.stderr or (raised and raised[-1].endswith("StoreError")), first.stderr
        with FrontierStore.open(settings) as store:
            done_after_first = set(done_details(web, "a", store.url_states()))
        assert done_after_first, "control: some work completed before the restart"
        if first.returncode != 0:
            assert len(done_after_first) < len(web.truth["a"].allowed_detail_urls())  # it stopped mid-way
        web.clear_records()
        rerun = await asyncio.to_thread(extract_in_process, pg_url, web.seeds, tmp_path)
        assert rerun.returncode == 0, rerun.stderr[-2000:]
        again = {r.path for r in web.records() if r.status == 200}
        assert not [u for u in done_after_first if path_of(u) in again]
        with FrontierStore.open(settings) as store:
            final = store.url_states()
        assert done_details(web, "a", final) == web.truth["a"].allowed_detail_urls()
