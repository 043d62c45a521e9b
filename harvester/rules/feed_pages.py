"""How many pages a newest-first paged feed still has past the one named next, estimated from the dates the host's
sitemaps gave its pages in this run: how far ahead of the walk its numbered pages are worth asking.

A paged feed (RFC 5005 ``rel="next"``) names only its next page, and says nowhere how many follow; the discovery
walk asks a few numbered pages ahead of it so that they are not one round trip each (issue 22). Each guess past the
last page is a request that teaches nothing, and a fixed window of guesses cost a window's worth of them at the
end of every feed (16 of 1,747 requests on the four-host faceted web of ``bench/facets.py``). The sitemaps, read
before the feeds, already date most of the site's pages: the feed's entries so far, set against the sitemap dates
in the same span, say how densely the feed covers the site; that density times the sitemap dates older than the
feed's oldest entry so far estimates the entries still to come. Guesses are only ever made within that estimate:
an estimate too low costs round trips (the pages are still read, each named by the one before), never an item.

Pure: counts over dates handed in; nothing here fetches or speaks SQL.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from datetime import datetime

from harvester.runtime import aware

__all__ = ["MAX_DATES", "SitemapDates", "pages_after_next"]

MAX_DATES = 200_000
"""Sitemap dates kept per host: past it, every other one is dropped and each kept one counts twice (an even
sample: the estimate needs proportions, not every date), so a host of millions of pages costs a few MB at most."""

DENSITY_RANGE = 4.0
"""The feed's entries and the sitemap's dates over the same span must agree within this factor, or the sitemap's
dates say nothing of the feed (every lastmod the sitemap's generation time, a feed of one category among
thousands of pages): the estimate is then not made and the walk asks ahead as it did without it."""


class SitemapDates:
    """The lastmods of the detail pages a host's sitemaps listed in this run (POSIX seconds), sorted on demand."""

    def __init__(self, limit: int = MAX_DATES) -> None:
        self._limit = max(2, limit)
        self._dates: list[float] = []
        self._sorted = True
        self._weight = 1
        """How many dates each kept one stands for (a power of two, after thinning)."""
        self._skipped = 0

    def add(self, dates: Iterable[datetime | None]) -> None:
        for date in dates:
            if date is None:
                continue
            self._skipped += 1
            if self._skipped < self._weight:
                continue
            self._skipped = 0
            self._dates.append(aware(date).timestamp())
            self._sorted = False
            if len(self._dates) >= self._limit:
                self._dates.sort()
                self._dates = self._dates[::2]
                self._weight *= 2

    def __len__(self) -> int:
        """About how many dates were added (exact until ``limit``)."""
        return len(self._dates) * self._weight

    def _sorted_dates(self) -> list[float]:
        if not self._sorted:
            self._dates.sort()
            self._sorted = True
        return self._dates

    def between(self, oldest: float, newest: float) -> int:
        """About how many dates fall in ``[oldest, newest]``."""
        dates = self._sorted_dates()
        return (bisect.bisect_right(dates, newest) - bisect.bisect_left(dates, oldest)) * self._weight

    def before(self, when: float) -> int:
        """About how many dates are older than ``when``."""
        return bisect.bisect_left(self._sorted_dates(), when) * self._weight


def pages_after_next(entry_dates: Sequence[datetime | None], per_page: int, known: SitemapDates) -> int | None:
    """How many pages of a newest-first feed are estimated to follow the page the walk reads next, given the
    dates of every entry read so far (all its pages, newest first) and its page size; None when the sitemaps'
    dates cannot tell (no dated entries, no sitemap dates, or the two disagree by more than ``DENSITY_RANGE`` over
    the span read). 0 when the next page looks like the last: no page past it is worth asking before it names one.
    """
    stamps = [aware(date).timestamp() for date in entry_dates if date is not None]
    if not stamps or per_page <= 0 or not len(known):
        return None
    oldest, newest = min(stamps), max(stamps)
    in_span = known.between(oldest, newest)
    if in_span == 0 or not 1 / DENSITY_RANGE <= len(stamps) / in_span <= DENSITY_RANGE:
        return None
    to_come = len(stamps) / in_span * known.before(oldest)
    return max(0, math.ceil(to_come / per_page) - 1)
