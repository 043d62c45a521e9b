"""A count means one thing everywhere (DESIGN invariant 11), and it is the test web's truth, exactly: over days of a
changing site, budgeted runs, a cycle stopped part way and resumed, deletions and restyled pages.

The truth is the test web's own: what each day changed, added, deleted and restyled (``DayChange``), what robots.txt
allows, and the requests it answered (``web.records()``). The numbers are read where a user reads them: the cycle's
report (what the CLI summary prints, the artifact shows and the event carries: ``Cycle.changes``) and
``harvester status`` (``status_of``), which must agree with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from daily_cli import HARVESTER, CliAtHere

from harvester import aharvest, arecrawl
from harvester.cli_tables import status_of
from harvester.errors import Interrupted
from harvester.extraction import Page
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK, clear_stop, request_stop
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import CYCLE_COUNTS
from harvester.testing import HostSpec, TestWeb
from harvester.testing.schedule import run_at

SPECS = [HostSpec("a", pages=40), HostSpec("b", pages=30, sitemap_lastmod="published")]
BUDGET = 15
DOCUMENTS = (".xml", ".xml.gz", ".json")


@pytest.fixture
def clock() -> Iterator[None]:
    yield
    CLOCK.reset()
    clear_stop()


def page_requests(web: TestWeb) -> list[Any]:
    """Requests for pages (details and listings), not robots.txt, sitemaps or feeds: what ``fetched`` counts."""
    return [r for r in web.records()
            if r.path != "/robots.txt" and not r.path.split("?")[0].endswith(DOCUMENTS) and "/feeds/" not in r.path]


def allowed(web: TestWeb) -> set[str]:
    return {url for name in web.names for url in web.truth[name].allowed_detail_urls()}


def counts(changes: Any) -> dict[str, int]:
    return {name: changes[name] for name in CYCLE_COUNTS}


def assert_everywhere(settings: Settings, changes: Any, expected: dict[str, int]) -> None:
    """The cycle's report equals the truth, and ``harvester status`` reports the same numbers for it."""
    got = counts(changes)
    assert {k: got[k] for k in expected} == expected, (got, expected)
    status = status_of(settings)["last_cycle"]
    assert status["id"] == changes["cycle"] and counts(status) == got, (status, got)


async def test_every_count_equals_the_test_webs_truth_over_days_budgets_and_a_resumed_cycle(make_web, db_url, clock):
    web = make_web(SPECS, seed=41)
    settings = Settings.load(database_url=db_url)
    budgeted = SiteProfile.build(seeds=tuple(web.seeds), name="site", max_pages_per_host=BUDGET)
    daily = SiteProfile.build(seeds=tuple(web.seeds), name="site")
    with FrontierStore.open(settings, upgrade=True):
        # Day 0: budgeted harvests until nothing is left. A found URL is not new until it is stored, and a URL a
        # budget deferred is new when it is first fetched, never changed.
        left = {name: set(web.truth[name].allowed_detail_urls()) for name in web.names}
        runs = 0
        while any(left.values()):
            CLOCK.travel_to(run_at(0, shift_s=600.0 * runs))
            web.clear_records()
            cycle = await aharvest(settings, budgeted)
            taken = {name: min(BUDGET, len(urls)) for name, urls in left.items()}
            held = set(stored_urls(settings))
            left = {name: urls - held for name, urls in left.items()}
            assert_everywhere(settings, cycle.changes, {
                "new": sum(taken.values()), "changed": 0, "restyled": 0, "gone": 0, "missing": 0,
                "deferred": sum(len(urls) for urls in left.values()), "fetched": len(page_requests(web)),
                "failed": 0,
            })
            runs += 1
        assert runs == 3  # 40 and 30 allowed-ish pages at 15 a run: the budget did defer

        # Days 1-2: the site changes overnight; the re-crawl asks everything again (conditionally).
        for day in (1, 2):
            before = allowed(web)
            change = web.advance_day(changed=0.1, new=0.05, gone=0.05, restyled=0.1)
            after = allowed(web)
            web.clear_records()
            CLOCK.travel_to(run_at(day))
            if day == 2:  # killed part way: stopped after a few pages, the cycle left open, then resumed
                cycle = await _stopped_then_resumed(settings, daily)
            else:
                cycle = await arecrawl(settings, daily, refresh=True)
            requests = page_requests(web)
            assert_everywhere(settings, cycle.changes, {
                "new": len(change.all("new") & after), "changed": len(change.all("changed") & before),
                "restyled": len(change.all("restyled") & before), "gone": len(change.all("gone") & before),
                "missing": 0, "deferred": 0, "fetched": len(requests), "failed": 0,
                "not_modified": sum(1 for r in requests if r.status == 304),
            })
            # "Last extraction" per host: the extraction's own requests (detail pages), not discovery's through
            # the same client (robots.txt, sitemaps, feeds, listing pages).
            hosts = status_of(settings)["last_extract"]["hosts"]
            for name in web.names:
                details = {page.path for page in web.truth[name].model.pages}
                asked = [r for r in requests if r.host == name and r.path in details]
                assert hosts[web.origin(name)]["fetched"] == len(asked), (name, hosts[web.origin(name)])
                assert hosts[web.origin(name)]["not_modified"] == sum(1 for r in asked if r.status == 304)
            # Control: the day did change each kind, so equality above is not of zeros.
            assert all(change.all(kind) for kind in ("new", "changed", "restyled", "gone")), change
            gone_urls = set(cycle.changes["gone_urls"])
            assert not gone_urls & set(cycle.changes["changed_urls"])  # gone is never also changed
            assert set(cycle.changes["restyled_urls"]) == change.all("restyled") & before


