"""No version is lost (DESIGN invariant 12): the payload digest decides a new version, the main text only whether it
is changed or restyled; identical payloads are stored once. And a cycle's counts (invariant 11) read back from what
each answer was labelled, over every attempt of the cycle. On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from harvester.frontier import FrontierStore
from harvester.records import Completion, DiscoveredUrl, PageRecord, Source, UrlKind, UrlState

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A = "https://a.test"


def found(url: str, kind: UrlKind = UrlKind.DETAIL) -> DiscoveredUrl:
    return DiscoveredUrl(url=url, kind=kind, source=f"{Source.SITEMAP.value}:{A}/sitemap.xml")


def answer(url_id: int, body: bytes, main: str, at: datetime = T0) -> Completion:
    page = PageRecord(final_url=f"{A}/x", status=200, content_type="text/html", content_hash=main, body=body)
    return Completion(url_id=url_id, state=UrlState.DONE, fetched_at=at, status=200, content_hash=main, page=page,
                      bytes_read=len(body))


def gone(url_id: int, status: int = 410) -> Completion:
    return Completion(url_id=url_id, state=UrlState.GONE, fetched_at=T0, status=status)


def complete(store: FrontierStore, items: list[Completion], *, run_id: int | None = None) -> None:
    """Lease the URLs of ``items`` (made due first) and write them in one batch."""
    ids = {c.url_id for c in items}
    store.make_due([A], now=T0 - timedelta(days=1))
    leased = store.claim("w", hosts=[A], per_host=1000, lease_s=60, now=T0)
    assert ids <= {c.id for c in leased}
    store.complete_many("w", [(c, []) for c in items], run_id=run_id)
    store.release_owner("w")


def ids_of(store: FrontierStore, urls: list[str]) -> dict[str, int]:
    store.add_discovered([found(u) for u in urls], now=T0 - timedelta(days=2))
    return {u: int(store.url_info(u).id) for u in urls}  # type: ignore[union-attr]


def test_a_version_is_new_when_its_payload_is_and_identical_payloads_are_stored_once(store: FrontierStore) -> None:
    ids = ids_of(store, [f"{A}/p", f"{A}/q"])
    p, q = ids[f"{A}/p"], ids[f"{A}/q"]
    complete(store, [answer(p, b"<p>one</p><ad>1</ad>", "m1")])
    complete(store, [answer(p, b"<p>one</p><ad>1</ad>", "m1")])  # byte for byte the same: nothing new stored
    complete(store, [answer(p, b"<p>one</p><ad>2</ad>", "m1")])  # bytes outside the main text: restyled
    complete(store, [answer(p, b"<p>two</p><ad>2</ad>", "m2")])  # the main text: changed
    complete(store, [answer(q, b"<p>one</p><ad>1</ad>", "m1-q")])  # another URL serving a stored payload
    versions = list(store.iter_pages())
    assert [(v.url, v.change, v.body) for v in versions] == [
        (f"{A}/p", "new", b"<p>one</p><ad>1</ad>"),
        (f"{A}/p", "restyled", b"<p>one</p><ad>2</ad>"),
        (f"{A}/p", "changed", b"<p>two</p><ad>2</ad>"),
        (f"{A}/q", "new", b"<p>one</p><ad>1</ad>"),
    ]
    assert all(v.payload_digest == hashlib.sha256(v.body).hexdigest() for v in versions)
    latest = {v.url: v.body for v in store.iter_pages(latest=True)}
    assert latest == {f"{A}/p": b"<p>two</p><ad>2</ad>", f"{A}/q": b"<p>one</p><ad>1</ad>"}
    with store.db.tx(write=False) as tx:
        bodies = tx.conn.exec_driver_sql("SELECT count(*) FROM bodies").scalar_one()
    assert bodies == 3  # four versions, three distinct payloads
    fetches = [(f.url, f.change, f.page.page_id if f.page else None) for f in store.iter_fetches()]
    first = versions[0].page_id
    assert fetches[:2] == [(f"{A}/p", "new", first), (f"{A}/p", "same", first)]  # the repeat names what it served


def test_a_listing_page_keeps_its_versions_and_the_snapshot_its_latest_bytes(store: FrontierStore) -> None:
    store.add_discovered([found(f"{A}/list/", UrlKind.LISTING)], now=T0 - timedelta(days=2))
    url_id = int(store.url_info(f"{A}/list/").id)  # type: ignore[union-attr]
    for n in range(3):
        body = f"<ul><li>item {n}</li></ul>".encode()
        store.make_due([A], now=T0 - timedelta(days=1))
        leased = store.claim("w", hosts=[A], per_host=10, lease_s=60, now=T0, kinds=(UrlKind.LISTING,))
        assert [c.id for c in leased] == [url_id]
        store.complete_many("w", [(answer(url_id, body, hashlib.sha256(body).hexdigest()), [])])
    assert list(store.iter_pages()) == []  # detail pages by default, as before
    kept = list(store.iter_pages(kinds=None))
    assert [v.body for v in kept] == [f"<ul><li>item {n}</li></ul>".encode() for n in range(3)]
    assert {v.kind for v in kept} == {"listing"}


def test_gone_needs_a_stored_version_and_a_cycle_counts_every_attempt(store: FrontierStore) -> None:
    """A resumed cycle (``begin_cycle`` again after an attempt that never closed) reports both attempts; a URL
    found but never fetched is in no count; 404 of a URL never stored is missing, not gone; gone is never also
    changed; a request-less completion is not fetched."""
    urls = [f"{A}/{name}" for name in ("old", "edit", "style", "dead", "broken", "fresh", "unfetched")]
    ids = ids_of(store, urls)
    profile = {"name": "site"}
    setup, resumed = store.begin_cycle("harvest", profile=profile)
    assert not resumed
    run = store.start_run("extract", profile=profile)
    complete(store, [answer(ids[u], u.encode(), u) for u in urls[:4]], run_id=run)
    store.finish_run(run, status="completed", counters={})
    store.finish_cycle(setup, origins=[A])
    assert store.cycle_counts(setup)["new"] == 4

    cycle, resumed = store.begin_cycle("recrawl", profile=profile)
    assert not resumed and cycle != setup
    first = store.start_run("extract", profile=profile)  # an attempt killed before it finished its run
    complete(store, [answer(ids[f"{A}/edit"], b"edited", "edited"), gone(ids[f"{A}/dead"])], run_id=first)
    again, resumed = store.begin_cycle("recrawl", profile=profile)
    assert (again, resumed) == (cycle, True)
    second = store.resume_or_start_run("extract", profile=profile)
    assert second == first  # the unfinished run is resumed within its cycle
    complete(store, [
        answer(ids[f"{A}/style"], b"restyled bytes", f"{A}/style"), gone(ids[f"{A}/broken"], 404),
        answer(ids[f"{A}/fresh"], b"fresh", "fresh"), answer(ids[f"{A}/old"], f"{A}/old".encode(), f"{A}/old"),
        Completion(url_id=ids[f"{A}/unfetched"], state=UrlState.DONE, fetched_at=T0),  # no request
    ], run_id=second)
    store.finish_run(second, status="completed", counters={})
    store.finish_cycle(cycle, origins=[A])
    counts = store.cycle_counts(cycle)
    picked = {key: counts[key] for key in ("new", "changed", "restyled", "gone", "missing", "fetched")}  # type: ignore[literal-required]
    assert picked == {"new": 1, "changed": 1, "restyled": 1, "gone": 1, "missing": 1, "fetched": 6}
    assert counts["new_urls"] == [f"{A}/fresh"] and counts["changed_urls"] == [f"{A}/edit"]
    assert counts["gone_urls"] == [f"{A}/dead"] and counts["restyled_urls"] == [f"{A}/style"]
    assert counts["hosts"] == {A: {"fetched": 6, "not_modified": 0, "gone": 2, "failed": 0}}
    # Control: the earlier cycle's counts are its own.
    assert store.cycle_counts(setup)["new"] == 4 and store.cycle_counts(setup)["changed"] == 0
