"""The scheduled daily re-crawl, run as cron runs it: each day's run starts at the same clock time as the day
before's (a few minutes either side), on a test web that changed overnight (5% of pages edited, 2% new, 1%
deleted), with nothing forced due. After every day the snapshot (``iter_pages(latest=True)``, what
``export --latest`` writes) equals the site: no page missing, no deleted page live, no change the site announced
(a newer sitemap lastmod, an entry in an Atom feed's head) held in its old version; and a day costs at most 2% of the
first harvest's bytes beyond the changed and new pages themselves.

One host's sitemap lastmod is a publication date that never moves on edits (it announces nothing); one host
pages its feeds by RFC 5005 archives. Then the same schedule through the CLI, and killed at 20 moments.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec, TestWeb
from harvester.testing.forkserver import ForkServer
from harvester.testing.record import RequestRecord
from harvester.testing.schedule import run_at, site_versions, snapshot_gap

SPECS = [
    HostSpec("a", pages=300),
    HostSpec("b", pages=300, sitemap_lastmod="published"),
    HostSpec("c", pages=300, feed_paging="archive"),
]
SHIFTS_S = (0.0, -600.0, 600.0)
"""Day d's run starts SHIFTS_S[d % 3] seconds off the day before's clock time: cron's minute must not matter."""
DAYS = 7
HARVESTER = str(Path(sys.executable).with_name("harvester"))


def held_versions(store: FrontierStore) -> dict[str, str]:
    """URL → the ETag of its latest stored page (the test web's ETag names the page's version)."""
    return {page.url: page.etag or "" for page in store.iter_pages(latest=True)}


def own_bytes(web: TestWeb, records: list[RequestRecord], held: dict[str, str]) -> int:
    """Bytes of the day's answers that brought page content we did not hold: new pages and changed ones."""
    total = 0
    for record in records:
        if record.status != 200:
            continue
        truth = web.truth[record.host]
        page = truth.model.by_path.get(record.path)
        if page is not None and held.get(truth.origin + record.path) != f'W/"p{page.id}v{page.version}"':
            total += record.bytes
    return total


async def test_a_week_of_daily_recrawls_keeps_the_snapshot_equal_to_the_site(make_web, sqlite_url, clock):
    web = make_web(SPECS, seed=19)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        await aharvest(settings, profile)
        first_bytes = sum(r.bytes for r in web.records())
        gap = snapshot_gap(store, web)
        assert gap.equal and gap.expected > 800, gap.summary()
        for day in range(1, DAYS + 1):
            held = held_versions(store)
            change = web.advance_day(changed=0.05, new=0.02, gone=0.01)
            web.clear_records()
            CLOCK.travel_to(run_at(day, shift_s=SHIFTS_S[day % 3]))
            await arecrawl(settings, profile)
            gap = snapshot_gap(store, web)
            assert gap.equal, (day, gap.summary(), sorted(gap.missing | gap.still_live | gap.stale_announced)[:5])
            records = web.records()
            spent, own = sum(r.bytes for r in records), own_bytes(web, records, held)
            assert spent <= 0.02 * first_bytes + own, (day, spent, own, first_bytes)
            # Control: the day changed what it says, and the changes reached the site.
            assert change.all("gone") and change.all("changed") and change.all("new")
            states = store.url_states()
            assert all(states[url][0] == "gone" for url in change.all("gone") if url in states)


