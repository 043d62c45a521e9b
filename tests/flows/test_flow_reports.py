"""What the flows' reports say (per-host log line, discovery's per-host table, the cycle's summary, the
frontier-by-state table) against what a real loopback site was asked and what the frontier holds (stranger 47b).

The rendering functions are called on a real harvest's results, without a Prefect server: the defects were in
the figures, not in how Prefect shows them.
"""

from __future__ import annotations

import threading

from harvester import aharvest
from harvester.flows.artifacts import cycle_line, cycle_markdown, host_rows, summary_markdown
from harvester.flows.tasks import host_line
from harvester.frontier import FrontierStore
from harvester.phases import PhaseResult
from harvester.phases.cycle_state import CycleState
from harvester.phases.cycles import LocalSteps, harvest_steps
from harvester.phases.discover_phase import discover
from harvester.phases.runs import begin_run, finish_run, open_store, site_hosts, site_origins
from harvester.runtime import siblings
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

PAGES = ("/p1", "/p2", "/p3", "/p4", "/p5")
BROKEN = {"/p4", "/p5"}


def _page(path: str) -> bytes:
    return f"<html><head><title>{path}</title></head><body><article><p>{path} " .encode() + b"text " * 60 + (
        b"</p></article></body></html>")


async def test_the_per_host_line_counts_failed_urls_as_the_summary_does(db_url):
    """Two pages that always answer 500: the summary says "2 failed (http_5xx=2)"; the host's line said failed=0
    beside errors=http_5xx=2."""
    asked: list[str] = []
    lock = threading.Lock()

    def answer(request: Asked) -> Answer:
        with lock:
            asked.append(request.path)
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {path: None for path in PAGES})
        if request.path in BROKEN:
            return 500, {"Content-Type": "text/plain"}, b"broken"
        return 200, {"Content-Type": "text/html"}, _page(request.path)

    with threaded_site(answer) as origin:
        settings = Settings.load(database_url=db_url)
        profile = SiteProfile.build(seeds=(origin + "/",), name="failing")
        with FrontierStore.open(settings, upgrade=True):
            cycle = await aharvest(settings, profile)
    failed = cycle.changes["failed"]
    assert failed >= 2 and failed == sum(1 for path in asked if path in BROKEN), (failed, asked)
    assert f"{failed} failed (http_5xx={failed})" in cycle_line("harvest", "failing", cycle)
    line = host_line(origin, cycle.extract.hosts[origin])
    assert f" failed={failed} " in line and f"errors=http_5xx={failed}" in line, line


class _PerHostSteps(LocalSteps):
    """The library's cycle with discovery as the discover flow runs it: one call per host (its task), all
    through the cycle's one client, merged into one run."""

    async def discover(self, *, refresh: bool, cycle: CycleState | None = None) -> PhaseResult:
        run_id = await begin_run(self.settings, "discover", self.profile)

        async def one(origin: str) -> PhaseResult:
            async with open_store(self.settings) as store:
                return await discover(store, self.settings, self.profile, hosts=[origin], run_id=run_id,
                                      refresh=refresh, cycle=cycle)

        parts = await siblings({origin: one(origin) for origin in site_hosts(self.settings, self.profile)})
        result, _ = await finish_run(self.settings, run_id, "discover", parts)
        return result


async def test_discovery_hosts_table_counts_each_host_once_on_a_two_host_site(db_url):
    """Two hosts discovered by two tasks through the cycle's one client: each task listed both hosts' tallies, so
    the table counted every request (and byte) twice; one-host sites were right."""
    served: dict[str, list[int]] = {}
    lock = threading.Lock()

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            status, headers, body = robots_txt(request.origin)
        elif request.path == "/sitemap.xml":
            status, headers, body = sitemap(request.origin, {path: None for path in PAGES[:2]})
        else:
            status, headers, body = 200, {"Content-Type": "text/html"}, _page(request.path)
        with lock:
            served.setdefault(request.origin, []).append(len(body))
        return status, headers, body

    with threaded_site(answer) as first, threaded_site(answer) as second:
        settings = Settings.load(database_url=db_url)
        profile = SiteProfile.build(seeds=(first + "/", second + "/"), name="two")
        with FrontierStore.open(settings, upgrade=True):
            cycle = await harvest_steps(_PerHostSteps(settings, profile), settings, profile)
    rows = {row["host"]: row for row in host_rows(cycle.discover)}
    assert set(rows) == {first, second}, rows
    for origin in (first, second):
        # At most what the host answered in the whole cycle (discovery's own requests, and extraction's that came
        # through the shared client meanwhile): counted twice, discovery's alone were more than that.
        assert 0 < rows[origin]["fetched"] <= len(served[origin]), (origin, rows[origin], served[origin])
        assert 0 < rows[origin]["bytes"] <= sum(served[origin]), (origin, rows[origin], served[origin])


async def test_found_by_discovery_counts_the_urls_a_listing_page_added(db_url):
    """The sitemap names one page, the home page (a listing page) links two more: the cycle's "found by discovery"
    is the three URLs new to the frontier (it said 1, only the sitemap's)."""

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {"/item/1": None})
        if request.path == "/":
            links = "".join(f'<li><a href="/item/{n}">item {n}</a></li>' for n in (2, 3))
            return 200, {"Content-Type": "text/html"}, f"<html><body><ul>{links}</ul></body></html>".encode()
        return 200, {"Content-Type": "text/html"}, _page(request.path)

    with threaded_site(answer) as origin:
        settings = Settings.load(database_url=db_url)
        profile = SiteProfile.build(seeds=(origin + "/",), name="listed")
        with FrontierStore.open(settings, upgrade=True) as store:
            cycle = await aharvest(settings, profile)
            urls = set(store.url_states())
    added = urls - {origin + "/"}  # the seed is given, not found
    assert {f"{origin}/item/{n}" for n in (1, 2, 3)} <= added, urls
    assert cycle.found == len(added), (cycle.found, sorted(added))
    assert f"| found by discovery | {len(added)} |" in cycle_markdown("harvest", "listed", cycle)


async def test_frontier_by_state_counts_the_sites_own_urls_on_a_shared_database(make_web, db_url):
    """Two sites in one database (the documented layout): a run's "Frontier by state" counted both under one
    site's heading; it counts that site's hosts, and the whole database only when it says so."""
    web = make_web([HostSpec("a", pages=12), HostSpec("b", pages=20)], seed=473)
    settings = Settings.load(database_url=db_url)
    first = SiteProfile.build(seeds=(web.seeds[0],), name="first")
    second = SiteProfile.build(seeds=(web.seeds[1],), name="second")
    with FrontierStore.open(settings, upgrade=True) as store:
        cycle = await aharvest(settings, first)
        await aharvest(settings, second)
        stats = store.stats().as_dict()
        states = store.url_states()
    origin = web.origin("a")
    own = sum(1 for url in states if url.startswith(origin + "/"))
    assert 0 < own < len(states)
    hosts = await site_origins(settings, first)
    assert hosts == [origin]
    page = summary_markdown(cycle.extract, title="Extraction of first", run_id=1, stats=stats, hosts=hosts)
    assert "## Frontier by state (this site's 1 host)" in page, page
    table = page.split("## Frontier by state")[1]
    shown = sum(int(row.split("|")[2]) for row in table.splitlines() if row.startswith("| ") and "URLs" not in row)
    assert shown == own, (shown, own, page)
    whole = summary_markdown(cycle.extract, title="Extraction of first", run_id=1, stats=stats)
    assert "## Frontier by state (the whole database, every site)" in whole, whole
