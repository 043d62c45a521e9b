"""A sitemap lastmod whose period ends after our fetch is no licence to skip the page (review47).

``lastmod_period`` keeps a zone-less time's start at its earliest reading (UTC+14), so that no rule asking whether a
lastmod is *surely* newer (a 304 contradicted, a gone page dated back) dates a change after the instant the site
meant. ``urls.lastmod`` is that start, and the skip rule of a host whose lastmods proved truthful
(``revisit.may_skip``, the extraction's ``_job``) compared it with our fetch: a page a UTC site edited at 10:00 and
dated 2026-12-09T10:00:00 after our fetch at 05:00 read as dated 20:00 the day before, "unchanged", and was
completed without a request; a page dated "2026-12-09" (midnight) or "2026-12" the same. The rule now judges by the
period's end (``urls.lastmod_until``, carried on the claim): a change in the period may be later than our fetch.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from harvester.discovery.sitemap_model import lastmod_period
from harvester.rules import revisit

FETCHED = datetime(2026, 12, 9, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize("text", ["2026-12-09T10:00:00", "2026-12-09T04:00", "2026-12-09", "20261209", "2026-12"])
def test_a_zone_less_lastmod_later_than_our_fetch_does_not_let_a_truthful_host_skip_the_page(text: str) -> None:
    start, until = lastmod_period(text)
    assert start is not None and start <= FETCHED  # by its start alone, the lastmod says "unchanged since"
    assert until is not None and until > FETCHED  # the due rule sees the change may be after our fetch
    assert not revisit.may_skip(lastmod=start, last_fetched_at=FETCHED, truthfulness=1.0, lastmod_until=until,
                                now=FETCHED + timedelta(hours=24))
    # Fetched and found changed, the page counts as a change the lastmod announced (a hit), never as a miss.
    assert revisit.lastmod_predicts_change(start, FETCHED, None, until) is True


@pytest.mark.parametrize("text", ["2026-12-09T10:00:00", "2026-12-09", "2026-12"])
def test_a_period_that_ended_before_our_fetch_still_lets_a_truthful_host_skip_the_page(text: str) -> None:
    """Control: the end decides, not the precision. Fetched after the period's end, the page is unchanged."""
    start, until = lastmod_period(text)
    fetched = datetime(2027, 1, 2, 5, 0, tzinfo=UTC)
    assert until is not None and until <= fetched
    assert revisit.may_skip(lastmod=start, last_fetched_at=fetched, truthfulness=1.0, lastmod_until=until,
                            now=fetched + timedelta(hours=24))
    assert revisit.lastmod_predicts_change(start, fetched, None, until) is False
