"""A sitemap index read by the daily re-crawl (stranger48): the index is where a site announces a new child sitemap,
so a run that skips it misses every page that child names. Real servers on 127.0.0.1 that log every request, the
CLI's commands, the daily runs at the real cadence (24 h after the last one started, and 5 minutes either side)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from test_discovery_documents_truth import DAY0, TEXT, XML, serve, urlset

from harvester.runtime import CLOCK
from harvester.testing.threaded_site import Answer, Asked, threaded_site


def index(origin: str, *children: str) -> bytes:
    entries = "".join(f"<sitemap><loc>{origin}{child}</loc></sitemap>\n" for child in children)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"\n{entries}</sitemapindex>\n").encode()


@pytest.mark.parametrize("offset_min", [-5, 0, 5])
def test_a_child_sitemap_added_to_an_index_without_validators_is_read_the_next_day(
    cli: Callable[..., str], offset_min: int,
) -> None:
    """An index served with no ETag or Last-Modified gained a child sitemap on day 1: the day-1 re-crawl never
    asked the index (it waited ``sitemap_index_revisit_s``, 7 days), so the new child's pages were first fetched
    a week late. An index is revisited on the sitemaps' daily interval: the next day's run reads the new child."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}
    with threaded_site(serve(routes, asked)) as origin:
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap_index.xml\n".encode())
        routes["/sitemap_index.xml"] = (200, XML, index(origin, "/s1.xml"))
        routes["/s1.xml"] = (200, XML, urlset(origin, "/a", "/b"))
        CLOCK.travel_to(DAY0)
        cli("harvest", f"{origin}/")
        assert {"/a", "/b"} <= {r.path for r in asked}  # control: day 0 read the index and its child
        routes["/sitemap_index.xml"] = (200, XML, index(origin, "/s1.xml", "/s2.xml"))
        routes["/s2.xml"] = (200, XML, urlset(origin, "/new"))
        before = len(asked)
        CLOCK.travel_to(DAY0 + timedelta(hours=24, minutes=offset_min))
        cli("harvest", f"{origin}/")
        day1 = [r.path for r in asked[before:]]
    assert day1.count("/sitemap_index.xml") == 1, day1
    assert "/s2.xml" in day1 and "/new" in day1, day1
