"""The WARC writer's record choices, fed the store's records directly: standard revisits only, never a record
for bytes it does not have, references that name a record in the file or the stored version."""

from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from warcio.archiveiterator import ArchiveIterator

from harvester.export import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED, WarcCounts, export_warc, sha1_digest
from harvester.store_results import StoredFetch, StoredPage

UA = "harvester-test/1.0 (+https://harvester.invalid/contact)"
DAY = [datetime(2024, 6, 10, 8, 0, tzinfo=UTC) + timedelta(days=d) for d in range(4)]
A = "http://127.0.0.1:1/p/a"
B = "http://127.0.0.1:1/p/b"
PDF = "http://127.0.0.1:1/doc.pdf"


def page(url: str, day: int, body: bytes, etag: str) -> StoredPage:
    return StoredPage(page_id=day * 10 + len(url), url_id=len(url), url=url, final_url=url, fetched_at=DAY[day],
                      status=200, content_type="text/html; charset=utf-8", etag=etag, last_modified=None,
                      content_hash="h", body=body)


def fetch(url: str, day: int, status: int | None, stored: StoredPage | None = None, outcome: str = "fetched",
          change: str | None = None):
    return StoredFetch(fetch_id=day * 100 + len(url), url_id=len(url), url=url, fetched_at=DAY[day], status=status,
                       outcome=outcome, bytes=0, error_class=None, run_id=None, page=stored, change=change)


def write(fetches) -> tuple[list, WarcCounts]:
    out, counts = io.BytesIO(), WarcCounts()
    export_warc(fetches, out, filename="unit.warc.gz", counts=counts)
    records = []
    for r in ArchiveIterator(io.BytesIO(out.getvalue())):
        head = r.http_headers.to_bytes() if r.http_headers else b""
        records.append((r.rec_type, dict(r.rec_headers.headers), head + r.content_stream().read()))
    return records, counts


def answers(records) -> list:
    return [r for r in records if r[0] in ("response", "revisit")]


def test_the_same_payload_again_is_an_identical_payload_digest_revisit_of_the_first_response():
    first, again, other = b"<p>one</p>", b"<p>one</p>", b"<p>two</p>"
    records, counts = write([
        fetch(A, 0, 200, page(A, 0, first, '"1"')),
        fetch(A, 1, 200, page(A, 1, again, '"1b"')),  # same bytes, stored again: no second copy in the WARC
        fetch(A, 2, 200, page(A, 2, other, '"2"')),
        fetch(B, 2, 200, page(B, 2, first, '"1"')),  # another URL with the same bytes: its own response
    ])
    got = answers(records)
    assert [(kind, h["WARC-Target-URI"]) for kind, h, _ in got] == [
        ("response", A), ("revisit", A), ("response", A), ("response", B)]
    revisit = got[1][1]
    assert revisit["WARC-Profile"] == REVISIT_IDENTICAL
    assert revisit["WARC-Refers-To"] == got[0][1]["WARC-Record-ID"]
    assert revisit["WARC-Refers-To-Target-URI"] == A
    assert revisit["WARC-Refers-To-Date"] == got[0][1]["WARC-Date"]
    assert revisit["WARC-Payload-Digest"] == sha1_digest(first) == got[0][1]["WARC-Payload-Digest"]
    assert got[1][2].startswith(b"HTTP/1.1 200 OK\r\n") and b'ETag: "1b"' in got[1][2]  # this answer's head
    assert (counts.responses, counts.revisits, counts.requests) == (3, 1, 4)


def test_a_304_refers_to_the_response_in_the_file_or_to_the_version_the_store_names():
    day0 = page(A, 0, b"<p>one</p>", '"1"')
    records, counts = write([
        fetch(A, 0, 200, day0),
        fetch(A, 1, 304, None, "not_modified"),
        fetch(B, 1, 304, page(B, 0, b"<p>b</p>", '"b"'), "not_modified"),  # its response is in an earlier export
        fetch(PDF, 1, 304, None, "not_modified"),  # nothing says what it confirmed: left out, counted
    ])
    got = answers(records)
    assert [(kind, h["WARC-Target-URI"], h.get("WARC-Profile")) for kind, h, _ in got] == [
        ("response", A, None), ("revisit", A, REVISIT_NOT_MODIFIED), ("revisit", B, REVISIT_NOT_MODIFIED)]
    in_file, elsewhere = got[1][1], got[2][1]
    assert in_file["WARC-Refers-To"] == got[0][1]["WARC-Record-ID"]
    assert in_file["WARC-Refers-To-Date"] == "2024-06-10T08:00:00Z"
    assert "WARC-Refers-To" not in elsewhere  # no record id to name outside this file
    assert elsewhere["WARC-Refers-To-Target-URI"] == B
    assert elsewhere["WARC-Refers-To-Date"] == "2024-06-10T08:00:00Z"
    assert elsewhere["WARC-Payload-Digest"] == sha1_digest(b"<p>b</p>")
    assert counts.unreferenced == 1
    requests = {h["WARC-Concurrent-To"]: body for kind, h, body in records if kind == "request"}
    assert b'If-None-Match: "1"' in requests[in_file["WARC-Record-ID"]]
    assert b'If-None-Match: "b"' in requests[elsewhere["WARC-Record-ID"]]


