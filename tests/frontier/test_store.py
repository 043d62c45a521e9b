"""FrontierStore behaviour on SQLite and PostgreSQL: upserts, claims, completions, leases, reporting."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvester.errors import InvalidRecord, LeaseLost
from harvester.frontier import FrontierStore
from harvester.frontier.models import EPOCH, from_epoch_us, to_epoch_us
from harvester.records import (
    Completion,
    DiscoveredUrl,
    DocumentState,
    ErrorClass,
    HostPolicy,
    PageRecord,
    RobotsState,
    UrlKind,
    UrlState,
)
from harvester.store_results import AddResult

T0 = datetime(2025, 1, 1, tzinfo=UTC)
SITEMAP = "sitemap:https://a.test/sitemap.xml"
FEED = "feed:https://a.test/feed.xml"


def found(url: str, *, source: str = SITEMAP, score: float = 0.0, depth: int = 0, kind: UrlKind = UrlKind.DETAIL,
          lastmod: datetime | None = None) -> DiscoveredUrl:
    return DiscoveredUrl(url=url, kind=kind, source=source, depth=depth, score=score, lastmod=lastmod)


def done(url_id: int, at: datetime = T0, **kw) -> Completion:
    kw.setdefault("status", 200)
    return Completion(url_id=url_id, state=kw.pop("state", UrlState.DONE), fetched_at=at, **kw)


def page(body: bytes = b"<html>hi</html>", content_hash: str = "h1") -> PageRecord:
    return PageRecord(final_url="https://a.test/x", status=200, content_type="text/html",
                      content_hash=content_hash, body=body, title="T", fields={"k": 1}, jsonld=[{"@type": "X"}])


def claim_all(store: FrontierStore, owner: str, hosts: list[str], **kw):
    kw.setdefault("per_host", 100)
    kw.setdefault("lease_s", 60)
    kw.setdefault("now", T0)
    return store.claim(owner, hosts=hosts, **kw)


# --- add_discovered ---------------------------------------------------------------------------------------


def test_the_first_spelling_of_a_url_is_what_a_claim_requests(store: FrontierStore) -> None:
    """The key sorts the query; the site's spelling is kept beside it (the first one seen) and a claim returns it
    as ``target``; a URL whose spelling is its key stores nothing extra."""
    key = "https://a.test/item?a=en&z=5"
    store.add_discovered([
        DiscoveredUrl(url=key, kind=UrlKind.DETAIL, source=SITEMAP, fetch_url="https://a.test/item?z=5&a=en"),
        found("https://a.test/plain"),
    ], now=T0)
    store.add_discovered([DiscoveredUrl(url=key, kind=UrlKind.DETAIL, source=FEED, fetch_url=key)], now=T0)
    claimed = {c.url: c for c in claim_all(store, "w", ["https://a.test"])}
    assert claimed[key].target == "https://a.test/item?z=5&a=en"
    assert claimed["https://a.test/plain"].fetch_url is None
    assert claimed["https://a.test/plain"].target == "https://a.test/plain"
    with pytest.raises(InvalidRecord, match="fetch form"):
        store.add_discovered([DiscoveredUrl(url="https://a.test/x?a=1&b=2", kind=UrlKind.DETAIL, source=SITEMAP,
                                            fetch_url="https://b.test/x?b=2&a=1")])


def test_upsert_keeps_best_score_and_merges_sources(store: FrontierStore) -> None:
    first = store.add_discovered([found("https://a.test/p", score=5.0)], now=T0)
    assert first.inserted == 1
    again = store.add_discovered([found("https://a.test/p", source=FEED, score=2.0)], now=T0 + timedelta(hours=1))
    assert (again.inserted, again.updated) == (0, 1)
    info = store.url_info("https://a.test/p")
    assert info is not None
    assert info.score == 5.0
    assert info.last_seen == T0 + timedelta(hours=1)
    assert info.first_seen == T0
    assert store.sources_of("https://a.test/p") == [SITEMAP, FEED]
    store.add_discovered([found("https://a.test/p", source=FEED, score=9.0)], now=T0)
    assert store.url_info("https://a.test/p").score == 9.0  # type: ignore[union-attr]
    assert store.sources_of("https://a.test/p") == [SITEMAP, FEED]  # no duplicate provenance


def test_upsert_keeps_least_depth_and_folds_duplicates_in_one_batch(store: FrontierStore) -> None:
    result = store.add_discovered(
        [found("https://a.test/d", depth=3, score=1), found("https://a.test/d", depth=1, source=FEED, score=4)],
        now=T0,
    )
    assert (result.inserted, result.updated) == (1, 0)
    store.add_discovered([found("https://a.test/d", depth=2)], now=T0)
    info = store.url_info("https://a.test/d")
    assert info is not None
    assert (info.depth, info.score) == (1, 4.0)
    assert store.sources_of("https://a.test/d") == [SITEMAP, FEED]


def test_new_urls_are_queued_and_due_with_their_host(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1"), found("http://b.test:8080/2?q=1")], now=T0)
    assert store.url_states() == {"https://a.test/1": ("queued", None), "http://b.test:8080/2?q=1": ("queued", None)}
    assert set(store.stats().hosts) == {"https://a.test", "http://b.test:8080"}


def _finish(store: FrontierStore, url: str, at: datetime) -> int:
    host = url.split("/", 3)[:3]
    claimed = claim_all(store, "w", ["/".join(host)], now=at)
    (item,) = [c for c in claimed if c.url == url]
    store.complete("w", done(item.id, at, next_fetch_at=at + timedelta(days=30)))
    return item.id


def test_newer_lastmod_makes_a_done_url_due(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/n", lastmod=T0 - timedelta(days=2))], now=T0)
    fetched = T0 + timedelta(hours=1)
    _finish(store, "https://a.test/n", fetched)
    later = T0 + timedelta(days=1)
    # Control: a lastmod older than the last fetch changes nothing.
    stale = store.add_discovered([found("https://a.test/n", lastmod=T0 - timedelta(days=1))], now=later)
    assert stale.made_due == 0
    assert claim_all(store, "w", ["https://a.test"], now=later) == []
    fresh = store.add_discovered([found("https://a.test/n", lastmod=T0 + timedelta(hours=5))], now=later)
    assert fresh.made_due == 1
    assert store.url_info("https://a.test/n").next_fetch_at == later  # type: ignore[union-attr]
    assert [c.url for c in claim_all(store, "w", ["https://a.test"], now=later)] == ["https://a.test/n"]


@pytest.mark.parametrize(
    "bad",
    [
        "ftp://a.test/x",
        "/relative/path",
        "https://",
        "https://a.test/with space",
        "https://a.test/" + "x" * 2100,
        "mailto:someone@a.test",
    ],
)
def test_invalid_urls_are_rejected_and_nothing_changes(store: FrontierStore, bad: str) -> None:
    store.add_discovered([found("https://a.test/keep", score=1.0)], now=T0)
    before = store.url_states()
    with pytest.raises(InvalidRecord) as err:
        store.add_discovered([found("https://a.test/new1", score=3.0), found(bad),
                              found("https://a.test/keep", score=9.0)], now=T0)
    assert bad[:50] in str(err.value)
    assert store.url_states() == before
    assert store.url_info("https://a.test/keep").score == 1.0  # type: ignore[union-attr]


def test_invalid_fields_are_rejected(store: FrontierStore) -> None:
    with pytest.raises(InvalidRecord, match="kind"):
        store.add_discovered([DiscoveredUrl("https://a.test/k", "weird", SITEMAP)])  # type: ignore[arg-type]
    with pytest.raises(InvalidRecord, match="score"):
        store.add_discovered([found("https://a.test/s", score=float("nan"))])
    with pytest.raises(InvalidRecord, match="depth"):
        store.add_discovered([found("https://a.test/s", depth=-1)])
    assert store.url_states() == {}


# --- claims -----------------------------------------------------------------------------------------------


def _seed_hosts(store: FrontierStore, hosts: int, per_host: int) -> list[str]:
    origins = [f"https://h{h}.test" for h in range(hosts)]
    store.add_discovered(
        [found(f"{o}/p{i}", score=float(i % 7)) for o in origins for i in range(per_host)], now=T0
    )
    return origins


def test_claim_is_fair_across_hosts_top_n_per_host(store: FrontierStore) -> None:
    origins = _seed_hosts(store, 3, 20)
    claimed = store.claim("w", hosts=origins, per_host=4, lease_s=60, now=T0)
    per_host: dict[str, list[float]] = {}
    for c in claimed:
        per_host.setdefault(c.host, []).append(c.score)
    assert {h: len(s) for h, s in per_host.items()} == dict.fromkeys(origins, 4)
    assert all(scores == [6.0, 6.0, 5.0, 5.0] for scores in per_host.values())  # i % 7 over 20 URLs


def test_claim_orders_by_score_with_stable_tie_break_by_id(store: FrontierStore) -> None:
    store.add_discovered([found(f"https://a.test/{i}", score=1.0 if i in (3, 5, 8) else 0.5) for i in range(10)],
                         now=T0)
    ids = {u: store.url_info(u).id for u in store.url_states()}  # type: ignore[union-attr]
    claimed = store.claim("w", hosts=["https://a.test"], per_host=4, lease_s=60, now=T0)
    assert [c.url for c in claimed] == ["https://a.test/3", "https://a.test/5", "https://a.test/8",
                                        "https://a.test/0"]
    assert [c.id for c in claimed[:3]] == sorted(ids[f"https://a.test/{i}"] for i in (3, 5, 8))
    assert all(c.lease_until == T0 + timedelta(seconds=60) for c in claimed)


def test_claim_hands_out_urls_by_host_origin_then_best_first(store: FrontierStore) -> None:
    # Hosts stored in the reverse of their origins' order, scores interleaved across hosts and kinds of tie.
    origins = ["https://z.test", "https://m.test", "https://a.test"]
    for o in origins:
        store.add_discovered([found(f"{o}/p{i}", score=float((i * 5) % 3)) for i in range(9)], now=T0)
    claimed = store.claim("w", hosts=origins, per_host=5, lease_s=60, now=T0)
    assert len(claimed) == 15
    assert [(c.host, -c.score, c.id) for c in claimed] == sorted((c.host, -c.score, c.id) for c in claimed)
    assert [c.host for c in claimed[::5]] == sorted(origins)


_FIRST_US, _LAST_US = to_epoch_us(datetime.min.replace(tzinfo=UTC)), to_epoch_us(datetime.max.replace(tzinfo=UTC))
_EDGE_US = 2**32 * 1_000_000  # where from_epoch_us leaves its float path


@settings(max_examples=500, deadline=None)
@given(st.integers(_FIRST_US, _LAST_US) | st.integers(-_EDGE_US - 10**7, -_EDGE_US + 10**7)
       | st.integers(_EDGE_US - 10**7, _EDGE_US + 10**7) | st.integers(0, _EDGE_US))
def test_epoch_microseconds_read_back_exactly(value: int) -> None:
    # SQLite stores instants as integer microseconds; the fast float path must not move one by a microsecond.
    assert from_epoch_us(value) == EPOCH + timedelta(microseconds=value)
    assert to_epoch_us(from_epoch_us(value)) == value


def test_claimed_urls_are_not_claimed_again_until_released(store: FrontierStore) -> None:
    origins = _seed_hosts(store, 1, 5)
    first = claim_all(store, "w1", origins, per_host=3)
    second = claim_all(store, "w2", origins, per_host=3)
    assert len(first) == 3
    assert len(second) == 2
    assert not {c.id for c in first} & {c.id for c in second}
    assert claim_all(store, "w3", origins) == []
    assert store.release("w1", [c.id for c in first]) == 3
    assert store.release("w1", [second[0].id]) == 0  # not ours
    again = claim_all(store, "w3", origins)
    assert {c.id for c in again} == {c.id for c in first}
    assert all(c.attempts == 0 for c in again)


def test_claim_filters_kinds_and_skips_hosts_leased_by_others(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/list", kind=UrlKind.LISTING, score=9),
                          found("https://a.test/item"), found("https://b.test/item")], now=T0)
    assert [c.url for c in claim_all(store, "w", ["https://a.test"], kinds=(UrlKind.LISTING,))] == [
        "https://a.test/list"
    ]
    assert store.claim_hosts("other", limit=5, lease_s=60, now=T0, hosts=["https://b.test"]) == ["https://b.test"]
    claimed = claim_all(store, "w", ["https://a.test", "https://b.test"])
    assert [c.url for c in claimed] == ["https://a.test/item"]


def test_a_claim_passes_only_the_host_leases_of_owners_beside_it(store: FrontierStore) -> None:
    """Discovery's listing crawl goes on beside an extraction worker that fetches through the same polite client
    (issue 31): it passes that worker's host lease, never another owner's (another process, another gate)."""
    store.add_discovered([found("https://a.test/list", kind=UrlKind.LISTING)], now=T0)
    assert store.claim_hosts("extract-1", limit=1, lease_s=60, now=T0) == ["https://a.test"]
    listing = (UrlKind.LISTING,)
    assert claim_all(store, "discover", ["https://a.test"], kinds=listing, beside=["extract-2"]) == []
    assert [c.url for c in claim_all(store, "discover", ["https://a.test"], kinds=listing,
                                     beside=["extract-1", "extract-2"])] == ["https://a.test/list"]


def test_claim_hosts_two_owners_are_disjoint_and_expired_leases_are_taken_over(store: FrontierStore) -> None:
    origins = _seed_hosts(store, 6, 2)
    a = store.claim_hosts("A", limit=4, lease_s=60, now=T0)
    b = store.claim_hosts("B", limit=4, lease_s=60, now=T0)
    assert len(a) == 4
    assert len(b) == 2
    assert set(a) | set(b) == set(origins)
    assert not set(a) & set(b)
    assert store.claim_hosts("C", limit=4, lease_s=60, now=T0 + timedelta(seconds=30)) == []
    assert store.renew_hosts("A", a + b, lease_s=60, now=T0 + timedelta(seconds=30)) == sorted(a)
    taken = store.claim_hosts("C", limit=10, lease_s=60, now=T0 + timedelta(seconds=75))
    assert set(taken) == set(b)  # B's leases ran out; A renewed until T0+90s
    store.release_hosts("A", a)
    assert set(store.claim_hosts("C", limit=10, lease_s=60, now=T0 + timedelta(seconds=80))) == set(origins)


def test_claim_hosts_skips_hosts_without_due_work_and_blocked_or_parked(store: FrontierStore) -> None:
    origins = _seed_hosts(store, 3, 1)
    store.ensure_hosts(["https://empty.test"])
    store.save_host_policy(HostPolicy(origin=origins[0], blocked_until=T0 + timedelta(minutes=5)))
    store.save_host_policy(HostPolicy(origin=origins[1], parked_reason="crawl-delay 3600s"))
    assert store.claim_hosts("A", limit=10, lease_s=3600, now=T0) == [origins[2]]
    assert store.claim_hosts("B", limit=10, lease_s=60, now=T0 + timedelta(minutes=6)) == [origins[0]]
    later = store.claim_hosts("C", limit=10, lease_s=60, now=T0 + timedelta(days=30))
    assert origins[1] not in later  # parked with no end: stays parked
    assert origins[0] in later  # control: the others' leases ran out and they are handed out again


def test_a_park_with_an_end_is_claimable_once_it_has_passed(store: FrontierStore) -> None:
    (origin,) = _seed_hosts(store, 1, 1)
    store.save_host_policy(HostPolicy(origin=origin, parked_reason="Retry-After 3600s",
                                      blocked_until=T0 + timedelta(hours=1)))
    assert store.claim_hosts("A", limit=10, lease_s=60, now=T0 + timedelta(minutes=59)) == []  # control
    assert store.claim_hosts("A", limit=10, lease_s=60, now=T0 + timedelta(minutes=61)) == [origin]


# --- completions ------------------------------------------------------------------------------------------


def test_complete_records_outcome_page_fetch_and_outlinks(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/p")], now=T0)
    (c,) = claim_all(store, "w", ["https://a.test"])
    run_id = store.start_run("extract", profile={"name": "a"})
    store.complete(
        "w",
        done(c.id, etag='"v1"', last_modified="Wed, 01 Jan 2025 00:00:00 GMT", content_hash="h1", changed=True,
             next_fetch_at=T0 + timedelta(days=1), revisit_s=86400.0, page=page(), bytes_read=15),
        [found("https://a.test/child", source="link:https://a.test/p", depth=1),
         found("https://c.test/other", source="link:https://a.test/p", depth=1)],
        run_id=run_id,
    )
    info = store.url_info("https://a.test/p")
    assert info is not None
    assert (info.state, info.last_status, info.etag, info.content_hash) == ("done", 200, '"v1"', "h1")
    assert info.changed_at == T0
    assert info.lease_owner is None
    assert store.url_states()["https://a.test/child"] == ("queued", None)
    assert store.url_info("https://c.test/other").depth == 1  # type: ignore[union-attr]
    assert store.run_fetch_counts(run_id) == {
        "https://a.test": {"fetched": 1, "not_modified": 0, "gone": 0, "failed": 0, "bytes": 15}
    }


def test_revisit_is_claimed_when_due_and_304_keeps_validators(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/r")], now=T0)
    (c,) = claim_all(store, "w", ["https://a.test"])
    store.complete("w", done(c.id, etag='"v1"', content_hash="h1", next_fetch_at=T0 + timedelta(days=1)))
    assert claim_all(store, "w", ["https://a.test"], now=T0 + timedelta(hours=23)) == []  # control: not yet due
    (r,) = claim_all(store, "w", ["https://a.test"], now=T0 + timedelta(days=1))
    assert (r.etag, r.content_hash, r.last_fetched_at) == ('"v1"', "h1", T0)
    store.complete("w", done(r.id, T0 + timedelta(days=1), status=304, next_fetch_at=T0 + timedelta(days=3)))
    info = store.url_info("https://a.test/r")
    assert info is not None
    assert (info.state, info.etag, info.content_hash, info.last_status) == ("done", '"v1"', "h1", 304)
    fetches = list(store.iter_fetches())
    assert [(f.status, f.outcome, f.page) for f in fetches] == [(200, "fetched", None), (304, "not_modified", None)]


def test_complete_with_outlinks_is_atomic(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1"), found("https://a.test/2")], now=T0)
    c1, c2 = claim_all(store, "w", ["https://a.test"])
    before = store.url_states()
    with pytest.raises(InvalidRecord):
        store.complete_many("w", [
            (done(c1.id, page=page(), content_hash="h1"), [found("https://a.test/out", source="link:x")]),
            # duplicate_of points at no URL: the database refuses it after the first item was written.
            (done(c2.id, state=UrlState.DUPLICATE, duplicate_of=999_999), []),
        ])
    assert store.url_states() == before
    assert list(store.iter_pages()) == []
    assert list(store.iter_fetches()) == []
    # Control: the same batch without the bad reference goes through.
    result = store.complete_many("w", [
        (done(c1.id, page=page(), content_hash="h1"), [found("https://a.test/out", source="link:x")]),
        (done(c2.id, state=UrlState.DUPLICATE, duplicate_of=c1.id), []),
    ])
    assert (result.completed, result.pages, result.outlinks.inserted) == (2, 1, 1)
    assert store.url_states()["https://a.test/2"] == ("duplicate", None)


def test_invalid_outlink_rejects_the_whole_completion(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1")], now=T0)
    (c,) = claim_all(store, "w", ["https://a.test"])
    with pytest.raises(InvalidRecord, match="javascript"):
        store.complete("w", done(c.id), [found("javascript:alert(1)")])
    assert store.url_states() == {"https://a.test/1": ("leased", None)}


def test_lost_lease_raises_and_nothing_is_written(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1")], now=T0)
    (c,) = claim_all(store, "w1", ["https://a.test"])
    assert store.requeue_expired(now=T0 + timedelta(minutes=5)) == 1
    (c2,) = claim_all(store, "w2", ["https://a.test"], now=T0 + timedelta(minutes=5))
    assert c2.id == c.id
    with pytest.raises(LeaseLost):
        store.complete("w1", done(c.id, page=page()), [found("https://a.test/out")])
    assert store.url_states() == {"https://a.test/1": ("leased", None)}
    assert list(store.iter_fetches()) == []
    result = store.complete_many("w1", [(done(c.id), [])])
    assert (result.completed, result.lost, result.lost_ids) == (0, 1, (c.id,))
    store.complete("w2", done(c.id))  # the current holder can
    assert store.url_states() == {"https://a.test/1": ("done", None)}


def test_failed_fetch_is_retried_until_max_attempts(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/f")], now=T0)
    max_attempts = store.settings.politeness.max_attempts
    at = T0
    for attempt in range(1, max_attempts + 1):
        (c,) = claim_all(store, "w", ["https://a.test"], now=at)
        assert c.attempts == attempt - 1
        store.complete("w", done(c.id, at, state=UrlState.FAILED, status=503, error_class=ErrorClass.HTTP_5XX,
                                 error="503", next_fetch_at=at + timedelta(minutes=10)))
        info = store.url_info("https://a.test/f")
        assert info is not None
        assert info.attempts == attempt
        expected = "failed" if attempt == max_attempts else "queued"
        assert info.state == expected
        assert claim_all(store, "w", ["https://a.test"], now=at + timedelta(minutes=5)) == []  # not due yet
        at += timedelta(minutes=10)
    assert claim_all(store, "w", ["https://a.test"], now=at + timedelta(days=1)) == []


def test_requeue_expired_returns_only_expired_leases(store: FrontierStore) -> None:
    origins = _seed_hosts(store, 2, 3)
    short = store.claim("w1", hosts=[origins[0]], per_host=10, lease_s=10, now=T0)
    long = store.claim("w2", hosts=[origins[1]], per_host=10, lease_s=600, now=T0)
    store.claim_hosts("w1", limit=1, lease_s=10, now=T0, hosts=[origins[0]])
    assert store.requeue_expired(now=T0 + timedelta(seconds=5)) == 0  # control: nothing expired yet
    assert store.requeue_expired(now=T0 + timedelta(seconds=11)) == 3
    states = store.url_states()
    assert all(states[c.url][0] == "queued" for c in short)
    assert all(states[c.url][0] == "leased" for c in long)
    assert store.stats().hosts[origins[0]]["lease_owner"] is None


def test_duplicates_of_finds_an_existing_holder(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1"), found("https://a.test/2")], now=T0)
    c1, _ = claim_all(store, "w", ["https://a.test"])
    store.complete("w", done(c1.id, content_hash="same"))
    assert store.duplicates_of(["same", "other"]) == {"same": c1.id}
    assert store.duplicates_of(["same"], exclude_ids=[c1.id]) == {}


def test_a_holder_due_again_or_moved_vouches_for_no_content(store: FrontierStore) -> None:
    urls = [f"https://a.test/{i}" for i in range(4)]
    store.add_discovered([found(u) for u in urls], now=T0)
    fresh, due, moved, gone = claim_all(store, "w", ["https://a.test"])
    later = T0 + timedelta(days=1)
    store.complete("w", done(fresh.id, content_hash="f", next_fetch_at=later))
    store.complete("w", done(due.id, content_hash="d", next_fetch_at=T0))
    store.complete("w", done(moved.id, content_hash="m", status=301, next_fetch_at=later))
    store.complete("w", done(gone.id, content_hash="g", state=UrlState.GONE, status=410))
    found_now = store.duplicates_of(["f", "d", "m", "g"], now=T0 + timedelta(hours=1))
    assert found_now == {"f": fresh.id}  # control: a holder not due again still counts


# --- robots, documents, runs, policy ----------------------------------------------------------------------


def test_robots_round_trip(store: FrontierStore) -> None:
    assert store.load_robots("https://a.test") is None
    state = RobotsState(origin="https://a.test", status=200, fetched_at=T0, expires_at=T0 + timedelta(days=1),
                        body="User-agent: *\nDisallow: /private", etag='"r"', last_modified="x",
                        url="https://b.test/r2.txt")
    store.save_robots(state)
    assert store.load_robots("https://a.test") == state  # the URL that issued the validators too
    store.save_robots(replace(state, url=None))
    assert store.load_robots("https://a.test") == replace(state, url="https://a.test/robots.txt")
    failed = RobotsState(origin="https://a.test", status=None, fetched_at=T0, expires_at=T0,
                         error_class=ErrorClass.CONNECT)
    store.save_robots(failed)
    assert store.load_robots("https://a.test") == replace(failed, url="https://a.test/robots.txt")


def test_host_policy_and_lastmod_truthfulness(store: FrontierStore) -> None:
    policy = HostPolicy(origin="https://a.test", crawl_delay_s=2.5, request_rate_s=1.0, concurrency_limit=3,
                        blocked_until=T0, parked_reason=None, failures=4, next_allowed_at=T0)
    store.save_host_policy(policy)
    assert store.host_policy("https://a.test") == policy
    assert store.host_policy("https://nope.test") is None
    store.record_lastmod_check("https://a.test", predicted_change=True, changed=True)
    store.record_lastmod_check("https://a.test", predicted_change=True, changed=False)
    store.record_lastmod_check("https://a.test", predicted_change=False, changed=True)
    assert store.lastmod_truthfulness("https://a.test") == (2, 1)


def test_document_round_trip(store: FrontierStore) -> None:
    assert store.get_document("https://a.test/sitemap.xml") is None
    doc = DocumentState(url="https://a.test/sitemap.xml", kind="sitemap_index", status=200, etag='"s"',
                        last_modified="y", content_hash="c", fetched_at=T0, next_fetch_at=T0 + timedelta(days=7),
                        url_count=3, children=("https://a.test/s1.xml", "https://a.test/s2.xml"))
    store.save_document(doc)
    assert store.get_document(doc.url) == doc
    updated = DocumentState(url=doc.url, kind="sitemap_index", status=304, fetched_at=T0 + timedelta(days=7))
    store.save_document(updated)
    assert store.get_document(doc.url) == updated


def test_run_round_trip_and_last_profile(store: FrontierStore) -> None:
    assert store.last_profile() is None
    r1 = store.start_run("discover", profile={"name": "one", "seeds": ["https://a.test/"]}, owner="me")
    r2 = store.start_run("extract", profile={"name": "two"})
    store.finish_run(r1, status="completed", counters={"urls": 3})
    assert store.last_profile() == {"name": "two"}
    assert store.last_profile("discover") == {"name": "one", "seeds": ["https://a.test/"]}
    run = store.get_run(r1)
    assert run is not None
    assert (run["status"], run["counters"], run["owner"]) == ("completed", {"urls": 3}, "me")
    assert store.get_run(r2)["finished_at"] is None  # type: ignore[index]
    with pytest.raises(InvalidRecord):
        store.finish_run(12345, status="completed", counters={})


# --- reporting --------------------------------------------------------------------------------------------


def test_stats_counts_by_state_kind_and_host(store: FrontierStore) -> None:
    store.add_discovered([found("https://a.test/1"), found("https://a.test/2"),
                          found("https://a.test/l", kind=UrlKind.LISTING), found("https://b.test/1")], now=T0)
    (c,) = claim_all(store, "w", ["https://b.test"])
    store.complete("w", done(c.id, state=UrlState.GONE, status=404))
    store.save_host_policy(HostPolicy(origin="https://b.test", parked_reason="too slow"))
    stats = store.stats()
    assert stats.total == 4
    assert stats.by_state == {"queued": 3, "missing": 1}  # gone, never stored: a broken link (models.MISSING_ROWS)
    assert stats.by_kind == {"detail": 3, "listing": 1}
    assert stats.hosts["https://a.test"]["states"] == {"queued": 3}
    assert stats.hosts["https://b.test"]["states"] == {"missing": 1}
    assert stats.hosts["https://b.test"]["parked_reason"] == "too slow"
    as_dict = stats.as_dict()
    import json

    assert json.loads(json.dumps(as_dict))["by_state"]["missing"] == 1
    assert store.url_info("https://b.test/1").gone_at == T0  # type: ignore[union-attr]


def test_state_counts_are_the_stats_by_state_leased_ones_included(store: FrontierStore) -> None:
    """The progress line's cheap count is exactly ``stats().by_state``, a leased URL counted as leased."""
    store.add_discovered([found(f"https://a.test/{i}") for i in range(4)] + [found("https://b.test/1")], now=T0)
    (c,) = claim_all(store, "w", ["https://b.test"])
    store.complete("w", done(c.id, state=UrlState.GONE, status=404))
    leased = claim_all(store, "w", ["https://a.test"], per_host=2)
    assert len(leased) == 2
    assert store.state_counts() == store.stats().by_state == {"queued": 2, "leased": 2, "missing": 1}


