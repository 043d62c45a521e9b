"""A completion keeps the news discovery recorded while its URL was leased (``Outcomes``' ``_NEWS``), on SQLite and
PostgreSQL: whatever the outcome (a skip on the lastmod, a 304, an unchanged 200), a lastmod that grew since the claim
past our copy leaves the URL due at once; news older than our copy, or no news, leaves its next revisit."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, DocumentState, UrlKind, UrlState, Vanished
from harvester.runtime import utcnow

T1 = utcnow().replace(microsecond=0) - timedelta(minutes=30)
"""The day-1 claim (half an hour ago: "due now" is the real clock's, the store's ``utcnow``); day 0's fetch is at T0,
and the day-1 request's answer at ``ANSWERED``."""
T0 = T1 - timedelta(days=1)
ANSWERED = T1 + timedelta(seconds=5)
URL = "https://a.test/story"
NEXT = T1 + timedelta(days=2)
"""The next revisit the completion asks for (in the future)."""


def listed(lastmod: datetime, source: str = "sitemap:https://a.test/sitemap.xml") -> list[DiscoveredUrl]:
    return [DiscoveredUrl(url=URL, kind=UrlKind.DETAIL, source=source, lastmod=lastmod)]


def leased_on_day_1(store: FrontierStore) -> tuple[int, datetime | None]:
    """The URL fetched on day 0 (lastmod a day before), due and claimed on day 1: (its id, the lastmod claimed)."""
    store.add_discovered(listed(T0 - timedelta(days=1)), now=T0)
    (first,) = store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=T0)
    store.complete("w", Completion(url_id=first.id, state=UrlState.DONE, fetched_at=T0, status=200, etag='"v0"',
                                   content_hash="h0", next_fetch_at=T1, revisit_s=86_400.0))
    (claimed,) = store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=T1)
    return claimed.id, claimed.lastmod


def outcome(kind: str, url_id: int, lastmod: datetime | None, *, from_claim: bool = True) -> Completion:
    """The completion of the claimed URL: skipped on its lastmod (no request), answered 304, or 200 unchanged."""
    claim = {"claimed": from_claim, "claimed_lastmod": lastmod}
    if kind == "skip":
        return Completion(url_id=url_id, state=UrlState.DONE, fetched_at=T0, content_hash="h0", etag='"v0"',
                          next_fetch_at=NEXT, revisit_s=129_600.0, **claim)
    return Completion(url_id=url_id, state=UrlState.DONE, fetched_at=ANSWERED, status=304 if kind == "304" else 200,
                      etag='"v0"', content_hash="h0", next_fetch_at=NEXT, revisit_s=129_600.0, **claim)


@pytest.mark.parametrize("kind", ["skip", "304", "200"])
def test_news_recorded_while_leased_leaves_the_url_due_after_its_completion(store: FrontierStore, kind: str) -> None:
    url_id, claimed_lastmod = leased_on_day_1(store)
    # Discovery, beside extraction, reads a feed that dates the story after our copy (and, for an answered request,
    # after the answer): the URL is leased, so the upsert records the lastmod and nothing else.
    news = ANSWERED + timedelta(minutes=1)
    assert store.add_discovered(listed(news, "feed:https://a.test/feed.xml"), now=T1).made_due == 0
    store.complete("w", outcome(kind, url_id, claimed_lastmod))
    info = store.url_info(URL)
    assert info is not None and info.state == "done" and info.lastmod == news
    assert info.next_fetch_at is not None and info.next_fetch_at <= utcnow(), info.next_fetch_at
    # Due now, it is what the next claim hands out.
    assert [c.id for c in store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=utcnow())] == [
        url_id]


