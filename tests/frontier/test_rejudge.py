"""Judging a host's stored URLs again when robots.txt's rules change (``FrontierStore.rejudge_urls``), and what
``FrontierStore.refused_counts`` counts, on SQLite and PostgreSQL.

A URL refused at its redirect's target is judged by what robots.txt refused there; a holder refused now hands its
content to a copy, even one already in flight with the validators it kept; every URL robots.txt keeps from us is
counted once, stored or not.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harvester.frontier import FrontierStore
from harvester.frontier.refusals import refused_at
from harvester.records import Completion, DiscoveredUrl, ErrorClass, PageRecord, UrlKind, UrlState, Validators
from harvester.runtime import utcnow

T0 = datetime(2025, 1, 1, tzinfo=UTC)
ORIGIN = "https://a.test"
SITEMAP = f"sitemap:{ORIGIN}/sitemap.xml"


def found(path: str) -> DiscoveredUrl:
    return DiscoveredUrl(url=ORIGIN + path, kind=UrlKind.DETAIL, source=SITEMAP, depth=0, score=0.0)


def claim(store: FrontierStore, at: datetime = T0) -> dict[str, int]:
    return {c.url.removeprefix(ORIGIN): c.id for c in store.claim("w", hosts=[ORIGIN], per_host=100, lease_s=60,
                                                                     now=at)}


def page(content_hash: str) -> PageRecord:
    return PageRecord(final_url=ORIGIN + "/x", status=200, content_type="text/html", content_hash=content_hash,
                      body=b"<html>same</html>")


def refuse(*prefixes: str):
    return lambda url: not any(url.removeprefix(ORIGIN).startswith(p) for p in prefixes)


def test_what_robots_txt_refused_of_a_url_is_its_own_address_or_its_redirects_target() -> None:
    own = "disallowed by robots.txt"
    hop = f"redirect to {ORIGIN}/private refused (robots_disallowed)"
    assert refused_at(ORIGIN, "/c", None, own) == (f"{ORIGIN}/c",)
    assert refused_at(ORIGIN, "/c", f"{ORIGIN}/private", hop) == (f"{ORIGIN}/c", f"{ORIGIN}/private")
    assert refused_at(ORIGIN, "/c", None, hop) == (f"{ORIGIN}/c", f"{ORIGIN}/private")  # stored before final_url
    assert refused_at(ORIGIN, "/c", "https://b.test/private", hop) is None  # another host's robots.txt refused it
    assert refused_at(ORIGIN, "/c", None, "redirect to " + "x" * 480) is None  # the target cut from the message


def test_a_url_refused_at_its_redirects_target_is_lifted_only_once_the_target_is_allowed(
    store: FrontierStore,
) -> None:
    store.add_discovered([found("/c"), found("/d")], now=T0)
    ids = claim(store)
    for path, target in (("/c", "/private"), ("/d", "/private")):
        store.complete("w", Completion(
            url_id=ids[path], state=UrlState.DISALLOWED, fetched_at=T0, status=301,
            final_url=ORIGIN + target if path == "/c" else None,  # /d: a row stored before the target was kept
            error_class=ErrorClass.ROBOTS_DISALLOWED,
            error=f"redirect to {ORIGIN}{target} refused (robots_disallowed)"))
    assert store.rejudge_urls(ORIGIN, refuse("/private"), "one", now=T0) is not None
    assert store.rejudge_urls(ORIGIN, refuse("/a", "/private"), "two", now=T0).due == 0  # type: ignore[union-attr]
    assert {p: store.url_info(ORIGIN + p).state for p in ("/c", "/d")} == {  # type: ignore[union-attr]
        "/c": "disallowed", "/d": "disallowed"}
    judged = store.rejudge_urls(ORIGIN, refuse("/a"), "three", now=T0)
    assert judged is not None and judged.due == 2
    assert sorted(claim(store)) == ["/c", "/d"]


def holder_and_copy(store: FrontierStore, *, copy_due: datetime) -> dict[str, int]:
    """/holder harvested (ETag "e", due in a week) and /copy its duplicate, due at ``copy_due``; their ids by path."""
    store.add_discovered([found("/holder"), found("/copy")], now=T0)
    ids = claim(store)
    store.complete("w", Completion(url_id=ids["/holder"], state=UrlState.DONE, fetched_at=T0, status=200,
                                   etag='"e"', content_hash="h1", page=page("h1"),
                                   next_fetch_at=T0 + timedelta(days=7)))
    store.complete("w", Completion(url_id=ids["/copy"], state=UrlState.DUPLICATE, fetched_at=T0, status=200,
                                   etag='"e"', content_hash="h1", duplicate_of=ids["/holder"],
                                   next_fetch_at=copy_due))
    return ids


def test_a_copy_in_flight_when_its_holder_is_refused_is_asked_again_in_full_after_its_304(
    store: FrontierStore,
) -> None:
    holder_and_copy(store, copy_due=T0 + timedelta(days=1))
    day = T0 + timedelta(days=1)
    assert store.requeue_rechecks([ORIGIN], now=day) == 1
    (leased,) = store.claim("w", hosts=[ORIGIN], per_host=100, lease_s=60, now=day)
    assert leased.etag == '"e"'  # its request carries the validators
    judged = store.rejudge_urls(ORIGIN, refuse("/holder"), "holder refused", now=day)
    assert judged is not None and judged.refused == 1
    store.complete("w", Completion(url_id=leased.id, state=UrlState.DONE, fetched_at=day, status=304,
                                   sent_validators=Validators(etag='"e"'), next_fetch_at=day + timedelta(days=1)))
    info = store.url_info(ORIGIN + "/copy")
    assert info is not None and (info.state, info.etag) == ("queued", None), info
    (again,) = store.claim("w", hosts=[ORIGIN], per_host=100, lease_s=60, now=utcnow() + timedelta(seconds=1))
    assert again.id == leased.id and again.etag is None  # asked in full: its 200 holds the content


def test_the_copies_of_a_holder_refused_now_are_due_without_their_validators(store: FrontierStore) -> None:
    ids = holder_and_copy(store, copy_due=T0 + timedelta(days=7))
    assert claim(store, T0 + timedelta(days=1)) == {}  # control: nothing due
    judged = store.rejudge_urls(ORIGIN, refuse("/holder"), "holder refused", now=T0 + timedelta(days=1))
    assert judged is not None and (judged.refused, judged.released) == (1, 1)
    (copy,) = store.claim("w", hosts=[ORIGIN], per_host=100, lease_s=60, now=T0 + timedelta(days=1))
    assert copy.id == ids["/copy"] and copy.etag is None


def test_every_url_robots_txt_keeps_from_us_is_counted_once_stored_or_not(store: FrontierStore) -> None:
    store.add_discovered([found("/a"), found("/b")], now=T0)
    ids = claim(store)
    for path in ("/a", "/b"):
        store.complete("w", Completion(url_id=ids[path], state=UrlState.DONE, fetched_at=T0, status=200,
                                       content_hash=path, page=page(path), next_fetch_at=T0 + timedelta(days=7)))
    store.name_refused(ORIGIN, {SITEMAP: {f"{ORIGIN}/private/x": None}}, replace=True, now=T0)
    assert store.refused_counts() == {ORIGIN: 1}
    store.rejudge_urls(ORIGIN, refuse("/a", "/private"), "a refused", now=T0)
    assert store.refused_counts() == {ORIGIN: 2}  # /a stored, refused now; /private/x never stored
    # The sitemap read again names /a, refused: still counted once.
    store.name_refused(ORIGIN, {SITEMAP: {f"{ORIGIN}/private/x": None, f"{ORIGIN}/a": None}}, replace=True, now=T0)
    assert store.refused_counts() == {ORIGIN: 2}
