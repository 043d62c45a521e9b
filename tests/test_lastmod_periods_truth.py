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


OTHER_FORMS = [  # ISO 8601 forms outside the NOTE: a basic date, and times without a zone (the site's local time,
    # anywhere from UTC+14 to UTC-12): (text, the period's start, its end)
    ("20261207", datetime(2026, 12, 7, tzinfo=UTC), datetime(2026, 12, 8, tzinfo=UTC)),
    ("2026-12-07T10:00:00", datetime(2026, 12, 6, 20, tzinfo=UTC), datetime(2026, 12, 7, 22, tzinfo=UTC)),
    ("2026-12-07T10:00", datetime(2026, 12, 6, 20, tzinfo=UTC), datetime(2026, 12, 7, 22, 1, tzinfo=UTC)),
    ("2026-12-07T10:00:00.5", datetime(2026, 12, 6, 20, 0, 0, 500000, tzinfo=UTC),
     datetime(2026, 12, 7, 22, 0, 0, 500000, tzinfo=UTC)),
    ("2026-12-07T10:00:00Z", datetime(2026, 12, 7, 10, tzinfo=UTC), None),  # control: a moment
]


@pytest.mark.parametrize("parser", ["auto", "lxml", "usp"])
def test_a_basic_date_and_a_time_without_a_zone_are_read_as_periods(parser: str) -> None:
    """20261207 read as the moment 2026-12-07 00:00 and 2026-12-07T10:00:00 as 10:00 UTC: a page edited later that
    day (or that local morning, west of UTC) after our fetch was dated before it, and not asked."""
    from harvester.discovery.sitemaps import parse_sitemap
    from harvester.settings import Settings

    body = urlset([(f"http://h.example/p{i}", text) for i, (text, _, _) in enumerate(OTHER_FORMS)])
    doc = parse_sitemap(body, url="http://h.example/s.xml", settings=Settings().discovery, parser=parser)  # type: ignore[arg-type]
    got = [(entry.lastmod, entry.lastmod_until) for entry in doc.entries]
    assert got == [(start, end) for _, start, end in OTHER_FORMS]


@pytest.mark.parametrize("shift_s", [-300, 300])
def test_a_change_dated_by_a_basic_date_or_a_zone_less_time_is_fetched_and_an_unchanged_one_is_not(
    cli: Callable[..., str], shift_s: int,
) -> None:
    """Daily runs 24 h apart (give or take 5 minutes). The site, at UTC-8, edits four pages on 9 December at 02:00
    its time (10:00 UTC, after day 1's run) and dates them 20261209, 2026-12-09T02:00:00 or 2026-12-09T02:00 (a
    zoned time: control). Read as UTC, each date is before day 1's fetch, and the next run asked nothing. Each is now
    the period it may mean, so day 2's run fetches them; pages dated so and never changed are asked exactly as often
    as a page dated with a zone (their revisits), not every day."""
    first = "Mon, 30 Nov 2026 18:00:00 GMT"  # version 1: 30 November, 10:00 at the site
    edited = DAY0 + timedelta(days=1, hours=7)  # version 2: 9 December, 10:00 UTC (02:00 at the site)
    dates = {  # path: (the lastmod before the edit, after it; None: never edited)
        "/basic": ("20261130", "20261209"),
        "/seconds": ("2026-11-30T10:00:00", "2026-12-09T02:00:00"),
        "/minute": ("2026-11-30T10:00", "2026-12-09T02:00"),
        "/zoned": ("2026-11-30T10:00:00-08:00", "2026-12-09T02:00:00-08:00"),  # control: a moment after the fetch
        "/still-basic": ("20261130", None),
        "/still-seconds": ("2026-12-07T18:00:00", None),  # its period ends after day 0's fetch
        "/still-minute": ("2026-11-30T10:00", None),
        "/still-zoned": ("2026-11-30T18:00:00Z", None),  # control
    }
    modified_first = {path: first for path in dates} | {"/still-seconds": "Tue, 08 Dec 2026 02:00:00 GMT"}
    days = 8
    day = [0]
    asked: list[tuple[int, str, int]] = []

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return 200, TEXT, f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n".encode()
        if request.path == "/sitemap.xml":
            return 200, XML, urlset([(f"{origin}{path}", new if day[0] >= 2 and new else old)
                                     for path, (old, new) in dates.items()])
        if request.path not in dates:
            return (404, TEXT, b"") if request.path != "/" else (200, {"Content-Type": "text/html"}, b"<p>home</p>")
        changed = day[0] >= 2 and dates[request.path][1] is not None
        modified = format_datetime(edited, usegmt=True) if changed else modified_first[request.path]
        since = request.headers.get("if-modified-since")
        status = 304 if since and parsedate_to_datetime(since) >= parsedate_to_datetime(modified) else 200
        asked.append((day[0], request.path, status))
        return status, {"Content-Type": "text/html", "Last-Modified": modified}, b"" if status == 304 else page(
            request.path, 2 if changed else 1)

    with threaded_site(answer) as origin:
        CLOCK.travel_to(DAY0)
        cli("harvest", f"{origin}/")
        for d in range(1, days):
            day[0] = d
            CLOCK.travel_to(DAY0 + timedelta(days=d, seconds=shift_s * (-1) ** d))
            cli("recrawl")
    assert {path for d, path, _ in asked if d == 0} == set(dates)  # control: all read on day 0
    assert {path for d, path, status in asked if d == 1 and status == 200} == set()  # control: unchanged, and 304
    assert {path for d, path, status in asked if d == 2 and status == 200} == {
        path for path, (_, new) in dates.items() if new is not None}, asked
    schedule = {path: [d for d, p, _ in asked if p == path] for path in dates}
    still = [path for path in dates if path.startswith("/still-")]
    assert len(schedule["/still-zoned"]) < days, schedule  # control: an unchanged page is not asked every day
    assert all(schedule[path] == schedule["/still-zoned"] for path in still), schedule
    # After the edit too, a page dated so is asked as the one dated with a zone: its date makes it due once.
    assert all(schedule[path] == schedule["/zoned"] for path in ("/basic", "/seconds", "/minute")), schedule
