"""The order a claim hands URLs out in is the same on SQLite and PostgreSQL: the queue's own (best-first rank).

On PostgreSQL a claim's rows used to be sorted by score after the statement, while SQLite returned them in queue
order: a URL new in the day's sitemap, scored below the pages already harvested, was handed out after the day's
due revisits on PostgreSQL and before them on SQLite. The design ranks URLs never fetched before revisits that
merely came due (docs/architecture.md, invariant 10), whatever their scores, and a worker fetches a claim in the
order it gets it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, UrlKind, UrlState
from harvester.runtime import CLOCK, utcnow

DAY_0 = datetime(2026, 3, 2, 6, 0, tzinfo=UTC)
SITE = "https://a.test"
SITEMAP = "sitemap:https://a.test/sitemap.xml"


@pytest.fixture
def daily(store: FrontierStore) -> Iterator[FrontierStore]:
    """The store, on the harvester's clock at day 0 (put back afterwards)."""
    CLOCK.travel_to(DAY_0)
    yield store
    CLOCK.reset()


def listed(path: str, score: float) -> DiscoveredUrl:
    return DiscoveredUrl(url=f"{SITE}{path}", kind=UrlKind.DETAIL, source=SITEMAP, depth=0, score=score)


def harvest_day(store: FrontierStore, sitemap: list[DiscoveredUrl]) -> list[str]:
    """One day's run: the sitemap read, then one claim of the host, fetched in the order handed out, each page
    due again a day later; the URLs in that order."""
    store.add_discovered(sitemap, now=utcnow())
    claimed = store.claim("w", hosts=[SITE], per_host=100, lease_s=600, now=utcnow())
    for c in claimed:
        at = utcnow()
        store.complete("w", Completion(url_id=c.id, state=UrlState.DONE, fetched_at=at, status=200,
                                       next_fetch_at=at + timedelta(days=1), revisit_s=86_400.0))
    return [c.url.removeprefix(SITE) for c in claimed]


def test_a_url_new_in_the_sitemap_comes_before_the_days_due_revisits_on_both_databases(
    daily: FrontierStore,
) -> None:
    first = [listed("/home", 0.9), listed("/about", 0.8), listed("/news", 0.7)]
    assert harvest_day(daily, first) == ["/home", "/about", "/news"]  # best first
    CLOCK.travel_to(DAY_0 + timedelta(days=1, minutes=5))
    # Day 1: the same pages, all due again, and one page new today, scored below them.
    assert harvest_day(daily, [*first, listed("/new-today", 0.3)]) == ["/new-today", "/home", "/about", "/news"]
    CLOCK.travel_to(DAY_0 + timedelta(days=2, minutes=10))
    assert harvest_day(daily, [*first, listed("/new-today", 0.3), listed("/second", 0.1)]) == [
        "/second", "/home", "/about", "/news", "/new-today"]
