"""A day on which robots.txt is unavailable (503), as the CLI and ``export --latest`` tell it, against a server of
our own and its log, over daily runs on the harvester's clock (``HARVESTER_NOW`` 24 h apart), SQLite and PostgreSQL.

RFC 9309 §2.3.1.4: a 5xx robots.txt means "assume complete disallow" for the crawl, i.e. send the host nothing.
It is no verdict on the pages: the defect turned every stored URL of the host ``disallowed`` (out of the snapshot,
back the day after), said ``failed: 0`` and nothing else, and counted the harvester's own sitemap probes
(/sitemap_index.xml, ...) as URLs discovery found that robots.txt refuses, and as problems of the site's sitemaps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from daily_cli import HTML, article, cli_on, conditional, run_day

from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, sitemap, threaded_site

PAGES = ("/a", "/b", "/c")


@dataclass
class Site:
    """Three pages in a sitemap; on the days in ``down`` everything (robots.txt included) answers 503. Pages answer
    304 to their ETag; every answer is logged as (day, path, status)."""

    down: set[int]
    day: int = 0
    log: list[tuple[int, str, int]] = field(default_factory=list)

    def respond(self, request: Asked) -> Answer:
        if self.day in self.down:
            answer: Answer = (503, {"Content-Type": "text/plain"}, b"down for maintenance")
        elif request.path == "/robots.txt":
            answer = (200, {"Content-Type": "text/plain"},
                      f"User-agent: *\nDisallow:\nSitemap: {request.origin}/sitemap.xml\n".encode())
        elif request.path == "/sitemap.xml":
            answer = sitemap(request.origin, dict.fromkeys(PAGES, run_at(0).isoformat()))
        elif request.path in PAGES:
            answer = conditional((200, {**HTML, "ETag": f'"{request.path[1:]}"'}, article(f"Page {request.path[1:]}")),
                                 request)
        else:
            answer = (404, {"Content-Type": "text/plain"}, b"")
        self.log.append((self.day, request.path, answer[0]))
        return answer

    def asked(self, day: int) -> list[tuple[str, int]]:
        return sorted((path, status) for d, path, status in self.log if d == day and path != "/robots.txt")


@pytest.fixture
def cli(db_url: str, clock: None) -> Callable[..., str]:
    return cli_on(db_url)


def runs(cli: Callable[..., str], site: Site, origin: str) -> Callable[[int], str]:
    """``run(n)``: day ``n``'s run (``run_day``: the harvest on day 0, a re-crawl after), its output."""
    def run(n: int) -> str:
        site.day = n
        return run_day(cli, n, origin)
    return run


def test_a_day_without_robots_txt_defers_the_host_and_keeps_its_pages_in_the_snapshot(
    cli: Callable[..., str], tmp_path: Path,
) -> None:
    """Day 0 harvests three pages. Day 1 robots.txt (and everything) answers 503: no page is asked, none is refused,
    ``export --latest`` still has the three with day 0's content, and the run says they were deferred, why, and that
    nothing failed or was disallowed. Day 2 robots.txt is back: the pages are
    asked conditionally (304) and nothing was lost."""
    site = Site(down={1})

    def latest(n: int) -> dict[str, str]:
        out = tmp_path / f"latest-{n}.jsonl"
        cli("export", "--latest", "-o", str(out))
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        return {row["url"].removeprefix(origin): row["fetched_at"] for row in rows}

    with threaded_site(site.respond) as origin:
        run = runs(cli, site, origin)
        run(0)
        assert site.asked(0) and all((path, 200) in site.asked(0) for path in PAGES), site.asked(0)
        day0 = latest(0)
        assert sorted(day0) == list(PAGES)

        out = run(1)
        assert site.asked(1) == [], site.asked(1)  # robots.txt alone: no page, no sitemap, no probe
        assert latest(1) == day0  # every page, its day-0 version
        figures = json.loads(cli("status", "--json"))
        assert not figures["by_state"].get("disallowed"), figures["by_state"]
        cycle = figures["last_cycle"]
        assert cycle["deferred"] == len(PAGES) and cycle["failed"] == 0, cycle
        shown = " ".join(cli("status").split())
        assert "robots.txt unavailable (http_503)" in shown, shown
        assert "deferred: 3" in " ".join(out.split()), out

        run(2)
        assert [asked for asked in site.asked(2) if asked[0] in PAGES] == [(path, 304) for path in PAGES], \
            site.asked(2)
        assert latest(2) == day0  # 304s: the same versions
        figures = json.loads(cli("status", "--json"))
        assert figures["by_state"] == {"done": len(PAGES), "missing": 1}, figures["by_state"]  # the home page 404s
        assert figures["last_cycle"]["deferred"] == 0 and figures["last_cycle"]["failed"] == 0


def test_the_harvesters_own_sitemap_probes_are_not_urls_an_unavailable_robots_txt_refuses(
    cli: Callable[..., str],
) -> None:
    """Day 1 robots.txt answers 503 and names no sitemap: the well-known sitemap paths the harvester would probe
    (/sitemap.xml, /sitemap_index.xml, ...) are neither asked nor counted as URLs discovery found that robots.txt
    refuses, nor reported as problems of the site's sitemaps; the problem reported is robots.txt's."""
    site = Site(down={1})
    with threaded_site(site.respond) as origin:
        run = runs(cli, site, origin)
        run(0)
        out = run(1)
        assert site.asked(1) == [], site.asked(1)
        assert "sitemap_errors" not in out, out
        figures = json.loads(cli("status", "--json"))
        discover = figures["last_discover"]
        assert discover["robots_refused"] == 0 and figures["hosts"][origin]["robots_refused"] == 0, discover
        problems = " ".join(discover.get("problems", []))
        assert "robots.txt unavailable (http_503)" in problems and "sitemap" not in problems, problems
        shown = " ".join(cli("status").split())
        assert "Disallowed by robots.txt" not in shown, shown


def test_a_first_harvest_without_robots_txt_leaves_its_urls_queued(cli: Callable[..., str]) -> None:
    """Day 0's harvest meets a 503 robots.txt: nothing else is asked and no URL is refused, the seed stays queued
    (never fetched), deferred to the next run; day 1 robots.txt is back and the site is harvested."""
    site = Site(down={0})
    with threaded_site(site.respond) as origin:
        run = runs(cli, site, origin)
        run(0)
        assert site.asked(0) == [], site.asked(0)
        figures = json.loads(cli("status", "--json"))
        assert figures["by_state"] == {"queued": 1}, figures["by_state"]
        assert figures["last_cycle"]["failed"] == 0, figures["last_cycle"]  # (``deferred`` counts detail pages)
        run(1)
        assert all((path, 200) in site.asked(1) for path in PAGES), site.asked(1)
        assert json.loads(cli("status", "--json"))["by_state"] == {"done": len(PAGES), "missing": 1}
