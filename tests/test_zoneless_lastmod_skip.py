"""A zone-less sitemap time after our fetch is no licence to skip the page (review47).

``lastmod_period`` keeps a zone-less time's start at its earliest reading (UTC+14), so that the due rule never
dates a change after the instant the site meant. But ``urls.lastmod`` is that start, and the skip rule of a host
whose lastmods proved truthful (``revisit.may_skip``, the extraction's ``_job``) compares it with our fetch: a page
a UTC site edited at 10:00 and dated 2026-12-09T10:00:00 after our fetch at 05:00 read as dated 20:00 the day
before, "unchanged", and was completed without a request. Read as UTC (before the period change) it was asked.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.discovery.sitemap_model import lastmod_period
from harvester.rules import revisit


@pytest.mark.xfail(strict=True, reason="review47: urls.lastmod is the period's start; may_skip needs its end")
def test_a_zone_less_lastmod_later_than_our_fetch_does_not_let_a_truthful_host_skip_the_page() -> None:
    start, until = lastmod_period("2026-12-09T10:00:00")
    fetched = datetime(2026, 12, 9, 5, 0, tzinfo=UTC)
    assert until is not None and until > fetched  # the due rule sees the change may be after our fetch
    assert not revisit.may_skip(lastmod=start, last_fetched_at=fetched, truthfulness=1.0,
                                now=fetched + timedelta(hours=24))
