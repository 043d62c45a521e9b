"""A permanent redirect's target is downloaded once per run, whichever of the two a run asks first.

Day 2, ``/p/old`` answers 301 to ``/p/new``, newly in the sitemap. Asked first (its sitemap lastmod announces a
change), the redirect is not followed, the target being a URL of the frontier, asked by its own claim (a target the
frontier never saw is followed and its answer kept for that claim, ``MovedAnswers``: tests/phases/
test_moved_revisits.py). Asked after the target was read (a revisit nothing announced, ranked behind a new URL), it
is not followed either. Either way the old URL is recorded moved from the 301 alone (``Fetcher.fetch``'s
``stop_at``). Either way the old URL ends moved to the
target, the target's page is stored once, and the cycle's ``fetched`` count is the server's count of page requests.
Day 3 (``--refresh``: both due again) the same holds at the old URL's revisit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

LASTMOD = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def _page(title: str, text: str) -> str:
    return (f"<html><head><title>{title}</title></head><body><main><article><h1>{title}</h1><p>{text} "
            + "words of the product page " * 30 + "</p></article></main></body></html>")


def _site(day: list[int], case: str, log: list[tuple[int, str, int]]) -> Callable[[web.Request], object]:
    """``/p/1`` and ``/p/old`` on day 1; from day 2 ``/p/old`` answers 301 to ``/p/new``. ``case``: ``new_target``,
    ``/p/new`` joins the sitemap on day 2 (the stranger's site); ``redirect_first``, the same, and ``/p/old``'s
    lastmod moves on day 2, so it is asked ahead of everything; ``target_first``, ``/p/new`` is listed (and read)
    from day 1 and changes on day 2, as its lastmod says, so it is asked first. Page answers carry an ETag (a 304 to a
    matching If-None-Match); every request is logged as (day, path, status)."""

    def pages() -> dict[str, tuple[int, str, datetime]]:
        moved = run_at(2, hour=1) if day[0] >= 2 else LASTMOD
        out = {"/p/1": (200, _page("One", "product one"), LASTMOD),
               "/p/old": (200, _page("Two", "product two at its old address"), LASTMOD)}
        if day[0] >= 2 or case == "target_first":
            out["/p/new"] = (200, _page("Two", f"product two at its new address, v{min(day[0], 2)}"),
                             moved if case == "target_first" else LASTMOD)
        if day[0] >= 2:
            out["/p/old"] = (301, "/p/new", moved if case == "redirect_first" else LASTMOD)
        return out

    async def handle(request: web.Request) -> web.StreamResponse:
        origin = f"http://{request.host}"
        now = pages()
        response: web.StreamResponse
        if request.path == "/robots.txt":
            response = web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        elif request.path == "/sitemap.xml":
            entries = "".join(f"<url><loc>{origin}{path}</loc><lastmod>{lastmod.isoformat()}</lastmod></url>"
                              for path, (_, _, lastmod) in sorted(now.items()))
            response = web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'))
        elif request.path not in now:
            response = web.Response(status=404, text="not here")
        else:
            status, body, _ = now[request.path]
            etag = f'"{abs(hash(body)):x}"'
            if status == 301:
                response = web.Response(status=301, headers={"Location": origin + body})
            elif request.headers.get("If-None-Match") == etag:
                response = web.Response(status=304, headers={"ETag": etag})
            else:
                response = web.Response(content_type="text/html", text=body, headers={"ETag": etag})
        log.append((day[0], request.path, response.status))
        return response

    return handle


@pytest.mark.parametrize("case", ["new_target", "target_first", "redirect_first"])
async def test_a_redirect_target_is_downloaded_once_a_run_in_either_order(
    db_url: str, serve: Callable[..., object], clock: None, case: str,
) -> None:
    day = [1]
    log: list[tuple[int, str, int]] = []
    origin = await serve(_site(day, case, log))  # type: ignore[operator]
    settings = settings_for(db_url)
    # One request at a time: which of the two is asked first is the frontier's order alone.
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False, per_host_limit=1)
    with FrontierStore.open(settings, upgrade=True):
        pass
    old, new = f"{origin}/p/old", f"{origin}/p/new"

    def pages_asked(n: int) -> list[tuple[str, int]]:
        return [(path, status) for d, path, status in log if d == n and path not in ("/robots.txt", "/sitemap.xml")]

    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    for n in (2, 3):
        day[0] = n
        CLOCK.travel_to(run_at(n))
        cycle = await arecrawl(settings, profile, refresh=n == 3)
        asked = pages_asked(n)
        assert [path for path, _ in asked].count("/p/new") == 1, asked  # the target, asked once
        if n == 2 and case != "new_target":
            first = "/p/old" if case == "redirect_first" else "/p/new"
            assert next(path for path, _ in asked if path in ("/p/old", "/p/new")) == first, asked  # the order meant
        assert ("/p/old", 301) in asked, asked  # the redirect itself was asked
        assert cycle.changes["fetched"] == len(asked), (cycle.changes, asked)  # the counts are the server's
        with FrontierStore.open(settings) as store:
            info = store.url_info(old)
            versions = [page for page in store.iter_pages() if page.url == new and page.fetched_at >= run_at(n)]
            snapshot = {page.url for page in store.iter_pages(latest=True)}
        assert info is not None and (info.state, info.final_url, info.last_status) == ("done", new, 301), info
        assert len(versions) == (n == 2), versions  # the target's new page, stored once (the same bytes on day 3)
        assert new in snapshot and old not in snapshot
