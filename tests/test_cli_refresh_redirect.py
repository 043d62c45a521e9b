"""``recrawl --refresh`` is still conditional behind a sitemap redirect (the stranger's black-box test of stop 43:
the refresh asked the redirecting child again and its target in full, a 200, where the plain re-crawl got a 304).
Through the CLI at the daily cadence on the harvester's clock (``CLOCK.travel_to``, what ``HARVESTER_NOW`` sets),
against a real server whose own log says what each request carried and what it answered."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, threaded_site

PAGES = [f"/news/a-story-worth-reading-{n}" for n in range(1, 4)]
TARGET_ETAG = '"news3-v1"'
TARGET_DATE = "Mon, 07 Dec 2026 01:00:00 GMT"

Logged = tuple[str, str | None, str | None, int]
"""(path, If-None-Match, If-Modified-Since, status) of one request, as the server received and answered it."""


@pytest.fixture
def site() -> Iterator[tuple[str, list[Logged]]]:
    log: list[Logged] = []

    def respond(request: Asked) -> Answer:
        inm, ims = request.headers.get("if-none-match"), request.headers.get("if-modified-since")
        status, headers, body = 404, {"Content-Type": "text/plain"}, b"not found"
        if request.path == "/robots.txt":
            status, body = 200, f"User-agent: *\nSitemap: {request.origin}/sitemap.xml\n".encode()
        elif request.path == "/sitemap.xml":
            status, headers = 200, {"Content-Type": "application/xml", "ETag": '"index-v1"'}
            body = ('<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    f"<sitemap><loc>{request.origin}/sm/old.xml</loc></sitemap></sitemapindex>").encode()
            if inm == '"index-v1"':
                status, body = 304, b""
        elif request.path == "/sm/old.xml":
            status, headers, body = 301, {"Location": f"{request.origin}/sm/news3.xml"}, b""
        elif request.path == "/sm/news3.xml":
            status = 200
            headers = {"Content-Type": "application/xml", "ETag": TARGET_ETAG, "Last-Modified": TARGET_DATE}
            urls = "".join(f"<url><loc>{request.origin}{path}</loc></url>" for path in PAGES)
            body = ('<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                    f"{urls}</urlset>").encode()
            if inm == TARGET_ETAG or (inm is None and ims == TARGET_DATE):
                status, body = 304, b""
        elif request.path in PAGES or request.path == "/":
            status, headers = 200, {"Content-Type": "text/html", "ETag": f'"{request.path}"'}
            body = (f"<!doctype html><html><head><title>{request.path}</title></head><body><main><article>"
                    f"<p>{'An article body of plain words. ' * 30}</p></article></main></body></html>").encode()
            if inm == f'"{request.path}"':
                status, body = 304, b""
        log.append((request.path, inm, ims, status))
        return status, headers, body

    with threaded_site(respond) as origin:
        yield origin, log


def test_a_refresh_asks_a_redirected_sitemaps_target_with_its_validators(
    site: tuple[str, list[Logged]], cli: Callable[..., str]
) -> None:
    origin, log = site
    CLOCK.travel_to(run_at(0, hour=3))
    cli("harvest", f"{origin}/")
    assert ("/sm/news3.xml", None, None, 200) in log  # control: read in full once, its validators kept
    for day, args in ((1, ("recrawl",)), (2, ("recrawl", "--refresh"))):
        log.clear()
        CLOCK.travel_to(run_at(day, hour=3))
        cli(*args)
        target = [entry for entry in log if entry[0] == "/sm/news3.xml"]
        assert target and all(inm == TARGET_ETAG and status == 304 for _, inm, _, status in target), (args, log)
        # The redirect hop is never sent the target's validators (an ETag goes to the URL that issued it alone).
        assert all(inm is None and ims is None for path, inm, ims, _ in log if path == "/sm/old.xml"), log
