"""The harvest out of the frontier: JSONL (one record per stored page) and WARC 1.1 (one record per fetch).

Both writers stream: they take iterators (``FrontierStore.iter_pages`` / ``iter_fetches``) and hold one
record at a time, plus a bounded cache for WARC revisit references. Never fetches and never speaks SQL.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from base64 import b32encode
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import IO, Any, cast
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from harvester._version import __version__
from harvester.records import StoredFetch, StoredPage
from harvester.runtime import aware

logger = logging.getLogger(__name__)

JSONL_FIELDS = (
    "url", "final_url", "status", "fetched_at", "content_type", "etag", "last_modified", "content_hash",
    "canonical", "title", "description", "language", "jsonld", "fields", "robots", "state",
)
"""The keys of every JSONL line, in this order."""

REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
"""WARC 1.1 §6.7.2: the server answered 304 to a conditional request; the payload is the earlier response's."""

REVISIT_SAME_CONTENT = "https://harvester.invalid/warc/revisit/same-main-content"
"""A 200 whose main content hashed the same as before, so its body was not kept. WARC 1.1 §6.7 lets writers
name other profiles; readers that do not know one treat the record as a reference to the earlier response."""

DEFAULT_REFER_CACHE = 100_000
"""URLs whose latest response (id, date, validators) is remembered for revisit references while exporting."""