async def test_the_minute_the_schedule_fires_does_not_matter(make_web, tmp_path, clock):
    """The same day-2 re-crawl started 10 minutes early, on time and 10 minutes late finds the same changes."""
    web = make_web(SPECS[:2], seed=23)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    first = Settings.load(database_url=f"sqlite:///{tmp_path / 'day0.db'}")
    with FrontierStore.open(first, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        await aharvest(first, profile)
    web.advance_day(changed=0.05, new=0.02, gone=0.01)
    fetched: dict[float, set[tuple[str, str]]] = {}
    for shift in (-600.0, 0.0, 600.0):
        copy = tmp_path / f"day1{shift:+.0f}.db"
        copy.write_bytes((tmp_path / "day0.db").read_bytes())
        settings = Settings.load(database_url=f"sqlite:///{copy}")
        web.clear_records()
        with FrontierStore.open(settings) as store:
            CLOCK.travel_to(run_at(1, shift_s=shift))
            await arecrawl(settings, profile)
            gap = snapshot_gap(store, web)
        assert gap.equal, (shift, gap.summary())
        fetched[shift] = {(r.host, r.path) for r in web.records() if r.status == 200}
        # What announces change is asked again, conditionally, even inside its cache lifetime: robots.txt too.
        robots = [r for r in web.records() if r.path == "/robots.txt"]
        assert sorted(r.host for r in robots) == sorted(web.names), shift
        assert all(r.status == 304 and (r.if_none_match or r.if_modified_since) for r in robots), shift
    assert fetched[-600.0] == fetched[0.0] == fetched[600.0]


def test_the_cli_recrawl_a_day_later_leaves_the_export_equal_to_the_site(tmp_path):
    """Through the commands a cron job runs: ``harvester harvest`` on day 0, ``harvester recrawl`` 24 h after it
    started (the clock set by HARVESTER_NOW), and ``harvester export --latest``."""
    with TestWeb(SPECS[:2], seed=29) as web:
        db = f"sqlite:///{tmp_path / 'cli.db'}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}

        def cli(when: datetime, *args: str) -> subprocess.CompletedProcess[str]:
            done = subprocess.run([HARVESTER, *args, "--db", db], capture_output=True, text=True, timeout=300,
                                  cwd=tmp_path, env={**env, "HARVESTER_NOW": when.isoformat()})
            assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
            return done

        cli(run_at(0), "harvest", *web.seeds)
        day = web.advance_day(changed=0.05, new=0.02, gone=0.01)
        cli(run_at(1, shift_s=-300.0), "recrawl")
        out = tmp_path / "latest.jsonl"
        cli(run_at(1, shift_s=900.0), "export", "--latest", "--format", "jsonl", "--output", str(out))
        exported = {}
        for line in out.read_text().splitlines():
            record = json.loads(line)
            exported[record["url"]] = record["etag"]
        site = site_versions(web)
        announced = {u for u in day.all("changed") if u in site and web.host_name(u) == "a"}
    assert announced  # control: host a announced changes by lastmod
    assert set(exported) == set(site)
    assert all(exported[u].endswith(f'v{site[u]}"') for u in announced)


# --- kill -9 at 20 moments of a week ------------------------------------------------------------------------------

CHILD = Path(__file__).with_name("daily_child.py")
KILLS = 20




@pytest.mark.slow
def test_kill_9_at_20_moments_of_a_week_loses_nothing_and_repeats_no_answered_page(tmp_path):
    specs = [HostSpec("a", pages=120, latency_s=0.04), HostSpec("b", pages=120, latency_s=0.04,
                                                                 sitemap_lastmod="published"),
             HostSpec("c", pages=120, latency_s=0.04, feed_paging="archive")]
    rng = random.Random(20_261_205)
    with TestWeb(specs, seed=31) as web:
        server = ForkServer(CHILD, web.seeds, tmp_path)
        db = tmp_path / "week.db"
        settings = Settings.load(database_url=f"sqlite:///{db}")
        details = {(name, url.split("/", 3)[3]) for name in web.names for url in web.truth[name].detail_urls()}
        repeated: list[tuple[int, str]] = []
        kills_landed = 0
        try:
            # An uninterrupted day 0 and day 1 measure how long a re-crawl takes, so the kills spread over it.
            assert server.wait(server.run(db, run_at(0))) == 0
            web.advance_day(changed=0.05, new=0.02, gone=0.01)
            started = time.monotonic()
            assert server.wait(server.run(db, run_at(1))) == 0
            span = time.monotonic() - started
            per_day = [KILLS // (DAYS - 1) + (1 if d < KILLS % (DAYS - 1) else 0) for d in range(DAYS - 1)]
            for day in range(2, DAYS + 1):
                web.advance_day(changed=0.05, new=0.02, gone=0.01)
                web.clear_records()
                begun = time.monotonic()
                answered: set[tuple[str, str]] = set()
                for _ in range(per_day[day - 2]):
                    seen = len(web.records())
                    pid = server.run(db, run_at(day) + timedelta(seconds=time.monotonic() - begun))
                    time.sleep(rng.uniform(0.05, 0.6 * span))
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid, signal.SIGKILL)
                    killed_at = time.monotonic()
                    kills_landed += server.wait(pid) == -signal.SIGKILL
                    time.sleep(0.1)  # the server logs what the dead run left in flight
                    fresh = [r for r in web.records()[seen:] if r.status == 200]
                    # Whatever a later run of the day asks again must not be a page answered well before a kill.
                    repeated += [(day, f"{r.host}{r.path}") for r in fresh if (r.host, r.path) in answered]
                    answered |= {(r.host, r.path) for r in fresh
                                 if r.end < killed_at - 0.5 and (r.host, r.path) in details}
                seen = len(web.records())
                pid = server.run(db, run_at(day) + timedelta(seconds=time.monotonic() - begun))
                assert server.wait(pid) == 0, f"day {day}: the run after the kills failed"
                repeated += [(day, f"{r.host}{r.path}") for r in web.records()[seen:]
                             if r.status == 200 and (r.host, r.path) in answered]
                with FrontierStore.open(settings) as store:
                    gap = snapshot_gap(store, web)
                assert gap.equal, (day, gap.summary())
        finally:
            server.close()
    assert repeated == [], repeated[:5]
    # Control: the kills landed inside runs. Not all can: a day's later runs have only what the killed ones left,
    # and under load they may end before their moment (14 of 20 landed once with a 15 bound).
    assert kills_landed >= KILLS // 2, kills_landed