def test_a_skip_decided_on_a_claim_without_lastmod_keeps_the_lastmod_that_came_since(store: FrontierStore) -> None:
    store.add_discovered([DiscoveredUrl(url=URL, kind=UrlKind.DETAIL, source="seed")], now=T0)
    (first,) = store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=T0)
    store.complete("w", Completion(url_id=first.id, state=UrlState.DONE, fetched_at=T0, status=200,
                                   content_hash="h0", next_fetch_at=T1, revisit_s=86_400.0))
    (claimed,) = store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=T1)
    assert claimed.lastmod is None
    store.add_discovered(listed(T0 + timedelta(hours=1)), now=T1)
    store.complete("w", outcome("skip", claimed.id, None))
    info = store.url_info(URL)
    assert info is not None and info.next_fetch_at is not None and info.next_fetch_at <= utcnow()


@pytest.mark.parametrize("news_after", [None, T1 - timedelta(hours=5)], ids=["no news", "news older than the answer"])
def test_without_news_past_our_copy_the_completion_keeps_its_next_revisit(
    store: FrontierStore, news_after: datetime | None
) -> None:
    """No news since the claim; or news dated before the request the 304 answered (the server said unchanged after
    it: that contradiction is the 304's own question, not this race's). Also a completion built without its claim
    (``claimed`` False) is written as it says, whatever the lastmod."""
    url_id, claimed_lastmod = leased_on_day_1(store)
    if news_after is not None:
        store.add_discovered(listed(news_after, "feed:https://a.test/feed.xml"), now=T1)
    store.complete("w", outcome("304", url_id, claimed_lastmod))
    info = store.url_info(URL)
    assert info is not None and info.state == "done" and info.next_fetch_at == NEXT


def test_a_completion_not_built_from_a_claim_is_written_as_it_says(store: FrontierStore) -> None:
    url_id, _ = leased_on_day_1(store)
    store.add_discovered(listed(ANSWERED + timedelta(hours=1), "feed:https://a.test/feed.xml"), now=T1)
    store.complete("w", outcome("304", url_id, None, from_claim=False))
    info = store.url_info(URL)
    assert info is not None and info.next_fetch_at == NEXT


def test_a_lastmod_ahead_of_our_clock_does_not_make_a_url_due_again_and_again(store: FrontierStore) -> None:
    """A site whose lastmods run ahead of our clock (a time zone taken for UTC) told nothing new since the claim:
    the fetch that read the URL with that lastmod is its answer, and the URL waits for its revisit."""
    ahead = T1 + timedelta(hours=3)
    store.add_discovered(listed(ahead), now=T0)
    (first,) = store.claim("w", hosts=["https://a.test"], per_host=10, lease_s=60, now=T0)
    store.complete("w", Completion(url_id=first.id, state=UrlState.DONE, fetched_at=ANSWERED, status=200,
                                   content_hash="h0", next_fetch_at=NEXT, claimed=True, claimed_lastmod=first.lastmod))
    info = store.url_info(URL)
    assert info is not None and info.next_fetch_at == NEXT


@pytest.mark.parametrize("kind", ["skip", "304"])
def test_a_skip_whose_lastmod_was_withdrawn_while_leased_leaves_the_url_due(store: FrontierStore, kind: str) -> None:
    """The sitemap that dated the URL, re-read beside extraction, no longer names it (deleted, perhaps): its lastmod
    is withdrawn and, were it DONE, it would be due now (``recheck_vanished``). A skip decided on that lastmod asked
    nothing, so the URL is due now; a 304 answered in this run is its answer, and it keeps its next revisit."""
    url_id, claimed_lastmod = leased_on_day_1(store)
    assert claimed_lastmod is not None
    store.save_document(
        DocumentState(url="https://a.test/sitemap.xml", kind="sitemap", status=200, fetched_at=T1, read_at=T1),
        vanished=Vanished(labels=("sitemap:https://a.test/sitemap.xml",), origins=("https://a.test",),
                          named_since=T0 - timedelta(hours=1), seen_before=T1, now=T1),
    )
    assert store.url_info(URL).lastmod is None  # type: ignore[union-attr]
    store.complete("w", outcome(kind, url_id, claimed_lastmod))
    info = store.url_info(URL)
    assert info is not None and info.state == "done"
    if kind == "skip":
        assert info.next_fetch_at is not None and info.next_fetch_at <= utcnow(), info.next_fetch_at
    else:
        assert info.next_fetch_at == NEXT
