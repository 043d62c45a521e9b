"""One extraction per SQLite frontier (issue 24, item 4): a second extraction process on the same file is refused
with a clear error and never interleaves; the lock dies with its holder, however it dies.

Before: a killed runner's orphan and the restarted runner's rerun extracted from one SQLite file at once, each
keeping politeness per process rather than per host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harvester import FrontierStore, phases
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.record import duplicates
from harvester.testing.sites import HostSpec

CHILD = """
import asyncio, sys
from harvester import FrontierStore, extract
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

settings = Settings.load(database_url=sys.argv[1])
profile = SiteProfile.build(seeds=tuple(sys.argv[2:]), per_host_limit=1)
with FrontierStore.open(settings) as store:
    asyncio.run(extract(store, settings, profile))
"""
WAIT_S = 60.0


def extractor(db_url: str, seeds: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-c", CHILD, db_url, *seeds], stdout=out, stderr=subprocess.STDOUT)


async def discovered(make_web, sqlite_url):  # type: ignore[no-untyped-def]
    web = make_web([HostSpec("x", pages=40, latency_s=0.08)], seed=81)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, SiteProfile.build(seeds=tuple(web.seeds)))
    web.clear_records()
    return web, settings


def wait_for_requests(web, n: int, proc: subprocess.Popen[bytes], log: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_S
    while len(web.records()) < n:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


async def test_a_second_extraction_on_one_sqlite_file_is_refused_naming_the_file_and_holder(
    make_web, sqlite_url, tmp_path
):
    web, settings = await discovered(make_web, sqlite_url)
    first = extractor(sqlite_url, web.seeds, tmp_path / "first.log")
    try:
        wait_for_requests(web, 3, first, tmp_path / "first.log")  # it holds the lock: taken before any request
        # ... and holds it until the second has been answered: started on a loaded machine, the second came up
        # after the first had finished (and let go of the lock), and ran.
        first.send_signal(signal.SIGSTOP)
        second = extractor(sqlite_url, web.seeds, tmp_path / "second.log")
        assert second.wait(timeout=WAIT_S) != 0
        first.send_signal(signal.SIGCONT)
        said = (tmp_path / "second.log").read_text()
        database = sqlite_url.removeprefix("sqlite:///")
        assert "FrontierBusy" in said and f"pid {first.pid}" in said and database in said, said
        assert "PostgreSQL" in said, said  # and what to do instead
        assert first.wait(timeout=WAIT_S) == 0, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
    assert duplicates(web.records()) == {}
    assert max(r.in_flight for r in web.records()) == 1  # one extraction's politeness: limit 1, never 2
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    assert all(states[url][0] == "done" for url in web.truth["x"].allowed_detail_urls())


async def test_the_lock_dies_with_its_holder(make_web, sqlite_url, tmp_path):
    web, settings = await discovered(make_web, sqlite_url)
    first = extractor(sqlite_url, web.seeds, tmp_path / "first.log")
    wait_for_requests(web, 3, first, tmp_path / "first.log")
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = extractor(sqlite_url, web.seeds, tmp_path / "second.log")
    assert second.wait(timeout=WAIT_S) == 0, (tmp_path / "second.log").read_text()
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    assert all(states[url][0] == "done" for url in web.truth["x"].allowed_detail_urls())
