"""export: JSONL and WARC 1.1 written from a real frontier store (SQLite file and PostgreSQL), read back."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from warcio.archiveiterator import ArchiveIterator

from harvester.export import (
    JSONL_FIELDS,
    REVISIT_NOT_MODIFIED,
    WarcCounts,
    export_jsonl,
    export_warc,
    sha1_digest,
)
from harvester.extraction import extract_page
from harvester.frontier import FrontierStore
from harvester.records import ClaimedUrl, Completion, DiscoveredUrl, ErrorClass, FetchResult, UrlKind, UrlState
from harvester.rules.revisit import classify_outcome
from harvester.settings import Settings

ORIGIN = "https://shop.example"
UA = "harvester-test/1.0 (+https://harvester.invalid/contact)"
DAY1 = datetime(2024, 6, 10, 8, 0, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=1, hours=1)


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def html(title: str, text: str) -> bytes:
    return (
        f'<html lang="en"><head><title>{title}</title><meta name="description" content="about {title}">'
        f'<script type="application/ld+json">{{"@type": "Product", "name": "{title}"}}</script></head>'
        f"<body><nav><a href='/'>home</a></nav><main><h1>{title}</h1><p>{text}</p></main></body></html>"
    ).encode()


def fetch(url: str, status: int | None, body: bytes | None = None, *, etag: str | None = None,
          error_class: ErrorClass | None = None) -> FetchResult:
    return FetchResult(
        url=url, final_url=url, status=status, started_at=0.0, elapsed_s=0.01, body=body,
        content_type="text/html; charset=utf-8" if body is not None else None, etag=etag,
        last_modified="Mon, 10 Jun 2024 08:00:00 GMT" if etag else None, error_class=error_class,
        bytes_read=len(body or b""), headers={},
    )


def complete(store: FrontierStore, settings: Settings, item: ClaimedUrl, result: FetchResult, now: datetime,
             run_id: int | None = None) -> None:
    extracted = extract_page(result, settings=settings) if result.ok and result.body is not None else None
    new_hash = extracted.content_hash if extracted is not None else None
    outcome = classify_outcome(item, result, new_hash, settings=settings, now=now)
    # Due again right away, so the test's "day 2" claims every URL that is still live.
    store.complete("w", Completion(
        url_id=item.id, state=outcome.state, fetched_at=now, status=result.status, etag=result.etag,
        last_modified=result.last_modified, content_hash=outcome.content_hash, changed=outcome.changed,
        next_fetch_at=now, revisit_s=outcome.revisit_s, error_class=outcome.error_class, error=outcome.error,
        page=extracted.page if extracted is not None and outcome.store_page else None, bytes_read=result.bytes_read,
    ), run_id=run_id)


def claim_all(store: FrontierStore, now: datetime) -> dict[str, ClaimedUrl]:
    return {c.url: c for c in store.claim("w", hosts=[ORIGIN], per_host=100, lease_s=300, now=now)}


@pytest.fixture
def harvested(db_url):
    """Two days of a tiny harvest: day 1 four URLs (two pages, a 404, a timeout), day 2 a 304, a changed page; every
    fetch in a run that sent ``UA``."""
    settings = Settings(database_url=db_url)
    store = FrontierStore.open(settings, upgrade=True)
    urls = [f"{ORIGIN}/p/{name}" for name in ("a", "b", "gone", "slow")]
    store.add_discovered([DiscoveredUrl(url=u, kind=UrlKind.DETAIL, source="seed") for u in urls], now=DAY1)
    run = store.start_run("extract", user_agent=UA)
    day1 = claim_all(store, DAY1)
    assert set(day1) == set(urls)
    complete(store, settings, day1[urls[0]], fetch(urls[0], 200, html("Alpha", "first"), etag='"a1"'), DAY1, run)
    complete(store, settings, day1[urls[1]], fetch(urls[1], 200, html("Beta", "first"), etag='"b1"'), DAY1, run)
    complete(store, settings, day1[urls[2]], fetch(urls[2], 404, error_class=ErrorClass.HTTP_4XX), DAY1, run)
    complete(store, settings, day1[urls[3]], fetch(urls[3], None, error_class=ErrorClass.TIMEOUT), DAY1, run)
    day2 = claim_all(store, DAY2)
    assert {urls[0], urls[1]} <= set(day2)
    complete(store, settings, day2[urls[0]], fetch(urls[0], 304, etag='"a1"'), DAY2, run)
    complete(store, settings, day2[urls[1]], fetch(urls[1], 200, html("Beta", "second"), etag='"b2"'), DAY2, run)
    try:
        yield store, urls
    finally:
        store.close()


def read_warc(data: bytes) -> list:
    records = []
    for record in ArchiveIterator(io.BytesIO(data)):
        records.append((record.rec_type, dict(record.rec_headers.headers), record.http_headers,
                        record.content_stream().read()))
    return records


def test_jsonl_matches_the_database(harvested):
    store, urls = harvested
    out = io.BytesIO()
    count = export_jsonl(store.iter_pages(), out)
    lines = [json.loads(line) for line in out.getvalue().decode().splitlines()]
    pages = list(store.iter_pages())
    assert count == len(lines) == len(pages) == 3  # a (day 1), b (day 1), b (day 2); the 304 stored nothing
    for line, page in zip(lines, pages, strict=True):
        assert tuple(line) == JSONL_FIELDS
        assert line["url"] == page.url
        assert line["content_hash"] == page.content_hash
        assert line["etag"] == page.etag
        assert line["title"] == page.title
        assert line["jsonld"] == page.jsonld
        assert line["fields"] == page.fields
        assert line["robots"] == []  # no directive applied to us
        assert line["state"] == "done"
        assert datetime.fromisoformat(line["fetched_at"]) == page.fetched_at
    assert [(line["url"], line["title"], line["etag"]) for line in lines] == [
        (urls[0], "Alpha", '"a1"'), (urls[1], "Beta", '"b1"'), (urls[1], "Beta", '"b2"')]
    assert lines[1]["content_hash"] != lines[2]["content_hash"]
    assert lines[0]["language"] == "en"
    assert lines[0]["jsonld"] == [{"@type": "Product", "name": "Alpha"}]


def test_jsonl_to_a_text_stream_and_since(harvested):
    store, _urls = harvested
    out = io.StringIO()
    assert export_jsonl(store.iter_pages(since=DAY2 - timedelta(minutes=1)), out) == 1
    assert json.loads(out.getvalue())["etag"] == '"b2"'


def test_warc_has_one_record_per_stored_exchange_with_bodies_intact(harvested):
    store, urls = harvested
    fetches = list(store.iter_fetches())
    assert len(fetches) == 6
    out = io.BytesIO()
    counts = WarcCounts()
    archived = export_warc(store.iter_fetches(), out, filename="day2.warc.gz", counts=counts)
    records = read_warc(out.getvalue())
    assert out.getvalue()[:2] == b"\x1f\x8b"  # gzip members
    assert records[0][0] == "warcinfo"
    assert records[0][1]["WARC-Filename"] == "day2.warc.gz"
    assert {h.get("WARC-Type") for _, h, _, _ in records} == {"warcinfo", "response", "revisit", "request"}
    answers = [r for r in records if r[0] in ("response", "revisit")]
    requests = [r for r in records if r[0] == "request"]
    # One answer per fetch with stored bytes, or a 304 of one; the 404 (its body was not kept) and the timeout (no
    # answer at all) are left out and counted, not written as empty or invented records.
    assert archived == len(answers) == len(requests) == 4
    assert (counts.error_status, counts.no_exchange, counts.left_out) == (1, 1, 2)
    # A 304's revisit has an empty block (replay serves the earlier response); its profile says what it was.
    assert [(r[0], r[1]["WARC-Target-URI"], r[2].get_statuscode() if r[2] else r[1]["WARC-Profile"])
            for r in answers] == [("response", urls[0], "200"), ("response", urls[1], "200"),
                                  ("revisit", urls[0], REVISIT_NOT_MODIFIED), ("response", urls[1], "200")]
    bodies = {page.page_id: page.body for page in store.iter_pages()}
    stored = [f.page.body for f in fetches if f.page is not None and f.status != 304]  # a 304's is the one it confirmed
    assert [f.page.page_id for f in fetches if f.status == 304] == [fetches[0].page.page_id]
    written = [r[3] for r in answers if r[0] == "response"]
    assert written == stored
    assert sorted(written) == sorted(bodies.values())
    for _, headers, http_headers, body in answers:
        if headers["WARC-Type"] == "response":
            assert headers["WARC-Payload-Digest"] == sha1_digest(body)
            assert http_headers.get_header("Content-Length") == str(len(body))
    # every WARC header block says 1.1
    raw = read_raw_versions(out.getvalue())
    assert raw == {"WARC/1.1"}


def test_warc_revisit_refers_to_the_earlier_response_and_request_is_conditional(harvested):
    store, urls = harvested
    out = io.BytesIO()
    export_warc(store.iter_fetches(), out, filename="t.warc.gz")
    records = read_warc(out.getvalue())
    first = next(r for r in records if r[0] == "response" and r[1]["WARC-Target-URI"] == urls[0])
    revisit = next(r for r in records if r[0] == "revisit")
    assert revisit[1]["WARC-Profile"] == "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
    assert revisit[1]["WARC-Refers-To-Target-URI"] == urls[0]
    assert revisit[1]["WARC-Refers-To-Date"] == first[1]["WARC-Date"]
    assert revisit[1]["WARC-Refers-To"] == first[1]["WARC-Record-ID"]
    assert revisit[3] == b""
    by_id = {r[1]["WARC-Record-ID"]: r for r in records}
    for record_type, headers, http_headers, _ in records:
        if record_type != "request":
            continue
        linked = by_id[headers["WARC-Concurrent-To"]]
        assert linked[0] in ("response", "revisit")
        assert linked[1]["WARC-Target-URI"] == headers["WARC-Target-URI"]
        assert http_headers.get_header("User-Agent") == UA
        assert http_headers.protocol == "GET"
    revisit_request = next(r for r in records if r[0] == "request" and r[1]["WARC-Concurrent-To"] ==
                           revisit[1]["WARC-Record-ID"])
    assert revisit_request[2].get_header("If-None-Match") == '"a1"'
    # control: the day-1 request of the same URL had nothing to be conditional on
    first_request = next(r for r in records if r[0] == "request" and r[1]["WARC-Concurrent-To"] ==
                         first[1]["WARC-Record-ID"])
    assert first_request[2].get_header("If-None-Match") is None


def test_warc_streams_from_a_generator_with_bounded_state():
    """The writer takes any iterator and keeps at most ``refer_cache`` earlier responses."""
    from harvester.store_results import StoredFetch, StoredPage

    def many():
        for i in range(300):
            url = f"{ORIGIN}/p/{i}"
            page = StoredPage(page_id=i, url_id=i, url=url, final_url=url, fetched_at=DAY1, status=200,
                              content_type="text/html", etag=f'"{i}"', last_modified=None, content_hash="h",
                              body=b"<p>%d</p>" % i)
            yield StoredFetch(fetch_id=i, url_id=i, url=url, fetched_at=DAY1, status=200, outcome="fetched",
                              bytes=8, error_class=None, run_id=None, page=page)
            yield StoredFetch(fetch_id=1000 + i, url_id=i, url=url, fetched_at=DAY2, status=304,
                              outcome="not_modified", bytes=0, error_class=None, run_id=None, page=None)

    out = io.BytesIO()
    assert export_warc(many(), out, filename="many.warc.gz", refer_cache=10) == 600
    revisits = [r for r in read_warc(out.getvalue()) if r[0] == "revisit"]
    assert len(revisits) == 300
    assert all(r[1]["WARC-Refers-To-Target-URI"] for r in revisits)


def read_raw_versions(data: bytes) -> set[str]:
    versions = set()
    for record in ArchiveIterator(io.BytesIO(data)):
        versions.add(record.rec_headers.protocol)
    return versions


@pytest.mark.parametrize(
    ("meta", "header", "robots"),
    [
        ('<meta name="robots" content="noindex">', None, ["noindex"]),
        ('<meta name="robots" content="none">', None, ["noindex", "nofollow"]),
        ("", "noindex, nofollow", ["noindex", "nofollow"]),
        ('<meta name="googlebot" content="noindex">', "otherbot: nofollow", []),  # other crawlers' directives
    ],
)
def test_the_robots_directives_a_page_gave_us_are_stored_and_exported(db_url, meta, header, robots):
    settings = Settings(database_url=db_url, http={"user_agent": UA})
    url = f"{ORIGIN}/p/private"
    body = f"<html><head><title>t</title>{meta}</head><body><main><p>text</p></main></body></html>".encode()
    result = FetchResult(
        url=url, final_url=url, status=200, started_at=0.0, elapsed_s=0.01, body=body,
        content_type="text/html; charset=utf-8", bytes_read=len(body),
        headers={"x-robots-tag": header} if header else {},
    )
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url=url, kind=UrlKind.DETAIL, source="seed")], now=DAY1)
        complete(store, settings, claim_all(store, DAY1)[url], result, DAY1)
        pages = list(store.iter_pages())
        out = io.BytesIO()
        export_jsonl(store.iter_pages(), out)
    assert [page.robots for page in pages] == [tuple(robots)]
    assert json.loads(out.getvalue())["robots"] == robots


def test_latest_exports_the_current_version_of_each_live_page(db_url):
    """Every stored version by default, each with the URL's state now (``moved`` for one whose last answer was a
    permanent redirect); ``latest``: the newest version of each URL, and nothing of one since found gone or moved
    (its page lives at the new address)."""
    settings = Settings(database_url=db_url)
    urls = [f"{ORIGIN}/p/{name}" for name in ("kept", "changed", "removed", "moving")]
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url=u, kind=UrlKind.DETAIL, source="seed") for u in urls], now=DAY1)
        day1 = claim_all(store, DAY1)
        for url in urls:
            complete(store, settings, day1[url], fetch(url, 200, html(url[-7:], "first"), etag='"1"'), DAY1)
        day2 = claim_all(store, DAY2)
        complete(store, settings, day2[urls[0]], fetch(urls[0], 304, etag='"1"'), DAY2)
        complete(store, settings, day2[urls[1]], fetch(urls[1], 200, html("changed", "second"), etag='"2"'), DAY2)
        complete(store, settings, day2[urls[2]], fetch(urls[2], 404, error_class=ErrorClass.HTTP_4XX), DAY2)
        # As extraction records a move: the 301 it answered, where it leads, nothing stored.
        store.complete("w", Completion(url_id=day2[urls[3]].id, state=UrlState.DONE, fetched_at=DAY2, status=301,
                                       final_url=f"{ORIGIN}/q/moved", next_fetch_at=DAY2 + timedelta(days=30)))
        every, latest = io.BytesIO(), io.BytesIO()
        export_jsonl(store.iter_pages(), every)
        export_jsonl(store.iter_pages(latest=True, batch=1), latest)
    every_lines = [json.loads(line) for line in every.getvalue().splitlines()]
    latest_lines = [json.loads(line) for line in latest.getvalue().splitlines()]
    assert [(line["url"], line["state"]) for line in every_lines] == [
        (urls[0], "done"), (urls[1], "done"), (urls[2], "gone"), (urls[3], "moved"), (urls[1], "done")]
    assert [(line["url"], line["etag"]) for line in latest_lines] == [(urls[0], '"1"'), (urls[1], '"2"')]
