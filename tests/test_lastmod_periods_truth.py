"""Reduced-precision lastmods (W3C NOTE-datetime: YYYY, YYYY-MM, YYYY-MM-DD, hh:mm without seconds), as a stranger's
black-box test saw them (stranger-ops, stop 46): a real server on 127.0.0.1 that logs every request, the CLI's
harvest and its daily recrawls 24 h apart (give or take minutes) on the harvester's clock, the server's log the truth.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

import pytest

from harvester.runtime import CLOCK
from harvester.testing.documents import TEXT, XML, urlset
from harvester.testing.documents import article as page
from harvester.testing.threaded_site import Answer, Asked, threaded_site

DAY0 = datetime(2026, 12, 8, 3, 0, tzinfo=UTC)


NOTE_FORMS = [  # W3C NOTE-datetime's examples: (text, the period's start, its end; None: a moment)
    ("1997", datetime(1997, 1, 1, tzinfo=UTC), datetime(1998, 1, 1, tzinfo=UTC)),
    ("1997-07", datetime(1997, 7, 1, tzinfo=UTC), datetime(1997, 8, 1, tzinfo=UTC)),
    ("1997-12", datetime(1997, 12, 1, tzinfo=UTC), datetime(1998, 1, 1, tzinfo=UTC)),
    ("1997-07-16", datetime(1997, 7, 16, tzinfo=UTC), datetime(1997, 7, 17, tzinfo=UTC)),
    ("1997-07-16T19:20+01:00", datetime(1997, 7, 16, 18, 20, tzinfo=UTC), datetime(1997, 7, 16, 18, 21, tzinfo=UTC)),
    ("1997-07-16T19:20:30+01:00", datetime(1997, 7, 16, 18, 20, 30, tzinfo=UTC), None),
    ("1997-07-16T19:20:30.45+01:00", datetime(1997, 7, 16, 18, 20, 30, 450000, tzinfo=UTC), None),
]


@pytest.mark.parametrize("parser", ["auto", "lxml", "usp"])
def test_every_parser_reads_a_reduced_precision_lastmod_as_the_period_it_names(parser: str) -> None:
    """usp's date parser filled a reduced-precision date from today (dateutil: "1997-07" read on 7 December was
    1997-07-07, "1997" 1997-12-07); every parser reads the period's start, and keeps its end."""
    from harvester.discovery.sitemaps import parse_sitemap
    from harvester.settings import Settings

    body = urlset([(f"http://h.example/p{i}", text) for i, (text, _, _) in enumerate(NOTE_FORMS)])
    doc = parse_sitemap(body, url="http://h.example/s.xml", settings=Settings().discovery, parser=parser)  # type: ignore[arg-type]
    got = [(entry.lastmod, entry.lastmod_until) for entry in doc.entries]
    assert got == [(start, end) for _, start, end in NOTE_FORMS]


def test_a_feeds_reduced_precision_date_names_its_period() -> None:
    from harvester.discovery.feeds import parse_feed

    body = ('<?xml version="1.0"?><rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/"><channel><title>t'
            "</title>" + "".join(f"<item><link>http://h.example/p{i}</link><dc:date>{text}</dc:date></item>"
                                 for i, (text, _, _) in enumerate(NOTE_FORMS)) + "</channel></rss>").encode()
    got = [(entry.updated, entry.updated_until) for entry in parse_feed(body, url="http://h.example/f").entries]
    # feedparser keeps whole seconds only (a struct_time)
    assert got == [(start.replace(microsecond=0), end) for _, start, end in NOTE_FORMS]


def test_a_reduced_precision_lastmod_announcing_a_change_is_fetched_by_the_daily_recrawl(
    cli: Callable[..., str],
) -> None:
    """A sitemap moved its entries from 2026-11-30 to 2026-12 while the pages changed on 9 December, after that
    day's run at 03:02: compared by its start (1 December, older than our fetch), the next day's run asked nothing
    of them (their 304 of day 1 had put their revisit past a day), while full times were fetched. A date
    ("2026-12-09", read as midnight, before the 03:02 fetch), a year and a time without seconds missed the same way.
    Each is the period it names: a change in it may be later than our fetch, so it is asked."""
    before = "Mon, 30 Nov 2026 00:00:00 GMT"
    edited = DAY0 + timedelta(days=1, hours=7)  # 9 December, 10:00: after day 1's run
    dates = {  # path: (days 0 and 1's lastmod, day 2's)
        "/month": ("2026-11-30", "2026-12"),
        "/day": ("2026-11-30", "2026-12-09"),
        "/year": ("2025", "2026"),
        "/minute": ("2026-11-30", "2026-12-09T04:02+01:00"),  # the minute of day 1's fetch
        "/seconds": ("2026-11-30", "2026-12-09T10:00:00Z"),  # control: a moment after the fetch
        "/fraction": ("2026-11-30", "2026-12-09T11:00:00.5+01:00"),  # control
        "/still": ("2026-11-30", "2026-11-30"),  # unchanged
    }
    day = [0]
    asked: list[tuple[int, str, int]] = []

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return 200, TEXT, f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n".encode()
        if request.path == "/sitemap.xml":
            return 200, XML, urlset([(f"{origin}{path}", pair[day[0] // 2]) for path, pair in dates.items()])
        if request.path not in dates:
            return (404, TEXT, b"") if request.path != "/" else (200, {"Content-Type": "text/html"}, b"<p>home</p>")
        changed = day[0] == 2 and request.path != "/still"
        modified = format_datetime(edited, usegmt=True) if changed else before
        since = request.headers.get("if-modified-since")
        status = 304 if since and parsedate_to_datetime(since) >= parsedate_to_datetime(modified) else 200
        asked.append((day[0], request.path, status))
        return status, {"Content-Type": "text/html", "Last-Modified": modified}, b"" if status == 304 else page(
            request.path, 2 if changed else 1)

    with threaded_site(answer) as origin:
        CLOCK.travel_to(DAY0)
        cli("harvest", f"{origin}/")
        day[0] = 1
        CLOCK.travel_to(DAY0 + timedelta(hours=24, minutes=2))
        cli("recrawl")
        day[0] = 2
        CLOCK.travel_to(DAY0 + timedelta(hours=48, minutes=-3))
        cli("recrawl")
    assert {path for d, path, _ in asked if d == 0} == set(dates)  # control: all read on day 0
    assert {path for d, path, status in asked if d == 1 and status == 200} == set()  # control: unchanged, and 304
    assert {path for d, path, _ in asked if d == 2} >= set(dates) - {"/still"}
    assert {path for d, path, status in asked if d == 2 and status == 200} == set(dates) - {"/still"}
