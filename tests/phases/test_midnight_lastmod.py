"""The daily re-crawl of a truthful site costs 304s: a lastmod equal to (or older than) our copy's Last-Modified
never makes a 304 look like a lie, and the re-asks of 304s that do contradict it stay within the documented budget.

The common site: every page's sitemap lastmod is the very date it serves as Last-Modified, often written at
midnight UTC (``2025-12-01T00:00:00Z``), and the sitemap index is regenerated daily (its lastmod later than our
last fetch). A midnight lastmod used to be read as the end of its day for every purpose, so each unchanged page's
honest 304 "contradicted" it and was asked again without validators, and a burst of 304s read before the first
re-ask's answer was all asked: 44 full downloads of 50 pages a host (a stranger's test, 22% of the site a day).
Days are driven as the scheduled runs are (``run_at``: 24 h apart on the harvester's clock); the server's own log
is the judge.
"""

from __future__ import annotations

import email.utils
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import test_contradicting_304
from aiohttp import web
from test_contradicting_304 import Site as StampingSite
from test_contradicting_304 import recrawl_days

from harvester.rules.revisit import REASK_PROBES
from harvester.runtime import utcnow
from harvester.testing.schedule import run_at

ORIGINAL = datetime(2025, 12, 1, tzinfo=UTC)
"""Every page's first version: dated at midnight, as a sitemap written from a date column is."""
PAGES = 50
EDITED = {1: (1, 2), 2: (3, 4), 3: (5, 6)}
"""Day -> pages edited overnight before that day's run (lastmod and Last-Modified: that day's midnight)."""


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


class TruthfulSite:
    """``lm_shift_s``: the Last-Modified served is this much later than the sitemap's lastmod (an hour, say: the
    page is rendered after the date column is written); the lastmod is still not newer than our copy."""

    def __init__(self, lm_shift_s: int = 0) -> None:
        self.day = 0
        self.lm_shift_s = lm_shift_s
        self.log: list[tuple[int, int, bool, int]] = []
        """(day, page, sent with validators, status) for every page request: the server's access log."""

    def dated(self, n: int) -> datetime:
        days = [day for day, pages in EDITED.items() if n in pages and day <= self.day]
        return run_at(max(days), hour=0) if days else ORIGINAL

    async def handle(self, request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":  # regenerated on every request: dated now
            return web.Response(content_type="application/xml", text=(
                '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap>'
                f"<loc>{origin}/sitemap-pages.xml</loc><lastmod>{utcnow().isoformat()}</lastmod></sitemap>"
                "</sitemapindex>"))
        if request.path == "/sitemap-pages.xml":
            urls = "".join(f"<url><loc>{origin}/p/{n}</loc><lastmod>"
                           f"{self.dated(n).strftime('%Y-%m-%dT%H:%M:%SZ')}</lastmod></url>"
                           for n in range(1, PAGES + 1))
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>')
        if not request.path.startswith("/p/") or not request.path[3:].isdigit():
            return web.Response(status=404)
        n = int(request.path[3:])
        version = self.dated(n)
        last_modified = version + timedelta(seconds=self.lm_shift_s)
        etag = f'"p{n}-{int(version.timestamp())}"'
        headers = {"ETag": etag, "Last-Modified": email.utils.format_datetime(last_modified, usegmt=True)}
        inm, ims = request.headers.get("If-None-Match"), request.headers.get("If-Modified-Since")
        fresh = inm == etag if inm is not None else (
            ims is not None and email.utils.parsedate_to_datetime(ims) >= last_modified)
        self.log.append((self.day, n, inm is not None or ims is not None, 304 if fresh else 200))
        if fresh:
            return web.Response(status=304, headers=headers)
        return web.Response(content_type="text/html", headers=headers, text=(
            f"<html><body><main><article><h1>Article {n}</h1><p>Version of {version.date()} of article {n}, long "
            "enough to be taken for the article body by the extractor.</p></article></main></body></html>"))


@pytest.mark.parametrize("lm_shift_s", [0, 3600], ids=["lastmod-equals-last-modified", "last-modified-1h-later"])
async def test_a_truthful_site_dated_at_midnight_is_re_crawled_with_304s(db_url, serve, clock, lm_shift_s):
    site = TruthfulSite(lm_shift_s)
    origin = await serve(site.handle)

    with await recrawl_days(db_url, origin, site, len(EDITED)) as store:  # type: ignore[arg-type]
        tally = store.reask_tally(origin)
    assert Counter(day for day, _, _, status in site.log if day == 0) == {0: PAGES}  # control: the harvest
    for day, edited in EDITED.items():
        answers = Counter((n in edited, conditional, status) for d, n, conditional, status in site.log if d == day)
        # The edited pages asked with validators and answered 200; the others due that day 304 (all on day 1,
        # their revisit interval grows after it) ...
        assert answers[(True, True, 200)] == len(edited), (day, answers)
        assert answers[(False, True, 304)] == PAGES - len(edited) or day > 1, (day, answers)
        # ... and no unchanged page is asked again without them: its 304 agreed with its lastmod.
        assert answers[(False, False, 200)] == 0, (day, answers)
    assert tally == (0, 0)


async def test_a_stamping_host_costs_at_most_the_probe_budget_on_its_first_re_crawl(
    db_url, serve, clock, monkeypatch
):
    """A burst of contradicting 304s read before the first re-ask's answer is not all asked again: the host is
    judged on ``REASK_PROBES`` re-asks, then one request a run (docs/internals.md)."""
    site = StampingSite(stamps=True)
    many = [f"/articles/{n}" for n in range(60)]
    monkeypatch.setattr(test_contradicting_304, "PAGES", many)
    origin = await serve(site.handle)
    with await recrawl_days(db_url, origin, site, 2) as store:
        tally = store.reask_tally(origin)
    assert site.unconditional[0] == len(many)  # control: the harvest
    assert site.conditional[1] == site.conditional[2] == len(many)  # control: every page answered 304 first
    assert site.unconditional[1] == REASK_PROBES, site.unconditional
    assert site.unconditional[2] == 1, site.unconditional
    assert tally == (REASK_PROBES + 1, 0)