def test_iter_pages_streams_in_batches_and_decompresses(store: FrontierStore) -> None:
    store.add_discovered([found(f"https://a.test/{i}") for i in range(5)], now=T0)
    claimed = claim_all(store, "w", ["https://a.test"])
    bodies = {c.id: (f"<html>{c.url}</html>" * 50).encode() for c in claimed}
    store.complete_many("w", [
        (done(c.id, T0 + timedelta(minutes=i), page=page(bodies[c.id], f"h{i}"), content_hash=f"h{i}"), [])
        for i, c in enumerate(claimed)
    ])
    pages = list(store.iter_pages(batch=2))
    assert [p.body for p in pages] == [bodies[c.id] for c in claimed]
    assert pages[0].title == "T"
    assert pages[0].fields == {"k": 1}
    assert pages[0].jsonld == [{"@type": "X"}]
    recent = list(store.iter_pages(since=T0 + timedelta(minutes=3), batch=2))
    assert [p.url for p in recent] == [claimed[3].url, claimed[4].url]
    fetches = list(store.iter_fetches(batch=3))
    assert len(fetches) == 5
    assert all(f.page is not None and f.page.body == bodies[f.url_id] for f in fetches)


def test_urls_never_fetched_come_before_revisits_nothing_announced_and_after_announced_ones(
    store: FrontierStore,
) -> None:
    """Claim order within a host (what a page budget takes): revisits a newer lastmod announced, then URLs never
    fetched, then revisits that merely came due; score orders each group (docs/architecture.md, invariant 10)."""
    store.add_discovered([found("https://a.test/old", score=5.0), found("https://a.test/told", score=0.5)], now=T0)
    for c in claim_all(store, "w", ["https://a.test"]):
        store.complete("w", done(c.id, next_fetch_at=T0 + timedelta(days=1)))
    store.add_discovered([found("https://a.test/low", score=1.0), found("https://a.test/high", score=9.0)], now=T0)
    later = T0 + timedelta(days=2)
    store.add_discovered([found("https://a.test/told", score=0.5)._replace(lastmod=later - timedelta(hours=1))],
                         now=later)
    taken = [{x.url for x in store.claim("w", hosts=["https://a.test"], per_host=n, lease_s=60, now=later)}
             for n in (1, 2, 2)]
    assert taken == [{"https://a.test/told"}, {"https://a.test/high", "https://a.test/low"}, {"https://a.test/old"}]