def export_jsonl(pages: Iterable[StoredPage], out: IO[bytes] | IO[str]) -> int:
    """Write one JSON line per stored page; returns the number written. ``out`` may be binary or text."""
    text = isinstance(out, io.TextIOBase)
    count = 0
    for page in pages:
        line = json.dumps(page_record(page), ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
        if text:
            cast("IO[str]", out).write(line)
        else:
            cast("IO[bytes]", out).write(line.encode("utf-8"))
        count += 1
    return count


def page_record(page: StoredPage) -> dict[str, Any]:
    """The JSONL object of one page (``JSONL_FIELDS``), times as ISO 8601 UTC."""
    return {
        "url": page.url,
        "final_url": page.final_url,
        "status": page.status,
        "fetched_at": _iso(page.fetched_at),
        "content_type": page.content_type,
        "etag": page.etag,
        "last_modified": page.last_modified,
        "content_hash": page.content_hash,
        "canonical": page.canonical_url,
        "title": page.title,
        "description": page.description,
        "language": page.language,
        "jsonld": page.jsonld,
        "fields": page.fields,
        # What the page's robots directives asked of us (["noindex"] ...): filter on it to honour noindex
        # downstream. null for a page stored before they were recorded.
        "robots": None if page.robots is None else list(page.robots),
        "state": page.url_state,  # the URL's state now: "gone" marks a page the site has since removed
    }


@dataclass(frozen=True, slots=True)
class _Earlier:
    """The latest response written for one URL: what a revisit refers to and the validators sent next time."""

    record_id: str
    date: str
    payload_digest: str | None
    etag: str | None
    last_modified: str | None


@dataclass(slots=True)
class WarcCounts:
    """What ``export_warc`` wrote, by kind; fetches with no HTTP exchange (no request sent) are ``skipped``."""

    responses: int = 0
    revisits: int = 0
    requests: int = 0
    skipped: int = 0


def export_warc(
    fetches: Iterable[StoredFetch],
    out: IO[bytes],
    *,
    user_agent: str,
    refer_cache: int = DEFAULT_REFER_CACHE,
    counts: WarcCounts | None = None,
) -> int:
    """Write a gzipped WARC 1.1 file; returns the number of fetches archived (one response or revisit each).

    Per fetch with an HTTP status: a response record (2xx with a stored body: status line, the headers we
    keep, the body; other statuses: status line only, the body was not kept) or a revisit record (304:
    ``server-not-modified``; a 200 whose body was not kept because its content was unchanged or a duplicate:
    ``REVISIT_SAME_CONTENT``), then a request record (GET, User-Agent, the conditional headers the crawler
    sends, reconstructed from the URL's earlier response when it is in this export) linked to it with
    WARC-Concurrent-To. Fetches without a status (network failure, no request sent) are skipped and counted.
    """
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    writer.write_record(writer.create_warcinfo_record("harvester.warc.gz", {
        "software": f"harvester/{__version__} (warcio)",
        "format": "WARC File Format 1.1",
        "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
        "http-header-user-agent": user_agent,
    }))
    counts = counts if counts is not None else WarcCounts()
    earlier: OrderedDict[str, _Earlier] = OrderedDict()
    archived = 0
    for fetch in fetches:
        if fetch.status is None:
            counts.skipped += 1
            continue
        before = earlier.get(fetch.url)
        date = _warc_date(fetch.fetched_at)
        page = fetch.page
        if fetch.status == 304 or (200 <= fetch.status < 300 and page is None):
            record = _revisit(writer, fetch, date, before)
            counts.revisits += 1
        else:
            record = _response(writer, fetch, date)
            counts.responses += 1
            record_id = record.rec_headers.get_header("WARC-Record-ID")
            if page is not None:
                _remember(earlier, fetch.url, _Earlier(
                    record_id=record_id, date=date,
                    payload_digest=record.rec_headers.get_header("WARC-Payload-Digest"),
                    etag=page.etag, last_modified=page.last_modified,
                ), refer_cache)
        writer.write_record(record)
        request = _request(writer, fetch, date, user_agent, record.rec_headers.get_header("WARC-Record-ID"),
                           before if before is not None else _earlier_from_fetch(fetch))
        writer.write_record(request)
        counts.requests += 1
        archived += 1
    logger.info("WARC export: %d responses, %d revisits, %d requests, %d fetches without HTTP exchange skipped",
                counts.responses, counts.revisits, counts.requests, counts.skipped)
    return archived


def _response(writer: WARCWriter, fetch: StoredFetch, date: str) -> Any:
    page = fetch.page
    body = page.body if page is not None else b""
    headers = [("Content-Length", str(len(body)))]
    if page is not None:
        for name, value in (("Content-Type", page.content_type), ("ETag", page.etag),
                            ("Last-Modified", page.last_modified)):
            if value:
                headers.append((name, value))
    http_headers = StatusAndHeaders(_status_line(fetch.status or 0), headers, protocol="HTTP/1.1")
    target = page.final_url if page is not None and page.final_url else fetch.url
    warc_headers = {"WARC-Date": date}
    if target != fetch.url:
        # The body came from the end of a redirect chain; the archived exchange is the final one.
        warc_headers["WARC-Refers-To-Target-URI"] = fetch.url
    return writer.create_warc_record(target, "response", payload=io.BytesIO(body), length=len(body),
                                     http_headers=http_headers, warc_headers_dict=warc_headers)


def _revisit(writer: WARCWriter, fetch: StoredFetch, date: str, before: _Earlier | None) -> Any:
    not_modified = fetch.status == 304
    headers: list[tuple[str, str]] = []
    if before is not None and not_modified:
        headers += [(n, v) for n, v in (("ETag", before.etag), ("Last-Modified", before.last_modified)) if v]
    http_headers = StatusAndHeaders(_status_line(fetch.status or 304), headers, protocol="HTTP/1.1")
    warc_headers = {
        "WARC-Date": date,
        "WARC-Profile": REVISIT_NOT_MODIFIED if not_modified else REVISIT_SAME_CONTENT,
        "WARC-Refers-To-Target-URI": fetch.url,
    }
    refers_date = before.date if before is not None else _opt_date(getattr(fetch, "refers_to_date", None))
    if refers_date:
        warc_headers["WARC-Refers-To-Date"] = refers_date
    if before is not None:
        warc_headers["WARC-Refers-To"] = before.record_id
        if not not_modified and before.payload_digest:
            warc_headers["WARC-Payload-Digest"] = before.payload_digest
    return writer.create_warc_record(fetch.url, "revisit", http_headers=http_headers, warc_headers_dict=warc_headers)


def _request(
    writer: WARCWriter, fetch: StoredFetch, date: str, user_agent: str, concurrent_to: str, before: _Earlier | None
) -> Any:
    parts = urlsplit(fetch.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = [("Host", parts.netloc), ("User-Agent", user_agent), ("Accept-Encoding", "gzip, deflate")]
    if before is not None:
        if before.etag:
            headers.append(("If-None-Match", before.etag))
        if before.last_modified:
            headers.append(("If-Modified-Since", before.last_modified))
    http_headers = StatusAndHeaders(f"GET {target} HTTP/1.1", headers, protocol="", is_http_request=True)
    return writer.create_warc_record(fetch.url, "request", http_headers=http_headers,
                                     warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": concurrent_to})


def _earlier_from_fetch(fetch: StoredFetch) -> _Earlier | None:
    """Validators the store says were sent (when it records them), for fetches whose earlier response is not here."""
    etag = getattr(fetch, "sent_etag", None)
    last_modified = getattr(fetch, "sent_last_modified", None)
    if not etag and not last_modified:
        return None
    return _Earlier(record_id="", date="", payload_digest=None, etag=etag, last_modified=last_modified)


def _remember(cache: OrderedDict[str, _Earlier], url: str, item: _Earlier, limit: int) -> None:
    cache[url] = item
    cache.move_to_end(url)
    while len(cache) > max(limit, 0):
        cache.popitem(last=False)


def _status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{status} {phrase}"



def _iso(moment: datetime | None) -> str | None:
    return aware(moment).isoformat().replace("+00:00", "Z") if moment is not None else None


def _warc_date(moment: datetime) -> str:
    """WARC 1.1 §5.4: W3C-ISO8601 UTC, with fractions of a second when there are any."""
    utc = aware(moment).replace(tzinfo=None)
    return str(datetime_to_iso_date(utc, use_micros=utc.microsecond != 0))


def _opt_date(moment: object) -> str | None:
    return _warc_date(moment) if isinstance(moment, datetime) else None


def sha1_digest(body: bytes) -> str:
    """The digest form warcio writes (``sha1:`` + base32), for tests and consumers that compare payloads."""
    return "sha1:" + b32encode(hashlib.sha1(body, usedforsecurity=False).digest()).decode("ascii")


__all__ = ["JSONL_FIELDS", "WarcCounts", "export_jsonl", "export_warc", "page_record", "sha1_digest"]