def test_a_304_to_a_request_without_validators_is_no_revisit():
    """Nothing to make the request conditional (the earlier answer had no ETag nor Last-Modified): the 304 says
    nothing about the payload. Control: with a validator it is a server-not-modified revisit."""
    bare = page(A, 0, b"<p>one</p>", etag="")
    records, counts = write([fetch(A, 0, 200, bare), fetch(A, 1, 304, None, "not_modified")])
    assert [kind for kind, _, _ in answers(records)] == ["response"]
    assert counts.error_status == 1
    control, _ = write([fetch(A, 0, 200, page(A, 0, b"<p>one</p>", '"1"')), fetch(A, 1, 304, None, "not_modified")])
    assert [kind for kind, _, _ in answers(control)] == ["response", "revisit"]


def test_fetches_without_stored_bytes_are_left_out_never_written_as_revisits():
    """A refused document (a PDF answered 200, body not kept), an error status, a network failure: counted and
    left out. Control: the same fetch with its bytes stored is a response."""
    records, counts = write([
        fetch(PDF, 0, 200, None, "refused"),
        fetch(B, 0, 404, None, "gone"),
        fetch(B, 0, 500, None, "failed"),
        fetch(A, 0, None, None, "failed"),
    ])
    assert answers(records) == []
    assert [kind for kind, _, _ in records] == ["warcinfo"]
    assert (counts.not_stored, counts.error_status, counts.no_exchange, counts.left_out) == (1, 2, 1, 4)
    control, _ = write([fetch(PDF, 0, 200, page(PDF, 0, b"%PDF-1.4", '"p"'))])
    assert [kind for kind, _, _ in answers(control)] == ["response"]
    assert not any(h.get("WARC-Profile", "").startswith("https://harvester") for _, h, _ in records + control)


def test_warcinfo_names_the_file_it_is_in():
    records, _ = write([])
    assert records[0][0] == "warcinfo"
    assert records[0][1]["WARC-Filename"] == "unit.warc.gz"
    assert b"discovery documents" in records[0][2]  # and says what is not recorded


def test_a_200_repeating_the_stored_payload_is_an_identical_payload_revisit_of_its_response():
    """The store keeps no second copy of a repeated payload (the fetch's change is "same", no page): the WARC still
    records the exchange, as the standard revisit of the response that holds those bytes; without one in the file
    it is left out and counted, never written as a response without a body."""
    body = b"<p>one</p>"
    records, counts = write([
        fetch(A, 0, 200, page(A, 0, body, '"1"'), change="new"),
        fetch(A, 1, 200, None, change="same"),
        fetch(B, 1, 200, None, change="same"),  # its response is in an earlier export: nothing to refer to here
    ])
    got = answers(records)
    assert [(kind, h["WARC-Target-URI"], h.get("WARC-Profile")) for kind, h, _ in got] == [
        ("response", A, None), ("revisit", A, REVISIT_IDENTICAL)]
    assert got[1][1]["WARC-Refers-To"] == got[0][1]["WARC-Record-ID"]
    assert got[1][1]["WARC-Payload-Digest"] == sha1_digest(body)
    assert (counts.responses, counts.revisits, counts.not_stored) == (1, 1, 1)


def test_a_304_after_a_payload_returned_to_refers_to_that_payload_not_the_one_between():
    """A, then B, then A again (an identical-payload revisit of the first response): a 304 after that confirms A,
    so it refers to A's response with A's digest, and its request sends the validators of the newest answer."""
    a, b = b"<p>A</p>", b"<p>B</p>"
    records, _ = write([
        fetch(A, 0, 200, page(A, 0, a, '"a"'), change="new"),
        fetch(A, 1, 200, page(A, 1, b, '"b"'), change="changed"),
        fetch(A, 2, 200, page(A, 2, a, '"a2"'), change="changed"),
        fetch(A, 3, 304, None, "not_modified"),
    ])
    got = answers(records)
    assert [(kind, h.get("WARC-Profile")) for kind, h, _ in got] == [
        ("response", None), ("response", None), ("revisit", REVISIT_IDENTICAL), ("revisit", REVISIT_NOT_MODIFIED)]
    first, last = got[0][1], got[3][1]
    assert last["WARC-Refers-To"] == first["WARC-Record-ID"]
    assert last["WARC-Payload-Digest"] == sha1_digest(a)
    requests = [r for r in records if r[0] == "request"]
    assert b'If-None-Match: "a2"' in requests[3][2]


def test_a_request_record_carries_the_validators_the_fetch_log_says_were_sent_not_the_versions():
    """The fetch log's validators (``StoredFetch.sent``) are written as they are: a new ETag the request carried, or
    none at all (an unconditional GET after a hook failure), whatever the version before held. A 304 logged as
    answering a request that carried none is no revisit. Control: a fetch logged without them (before 0011) gets
    the version's, as before."""
    body = b"<p>one</p>"
    records, counts = write([
        fetch(A, 0, 200, page(A, 0, body, '"1"'), change="new"),
        replace(fetch(A, 1, 304, None, "not_modified"), sent=('"1b"', "Mon, 10 Jun 2024 08:00:00 GMT")),
        replace(fetch(A, 2, 200, None, change="same"), sent=(None, None)),
        replace(fetch(A, 3, 304, None, "not_modified"), sent=(None, None)),
        fetch(A, 3, 304, None, "not_modified"),  # logged before 0011: rebuilt from the version
    ])
    requests = [body for kind, _, body in records if kind == "request"]
    assert len(requests) == 4 and counts.error_status == 1
    assert b'If-None-Match: "1b"\r\nIf-Modified-Since: Mon, 10 Jun 2024 08:00:00 GMT\r\n' in requests[1]
    assert b"If-None-Match" not in requests[2] and b"If-Modified-Since" not in requests[2]
    assert b'If-None-Match: "1"\r\n' in requests[3]
