"""What the flows' reports say (per-host log line, discovery's per-host table, the cycle's summary, the
frontier-by-state table) against what a real loopback site was asked and what the frontier holds (stranger 47b).

The rendering functions are called on a real harvest's results, without a Prefect server: the defects were in
the figures, not in how Prefect shows them.
"""

from __future__ import annotations

import threading

from harvester import aharvest
from harvester.flows.artifacts import cycle_line
from harvester.flows.tasks import host_line
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
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