def test_run_fetch_counts_by_outcome_and_error_class(store: FrontierStore) -> None:
    """``fetched`` is requests sent, whatever they answered; a completion without a request (a page skipped on
    its truthful lastmod, a host parked) is none."""
    store.add_discovered([found(f"https://a.test/{i}") for i in range(6)], now=T0)
    c = claim_all(store, "w", ["https://a.test"])
    run_id = store.start_run("extract")
    store.complete_many("w", [
        (done(c[0].id), []),
        (done(c[1].id, status=304), []),
        (done(c[2].id, state=UrlState.GONE, status=410), []),
        (done(c[3].id, state=UrlState.FAILED, status=None, error_class=ErrorClass.TIMEOUT, error="slow",
              next_fetch_at=T0 + timedelta(minutes=5)), []),
        (done(c[4].id, status=None), []),  # skipped on its lastmod: no request
        (done(c[5].id, state=UrlState.QUEUED, status=None, error_class=ErrorClass.PARKED, error="parked"), []),
    ], run_id=run_id)
    assert store.run_fetch_counts(run_id) == {
        "https://a.test": {"fetched": 4, "not_modified": 1, "gone": 1, "failed": 1, "error:timeout": 1, "bytes": 0}
    }
    assert store.run_fetch_counts(run_id + 1) == {}


