"""A host's stored URLs follow robots.txt's rules as read now, not as they were when each was last asked.

A URL robots.txt refused stayed ``disallowed`` for good after robots.txt allowed it again (never asked again, out of
``export --latest``, still counted refused); pages harvested before robots.txt refused them stayed ``done`` in the
snapshot until they fell due (status counting none of them). When a host's rules change, discovery judges its URLs
again (``FrontierStore.rejudge_urls``, migration 0020) before any document is read: refused ones now allowed are
due in that run, done ones now refused leave the snapshot without a request. Daily runs 24 h apart, on a real
server whose sitemap and pages answer 304 to their ETags (nothing else announces the change).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.cli_tables import status_of
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

LASTMOD = datetime(2026, 1, 1, 12, tzinfo=UTC)
PAGES = ("/p/a", "/p/b", "/c/1", "/c/2")


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def _site(disallow: list[str], changefreq: str, log: list[tuple[int, str, int]], day: list[int]) -> Any:
    """robots.txt disallows ``disallow`` (changed between runs); the sitemap lists ``PAGES`` with ``changefreq``;
    the sitemap and the pages answer 304 to their ETag. Requests are logged as (day, path, status)."""

    async def handle(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        path = request.path
        if path == "/robots.txt":
            rules = "".join(f"Disallow: {prefix}\n" for prefix in disallow)
            log.append((day[0], path, 200))
            return web.Response(text=f"User-agent: *\n{rules}Sitemap: {origin}/sitemap.xml\n")
        if path == "/sitemap.xml":
            body = '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">' + "".join(
                f"<url><loc>{origin}{p}</loc><lastmod>{LASTMOD.isoformat()}</lastmod>"
                f"<changefreq>{changefreq}</changefreq></url>" for p in PAGES) + "</urlset>"
            content_type = "application/xml"
        elif path in PAGES:
            body = (f"<html><head><title>{path}</title></head><body><main><article><h1>{path}</h1><p>{path}: "
                    + "the council met to discuss the proposal " * 20 + "</p></article></main></body></html>")
            content_type = "text/html"
        else:
            log.append((day[0], path, 404))
            return web.Response(status=404, text="not here")
        etag = f'"{abs(hash(body)):x}"'
        if request.headers.get("If-None-Match") == etag:
            log.append((day[0], path, 304))
            return web.Response(status=304, headers={"ETag": etag})
        log.append((day[0], path, 200))
        return web.Response(content_type=content_type, text=body, headers={"ETag": etag})

    return handle


async def _days(serve: Callable[..., Any], db_url: str, rules_of_day: dict[int, list[str]], changefreq: str,
                check: Callable[[int, dict[str, str], list[str], list[tuple[int, str, int]], dict[str, Any]], None],
                ) -> None:
    """Harvest day 1, re-crawl the next days (each with robots.txt's rules of that day), calling ``check`` after
    each with the pages' states, the snapshot's URLs (by path), the request log and ``status``'s figures."""
    day = [1]
    disallow: list[str] = []
    log: list[tuple[int, str, int]] = []
    origin = await serve(_site(disallow, changefreq, log, day))
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True):
        pass
    for n in sorted(rules_of_day):
        day[0] = n
        disallow[:] = rules_of_day[n]
        CLOCK.travel_to(run_at(n))
        await (aharvest if n == 1 else arecrawl)(settings, profile)
        with FrontierStore.open(settings) as store:
            states = {path: info.state for path in PAGES if (info := store.url_info(origin + path))}
            latest = sorted(page.url[len(origin):] for page in store.iter_pages(latest=True))
        check(n, states, latest, log, status_of(settings)["hosts"][origin]["states"])


async def test_a_url_robots_txt_allows_again_is_asked_that_run_and_back_in_the_snapshot(
    db_url: str, serve: Callable[..., Any], clock: None,
) -> None:
    """Day 2 robots.txt disallows /p/b (due that day: refused without a request), day 3 allows it again: asked that
    run (conditionally: a 304, the page kept) and back in ``export --latest``; day 4 keeps it so."""

    def check(n: int, states: dict[str, str], latest: list[str], log: list[tuple[int, str, int]],
              counts: dict[str, Any]) -> None:
        asked = [(path, status) for d, path, status in log if d == n and path == "/p/b"]
        if n == 2:
            assert states["/p/b"] == "disallowed" and asked == [], (states, asked)
            assert "/p/b" not in latest and counts.get("disallowed") == 1, (latest, counts)
        if n >= 3:
            assert states["/p/b"] == "done", (n, states)
            assert n > 3 or asked == [("/p/b", 304)], (n, log)
            assert latest == sorted(PAGES), (n, latest)
            assert not counts.get("disallowed"), (n, counts)

    await _days(serve, db_url, {1: [], 2: ["/p/b"], 3: [], 4: []}, "daily", check)


async def test_harvested_pages_robots_txt_now_refuses_leave_the_snapshot_without_a_request(
    db_url: str, serve: Callable[..., Any], clock: None,
) -> None:
    """Weekly pages (not due on day 2 nor 3): day 2 robots.txt disallows /c/. The pages under it leave the snapshot
    and are counted refused (state ``disallowed``) that run, without a request; the others stay. Day 3 (the same
    rules) changes nothing; day 4 allows /c/ again and they are asked and back."""

    def check(n: int, states: dict[str, str], latest: list[str], log: list[tuple[int, str, int]],
              counts: dict[str, Any]) -> None:
        asked = sorted(path for d, path, _ in log if d == n and path.startswith("/c/"))
        if n in (2, 3):
            assert (states["/c/1"], states["/c/2"], states["/p/a"]) == ("disallowed", "disallowed", "done"), states
            assert latest == ["/p/a", "/p/b"], (n, latest)
            assert asked == [] and counts.get("disallowed") == 2, (n, asked, counts)
        if n == 4:
            assert asked == ["/c/1", "/c/2"] and latest == sorted(PAGES), (asked, latest)

    await _days(serve, db_url, {1: [], 2: ["/c/"], 3: ["/c/"], 4: []}, "weekly", check)


async def test_a_url_refused_before_it_was_stored_is_read_once_robots_txt_allows_it(
    db_url: str, serve: Callable[..., Any], clock: None,
) -> None:
    """robots.txt refuses /c/ from day 1: its pages are never stored (only counted). Day 2 allows them: the sitemap
    naming them is read in full that run (its 304 would name nothing), and they are asked and in the snapshot."""

    def check(n: int, states: dict[str, str], latest: list[str], log: list[tuple[int, str, int]],
              counts: dict[str, Any]) -> None:
        asked = sorted(path for d, path, _ in log if d == n and path.startswith("/c/"))
        if n == 1:
            assert "/c/1" not in states and asked == [] and latest == ["/p/a", "/p/b"], (states, asked, latest)
        if n == 2:
            assert (2, "/sitemap.xml", 200) in log, log
            assert asked == ["/c/1", "/c/2"] and latest == sorted(PAGES), (asked, latest)

    await _days(serve, db_url, {1: ["/c/"], 2: []}, "weekly", check)
