"""A revisit queued before its sitemap announced its change still comes first within a page budget.

A claim promotes every due URL of its host into the queue, whatever kind it claims: discovery's claim of the seed
(a listing page, read beside the sitemap walk) queued a page due for its routine re-check with the routine rank,
behind every URL never fetched. The sitemap read a moment later announced the page's change (a newer lastmod), but
the queue entry kept its rank, and a budget of a few pages spent itself on pages never fetched: the change waited
a day (tests/phases/test_budget.py, 1 run in 3, by which of discovery's two requests came first). Here the order is
forced: the listing claim first, then the sitemap's news.
"""

from __future__ import annotations

from datetime import timedelta

from harvester.frontier import FrontierStore
from harvester.records import UrlKind

from .test_store import T0, claim_all, done, found


def test_a_revisit_queued_before_its_lastmod_was_read_moves_ahead_of_urls_never_fetched(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/told", score=0.5), found("https://a.test/", kind=UrlKind.LISTING)],
                         now=T0)
    for c in claim_all(store, "w", ["https://a.test"]):
        store.complete("w", done(c.id, next_fetch_at=T0 + timedelta(days=1)))
    store.add_discovered([found("https://a.test/never", score=9.0)], now=T0)
    later = T0 + timedelta(days=1, minutes=5)
    # The seed's claim (a listing) promotes the host's due revisits: /told is queued as a routine re-check.
    seed = store.claim("d", hosts=["https://a.test"], per_host=1, lease_s=60, now=later, kinds=(UrlKind.LISTING,))
    assert [c.url for c in seed] == ["https://a.test/"]
    # Then the sitemap says /told changed since it was fetched.
    store.add_discovered([found("https://a.test/told", score=0.5)._replace(lastmod=later - timedelta(hours=1))],
                         now=later)
    taken = store.claim("w", hosts=["https://a.test"], per_host=1, lease_s=60, now=later, kinds=(UrlKind.DETAIL,))
    assert [c.url for c in taken] == ["https://a.test/told"]  # the announced change before the page never fetched


def test_a_page_due_by_its_lastmods_period_ranks_with_announced_changes(store: FrontierStore) -> None:
    """A lastmod whose period (a date: ``lastmod_until``) ends after our fetch, though it starts before it, makes the
    page due as an announced change; the claim promoted it by its start (not after the fetch) as a routine re-check
    unless it came due before half its interval: behind every URL never fetched, at the daily cadence a run 24 h
    and 5 minutes after the fetch of a page on a 2-day interval, and a budget of a few pages left the change for
    the next day."""
    fetched = T0 + timedelta(hours=7)
    store.add_discovered([found("https://a.test/told", score=0.5)], now=T0)
    for c in claim_all(store, "w", ["https://a.test"], now=fetched):
        store.complete("w", done(c.id, at=fetched, revisit_s=2 * 86_400.0,
                                 next_fetch_at=fetched + timedelta(days=2)))
    later = fetched + timedelta(days=1, minutes=5)
    store.add_discovered([found("https://a.test/never", score=9.0)], now=later)
    # The sitemap dates /told with the day of our fetch: the edit may be later that day, after the fetch.
    store.add_discovered([found("https://a.test/told", score=0.5)._replace(
        lastmod=T0, lastmod_until=T0 + timedelta(days=1))], now=later)
    taken = store.claim("w", hosts=["https://a.test"], per_host=1, lease_s=60, now=later, kinds=(UrlKind.DETAIL,))
    assert [c.url for c in taken] == ["https://a.test/told"]  # the announced change before the page never fetched