def stored_urls(settings: Settings) -> list[str]:
    with FrontierStore.open(settings) as store:
        return [page.url for page in store.iter_pages(latest=True)]


async def _stopped_then_resumed(settings: Settings, profile: SiteProfile) -> Any:
    """A re-crawl stopped after its fifth page (``request_stop``: the run drains and ends in ``Interrupted``,
    as a killed worker's cycle ends unfinished), then run again: the second attempt resumes the same cycle."""
    seen = 0

    def stop_after_five(page: Page) -> dict[str, Any]:
        nonlocal seen
        seen += 1
        if seen == 5:
            request_stop("test: the worker is killed")
        return {}

    with pytest.raises(Interrupted):
        await arecrawl(settings, profile, refresh=True, extractor=stop_after_five)
    clear_stop()
    with FrontierStore.open(settings) as store:
        first = store.last_cycle()
    assert first is not None and first["status"] == "running"
    cycle = await arecrawl(settings, profile, refresh=True)
    assert cycle.changes["cycle"] == first["id"]  # one cycle, both attempts
    return cycle


async def test_a_page_restyled_outside_its_main_text_is_a_new_version_exported_and_labelled(make_web, sqlite_url,
                                                                                             tmp_path):
    """Bytes that change outside the main text are stored (the latest version is what the site serves now) and
    handed over by ``export --latest``; the version is labelled ``restyled``, the earlier one kept; listing pages'
    bytes are kept as versions too."""
    web = make_web([HostSpec("a", pages=30)], seed=43)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="site")
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        change = web.advance_day(changed=0.0, new=0.0, gone=0.0, restyled=0.2)
        restyled = change.all("restyled") & allowed(web)
        assert len(restyled) >= 4
        cycle = await arecrawl(settings, profile, refresh=True)
        assert (cycle.changes["restyled"], cycle.changes["changed"]) == (len(restyled), 0), counts(cycle.changes)
        versions: dict[str, list[Any]] = {}
        for page in store.iter_pages():
            versions.setdefault(page.url, []).append(page)
        listings = [page for page in store.iter_pages(kinds=None) if page.kind == "listing"]
    for url in restyled:
        old, new = versions[url]
        assert (old.change, new.change) == ("new", "restyled")
        assert old.content_hash == new.content_hash and old.payload_digest != new.payload_digest
        assert b'data-edition="1"' in new.body and b"data-edition" not in old.body
        assert new.etag is not None and new.etag.endswith('s1"')
    assert all(len(v) == 1 for url, v in versions.items() if url not in restyled)  # nothing else was a new version
    # The listing pages the harvest read are kept, bytes and all.
    assert {page.url for page in listings} >= set(web.truth["a"].listing_urls()[:1])
    assert all(b"<a href=" in page.body for page in listings)
    out = tmp_path / "latest.jsonl"
    done = subprocess.run([HARVESTER, "export", "--latest", "-o", str(out), "--db", sqlite_url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = {line["url"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert {url: exported[url]["etag"] for url in restyled} == {url: versions[url][1].etag for url in restyled}
    assert {url: exported[url]["change"] for url in restyled} == dict.fromkeys(restyled, "restyled")
    assert {line["kind"] for line in exported.values()} == {"detail"}  # the snapshot: the site's detail pages
    # The default export: every stored version of every kind, labelled, with its payload digest; it ends well
    # (no version taken for damage) and holds the listing pages' bytes too.
    every = tmp_path / "every.jsonl"
    done = subprocess.run([HARVESTER, "export", "-o", str(every), "--db", sqlite_url],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [json.loads(line) for line in every.read_text().splitlines()]
    assert len(lines) == sum(len(v) for v in versions.values()) + len(listings)
    assert {line["url"] for line in lines if line["kind"] == "listing"} == {page.url for page in listings}
    labels = sorted(line["change"] for line in lines if line["url"] in restyled)
    assert labels == sorted(["new", "restyled"] * len(restyled))
    assert all(len(line["payload_digest"]) == 64 for line in lines)


def test_a_recrawl_killed_9_and_run_again_reports_the_whole_cycle_in_status(tmp_path, clock):
    """Through the commands: ``harvester recrawl --refresh`` killed -9 part way (a dead worker: nothing closes its
    cycle), run again, then ``harvester status --json``: the last cycle's counts are both attempts', and equal
    the test web's truth."""
    with TestWeb([HostSpec("a", pages=80, latency_s=0.02)], seed=44) as web:
        db = f"sqlite:///{tmp_path / 'killed.db'}"
        cli = CliAtHere(db, tmp_path)  # in this process but for the run killed -9

        cli(run_at(0), "harvest", *web.seeds)
        before = allowed(web)
        change = web.advance_day(changed=0.1, new=0.05, gone=0.05, restyled=0.1)
        web.clear_records()
        killed = subprocess.Popen(cli.command(run_at(1), "recrawl", "--refresh"), cwd=tmp_path, env=cli.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        details = {page.path for page in web.truth["a"].model.pages}
        while sum(1 for r in web.records() if r.path in details) < 25:  # part way through the pages
            assert killed.poll() is None, "the re-crawl ended before it could be killed"
            time.sleep(0.02)
        os.killpg(killed.pid, signal.SIGKILL)
        assert killed.wait() == -signal.SIGKILL
        asked_before_kill = len(web.records())
        cli(run_at(1) + timedelta(minutes=5), "recrawl", "--refresh")
        assert len(web.records()) > asked_before_kill  # control: the second attempt had work left
        status = json.loads(cli(run_at(1) + timedelta(minutes=30), "status", "--json"))["last_cycle"]
        requests, after = page_requests(web), allowed(web)
    truth = {
        "new": len(change.all("new") & after), "changed": len(change.all("changed") & before),
        "restyled": len(change.all("restyled") & before), "gone": len(change.all("gone") & before),
        "missing": 0, "deferred": 0, "failed": 0,
        # Each page once in the cycle (invariant 3); one answered but not yet written when the kill came is asked
        # again and counted once.
        "fetched": len({(r.host, r.path) for r in requests}),
    }
    assert {key: status[key] for key in truth} == truth, (status, truth)
    assert status["status"] == "completed" and status["kind"] == "recrawl"
