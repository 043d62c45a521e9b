"""The pages a newest-first paged feed has left, estimated from the sitemaps' dates, with plain values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.rules.feed_pages import SitemapDates, pages_after_next

T0 = datetime(2026, 1, 5, tzinfo=UTC)


def hours_before(*hours: int) -> list[datetime]:
    return [T0 - timedelta(hours=h) for h in hours]


def feed(total: int, *, every: int = 1) -> list[datetime]:
    """``total`` entries, newest first, one every ``every`` hours."""
    return hours_before(*range(0, total * every, every))


def sitemap(total: int, *, every: int = 1) -> SitemapDates:
    dates = SitemapDates()
    dates.add(hours_before(*range(0, total * every, every)))
    return dates


@pytest.mark.parametrize("read_pages", [1, 5, 20, 28])
def test_the_estimate_counts_the_pages_left_of_a_feed_as_dense_as_the_sitemap(read_pages):
    entries = feed(300)  # 30 pages of 10; the sitemap dates the same 300 pages
    left_after_next = 30 - read_pages - 1
    assert pages_after_next(entries[: read_pages * 10], 10, sitemap(300)) == left_after_next


def test_a_feed_covering_part_of_the_site_is_estimated_at_its_own_density():
    # The feed lists every other page the sitemap dates (a category, or the posts among pages): 15 pages of 10.
    entries = feed(150, every=2)
    assert pages_after_next(entries[:50], 10, sitemap(300)) in (9, 10)  # 10 left: the next one and 9 past it
    assert pages_after_next(entries[:140], 10, sitemap(300)) in (0, 1)  # the last page next: within one


def test_the_last_page_next_gets_no_page_past_it():
    entries = feed(100)
    assert pages_after_next(entries[:90], 10, sitemap(100)) == 0
    assert pages_after_next(entries[:100], 10, sitemap(100)) == 0  # nothing older known: nothing past the next


def test_no_estimate_without_dates_to_go_on():
    entries = feed(50)
    assert pages_after_next(entries[:10], 10, SitemapDates()) is None  # no sitemap, or one without lastmods
    assert pages_after_next([None] * 10, 10, sitemap(50)) is None  # undated entries
    assert pages_after_next([], 10, sitemap(50)) is None


def test_no_estimate_when_the_sitemap_dates_say_nothing_of_the_feed():
    entries = feed(50)
    stamped = SitemapDates()
    stamped.add([T0 + timedelta(days=1)] * 500)  # every lastmod the sitemap's generation time
    assert pages_after_next(entries[:10], 10, stamped) is None
    sparse = sitemap(500, every=40)  # one sitemap date in the span of 40 entries: off by more than the range
    assert pages_after_next(entries[:40], 10, sparse) is None
    assert pages_after_next(entries[:40], 10, sitemap(500)) is not None  # control


def test_a_host_of_millions_of_dates_keeps_a_bounded_even_sample():
    dates = SitemapDates(limit=1_000)
    dates.add(hours_before(*range(100_000)))
    assert len(dates._dates) < 1_000
    assert abs(len(dates) - 100_000) <= 1_024
    assert abs(dates.before((T0 - timedelta(hours=50_000)).timestamp()) - 50_000) <= 1_024
    entries = feed(100_000)
    assert pages_after_next(entries[:2_000], 10, dates) == pytest.approx(9_799, rel=0.1)  # a sample: close, not exact