def test_concurrent_threads_share_one_store_and_never_claim_twice(store: FrontierStore) -> None:
    import threading

    origins = _seed_hosts(store, 3, 40)
    taken: list[list[int]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(slot: int) -> None:
        try:
            start.wait()
            while True:
                batch = store.claim(f"t{slot}", hosts=origins, per_host=1, lease_s=60, now=T0)
                if not batch:
                    return
                taken[slot] += [c.id for c in batch]
                if len(taken[slot]) < 12:  # writers interleave with claimers; bounded so the pool drains
                    store.add_discovered([found(f"{origins[0]}/t{slot}-{c.id}") for c in batch[:1]], now=T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    # A URL added by one thread after another saw an empty claim is still queued: take it now.
    rest = [c.id for c in store.claim("main", hosts=origins, per_host=1000, lease_s=60, now=T0)]
    every = [i for ids in taken for i in ids] + rest
    assert len(every) == len(set(every))
    assert len(every) == len(store.url_states())


def test_mixed_batches_count_and_merge_the_same_on_every_path(store: FrontierStore) -> None:
    """A batch of mostly new URLs and one of mostly known URLs take different write orders on SQLite; the
    results must not depend on it."""
    store.add_discovered([found(f"https://a.test/{i}", score=1.0) for i in range(4)], now=T0)
    mostly_new = [found(f"https://a.test/{i}", source=FEED, score=2.0) for i in range(2, 10)]
    assert store.add_discovered(mostly_new, now=T0) == AddResult(inserted=6, updated=2, made_due=0)
    mostly_known = [found(f"https://a.test/{i}", source="listing:https://a.test/l", score=0.5) for i in range(9, 12)]
    mostly_known += [found(f"https://a.test/{i}", source="listing:https://a.test/l") for i in range(0, 9)]
    assert store.add_discovered(mostly_known, now=T0) == AddResult(inserted=2, updated=10, made_due=0)
    assert store.sources_of("https://a.test/3") == [SITEMAP, FEED, "listing:https://a.test/l"]
    assert store.sources_of("https://a.test/11") == ["listing:https://a.test/l"]
    assert store.url_info("https://a.test/3").score == 2.0  # type: ignore[union-attr]
    fresh_twice = [found("https://a.test/new", source=SITEMAP), found("https://a.test/new", source=FEED)]
    assert store.add_discovered(fresh_twice, now=T0).inserted == 1
    assert store.sources_of("https://a.test/new") == [SITEMAP, FEED]


def test_declared_canonicals_and_demotion_to_duplicate(store: FrontierStore) -> None:
    from dataclasses import replace

    urls = ["p/x?colour=blue", "p/x?colour=red", "p/x", "q", "r"]
    store.add_discovered([found(f"https://a.test/{path}") for path in urls])
    claimed = {c.url: c.id for c in claim_all(store, "w", ["https://a.test"])}
    variant, red, clean, other, late = (claimed[f"https://a.test/{path}"] for path in urls)
    store.complete("w", done(variant, page=replace(page(), canonical_url="https://a.test/p/x"), content_hash="h1"))
    store.complete("w", done(red, state=UrlState.DUPLICATE, duplicate_of=variant))
    store.complete("w", done(other, page=page(content_hash="h2"), content_hash="h2"))  # declares none
    assert store.declared_canonicals([variant, clean, other]) == {variant: "https://a.test/p/x"}
    # A new holder whose completion is not written (its lease is gone) demotes nothing.
    store.release("w", [late])
    lost = store.complete_many("w", [(done(late, page=page(), content_hash="h1"), [])], demote=[(variant, late)])
    assert (lost.lost, lost.demoted) == (1, 0)
    assert store.url_states()["https://a.test/p/x?colour=blue"][0] == "done"
    # Written with the clean URL's completion: the variant becomes its duplicate, and the variant's own duplicate
    # follows it. Only a DONE URL is demoted: the red one is a duplicate already.
    result = store.complete_many("w", [(done(clean, page=page(), content_hash="h1"), [])],
                                 demote=[(variant, clean), (red, clean)])
    assert result.demoted == 1
    states = store.url_states()
    assert states["https://a.test/p/x?colour=blue"][0] == "duplicate"
    assert states["https://a.test/p/x"][0] == "done"
    assert store.url_info("https://a.test/p/x?colour=blue").duplicate_of == clean  # type: ignore[union-attr]
    assert store.url_info("https://a.test/p/x?colour=red").duplicate_of == clean  # type: ignore[union-attr]
    assert states["https://a.test/q"][0] == "done"
    assert store.complete_many("w", [], demote=[(clean, variant)]).demoted == 0


def test_next_due_at_is_when_queued_work_can_next_be_claimed(store: FrontierStore) -> None:
    """A retry due while its host still backs off is claimable only when the back-off ends; a URL due now on a
    host backing off, likewise; a parked host's retries are not waited for."""
    minute = timedelta(minutes=1)
    hosts = ["https://a.test", "https://b.test", "https://c.test", "https://d.test"]
    store.add_discovered([found(f"{host}/x") for host in hosts], now=T0)
    ids = {c.url.split("/")[2]: c.id for c in claim_all(store, "w", hosts)}

    def retry(host: str, due: datetime) -> None:
        store.complete("w", done(ids[host], state=UrlState.FAILED, status=503, next_fetch_at=due,
                                 error_class=ErrorClass.HTTP_5XX, error="HTTP 503"))

    retry("b.test", T0 + 2 * minute)
    store.save_host_policy(HostPolicy(origin="https://b.test", blocked_until=T0 + 10 * minute))
    store.release("w", [ids["c.test"]])  # due now
    store.save_host_policy(HostPolicy(origin="https://c.test", blocked_until=T0 + 5 * minute))
    retry("d.test", T0 + 30 * timedelta(seconds=1))
    store.save_host_policy(HostPolicy(origin="https://d.test", parked_reason="Retry-After 3600s",
                                      blocked_until=T0 + 60 * minute))
    assert store.next_due_at(now=T0) == T0 + 5 * minute  # c's back-off ends; b's retry waits for b's
    retry("a.test", T0 + minute)
    assert store.next_due_at(now=T0) == T0 + minute
    assert store.next_due_at(now=T0 + 6 * minute) == T0 + 10 * minute  # c is claimable now: not waited for
    assert store.next_due_at(now=T0 + 11 * minute) is None


def test_a_claim_names_every_first_source_though_the_source_cache_was_full(
    store: FrontierStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's URLs whose first source the bounded cache held when it was emptied keep their source: one read as
    unknown counts as listed (``revisit.listed``), and a feed-only page would be skipped on its feed date."""
    monkeypatch.setattr("harvester.frontier.queue.SOURCE_KINDS_CACHED", 1)
    host = "https://a.test"
    store.add_discovered([found(f"{host}/s", score=3.0), found(f"{host}/f", source=FEED, score=2.0)], now=T0)
    assert [c.source for c in claim_all(store, "w", [host], per_host=2)] == ["sitemap", "feed"]  # both cached
    store.add_discovered([found(f"{host}/f2", source=FEED, score=1.0),
                          found(f"{host}/l", source="listing:https://a.test/list", score=0.5)], now=T0)
    claimed = {c.url: c.source for c in claim_all(store, "w", [host])}
    assert claimed == {f"{host}/f2": "feed", f"{host}/l": "listing"}, claimed
