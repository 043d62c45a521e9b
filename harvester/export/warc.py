"""The harvest as a WARC 1.1 file that replays: one response per stored payload, standard revisits, paired requests.

Only exchanges whose bytes are stored are written; a fetch whose body was not kept, or whose answer carried no
body worth keeping (an error status), is counted and left out, never written as a fake record. Streams: holds one
record at a time plus a bounded cache of the responses already written. Never fetches and never speaks SQL.
"""

from __future__ import annotations

import hashlib
import io
import logging
from base64 import b32encode
from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from http import HTTPStatus
from typing import IO, Any
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from harvester._version import __version__
from harvester.records import ACCEPT, ACCEPT_ENCODING
from harvester.runtime import aware
from harvester.store_results import StoredFetch, StoredPage

logger = logging.getLogger(__name__)

REVISIT_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
"""WARC 1.1 §6.7.2: the server answered 304 to a conditional request; the payload is the earlier response's."""

REVISIT_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
"""WARC 1.1 §6.7.1: a 2xx whose payload digest equals an earlier response record's; that record holds the bytes."""

DEFAULT_REFER_CACHE = 100_000
"""Responses (per URL and per payload digest) remembered for revisit references while exporting."""


@dataclass(frozen=True, slots=True)
class _Written:
    """A response record already in this file: what a revisit refers to and the validators sent next time."""

    record_id: str
    target: str
    date: str
    payload_digest: str
    etag: str | None
    last_modified: str | None


@dataclass(slots=True)
class WarcCounts:
    """What ``export_warc`` wrote, by kind, and the fetches it left out, by reason.

    ``no_exchange``: a request sent that got no HTTP answer (timeout, refused connection, broken HTTP).
    ``unsent``: a URL completed without a request (a page skipped on its sitemap's trusted lastmod, robots.txt
    refusing it, its host parked, the address policy): nothing was exchanged, nothing failed.
    ``not_stored``: a 2xx whose body the store did not keep (nothing truthful to write). ``error_status``: a
    3xx/4xx/5xx (the store keeps its status, not its bytes), or a 304 to a request that had no validator to send.
    ``unreferenced``: a 304 whose earlier response is neither in this file nor named by the store.
    """

    responses: int = 0
    revisits: int = 0
    requests: int = 0
    no_exchange: int = 0
    unsent: int = 0
    not_stored: int = 0
    error_status: int = 0
    unreferenced: int = 0

    @property
    def left_out(self) -> int:
        return self.no_exchange + self.unsent + self.not_stored + self.error_status + self.unreferenced

    def left_out_parts(self) -> list[tuple[int, str]]:
        """(count, what) of each class of fetches left out that has any: one wording for the CLI and the log."""
        return [(n, what) for n, what in (
            (self.no_exchange, "failed without an HTTP answer"), (self.unsent, "never sent (no request)"),
            (self.not_stored, "whose body was not stored"),
            (self.error_status, "answered with an error status or redirect"),
            (self.unreferenced, "304s whose earlier response is not in this export"),
        ) if n]


def export_warc(
    fetches: Iterable[StoredFetch],
    out: IO[bytes],
    *,
    filename: str,
    user_agents: Collection[str | None] = (),
    refer_cache: int = DEFAULT_REFER_CACHE,
    counts: WarcCounts | None = None,
) -> int:
    """Write a gzipped WARC 1.1 file named ``filename`` (warcinfo says so); returns the fetches archived.

    Per fetch, in fetch order: a 2xx with a stored body is a ``response`` (the status line, the headers the store
    keeps, the body as stored: decoded), or an ``identical-payload-digest`` revisit when an earlier response of the
    same URL in this file has the same payload digest; a 304 is a ``server-not-modified`` revisit of the URL's
    earlier response (in this file, or the version the store names). Each is followed by its ``request`` record
    (WARC-Concurrent-To), with the User-Agent the fetch's run sent (``StoredFetch.user_agent``; none where it was
    not recorded). Everything else is left out and counted in ``counts`` (see ``WarcCounts``). ``user_agents``: the
    User-Agents of the requests to be written (``FrontierStore.request_user_agents``), None for those not recorded:
    the warcinfo names each, and says when some are unknown. Never this process's setting: the export may run
    anywhere, long after the requests went out.
    """
    writer = WARCWriter(out, gzip=True, warc_version="1.1")
    writer.write_record(_warcinfo(writer, filename, user_agents))
    counts = counts if counts is not None else WarcCounts()
    latest: OrderedDict[str, _Written] = OrderedDict()  # url -> its newest response here
    by_digest: OrderedDict[tuple[str, str], _Written] = OrderedDict()  # (url, payload digest) -> first response
    archived = 0
    for fetch in fetches:
        record = _answer(writer, fetch, latest, by_digest, counts, refer_cache)
        if record is None:
            continue
        before = latest.get(fetch.url)
        writer.write_record(record)
        if record.rec_type == "response":
            _remember(fetch, record, latest, by_digest, refer_cache)
        writer.write_record(_request(writer, record, before, fetch))
        counts.requests += 1
        archived += 1
    left_out = ", ".join(f"{n} {what}" for n, what in counts.left_out_parts())
    logger.info("WARC export %s: %d responses, %d revisits, %d requests; left out %d fetches%s", filename,
                counts.responses, counts.revisits, counts.requests, counts.left_out,
                f" ({left_out})" if left_out else "")
    return archived


def _warcinfo(writer: WARCWriter, filename: str, user_agents: Collection[str | None]) -> Any:
    """The file's warcinfo (application/warc-fields): one ``http-header-user-agent`` per User-Agent its requests
    carried (a field may repeat; a file spanning a change of setting names both), and, when some requests' was not
    recorded (runs before migration 0013), a ``description`` saying so rather than a guess."""
    fields = [("software", f"harvester/{__version__} (warcio)"), ("format", "WARC File Format 1.1"),
              ("conformsTo", "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/")]
    fields += [("http-header-user-agent", agent) for agent in sorted(a for a in user_agents if a)]
    description = ("HTML pages the harvester stored, as fetched (bodies decoded); discovery documents (robots.txt, "
                   "sitemaps, feeds) and fetches whose bytes were not kept are not recorded.")
    if None in user_agents:
        description += (" Some requests were logged before the harvester recorded the User-Agent it sent (migration "
                        "0013): it is not known, and their request records carry no User-Agent header.")
    fields.append(("description", description))
    block = "".join(f"{name}: {value}\r\n" for name, value in fields).encode("utf-8")
    return writer.create_warc_record("", "warcinfo", payload=io.BytesIO(block), length=len(block),
                                     warc_content_type="application/warc-fields",
                                     warc_headers_dict={"WARC-Filename": filename})


def _answer(
    writer: WARCWriter, fetch: StoredFetch, latest: OrderedDict[str, _Written],
    by_digest: OrderedDict[tuple[str, str], _Written], counts: WarcCounts, refer_cache: int,
) -> Any:
    """The response or revisit record of one fetch, or None (counted) when it has no truthful record."""
    status, page = fetch.status, fetch.page
    if status is None:
        if fetch.outcome == "unsent":
            counts.unsent += 1
        else:
            counts.no_exchange += 1
        return None
    date = _warc_date(fetch.fetched_at)
    if status == 304:
        earlier = latest.get(fetch.url) or (_stored(page) if page is not None else None)
        if earlier is None:
            counts.unreferenced += 1
            return None
        asked = any(fetch.sent) if fetch.sent is not None else bool(earlier.etag or earlier.last_modified)
        if fetch.outcome == "failed" or not asked:
            # RFC 9110 §15.4.5: a 304 answers a conditional request. With no validator to have sent, it says
            # nothing about the payload: a failed fetch, not a revisit.
            counts.error_status += 1
            return None
        counts.revisits += 1
        return _revisit(writer, fetch.url, date, earlier, REVISIT_NOT_MODIFIED, page)
    if not 200 <= status < 300:
        counts.error_status += 1
        return None
    if page is None:
        # A 200 repeating the stored payload byte for byte stores nothing new (``change`` "same"): it is the
        # standard identical-payload revisit of that version's response in this file, else left out and counted.
        earlier = latest.get(fetch.url) if fetch.change == "same" else None
        if earlier is None:
            counts.not_stored += 1
            return None
        counts.revisits += 1
        return _revisit(writer, earlier.target, date, earlier, REVISIT_IDENTICAL, None, status=status)
    # WARC 1.1 §6.7: a record's block is this answer's head. A 200 repeating a version (``change`` same) may carry
    # a new ETag or Last-Modified: the fetch log's, not the version's first answer's.
    page = _as_answered(page, fetch)
    target = page.final_url or fetch.url
    digest = sha1_digest(page.body)
    same = by_digest.get((target, digest))
    if same is not None:
        by_digest.move_to_end((target, digest))
        # The URL's newest version is now these bytes again: a later 304 confirms them, with this answer's
        # validators (a payload A, then B, then A again: the 304 after it is A's, not B's).
        latest[fetch.url] = replace(same, etag=page.etag, last_modified=page.last_modified)
        latest.move_to_end(fetch.url)
        counts.revisits += 1
        return _revisit(writer, target, date, same, REVISIT_IDENTICAL, page, status=status)
    counts.responses += 1
    body = page.body
    return writer.create_warc_record(
        target, "response", payload=io.BytesIO(body), length=len(body),
        http_headers=StatusAndHeaders(_status_line(status), _page_headers(page, len(body)), protocol="HTTP/1.1"),
        warc_headers_dict={"WARC-Date": date},
    )


def _as_answered(page: StoredPage, fetch: StoredFetch) -> StoredPage:
    """``page`` with the validators ``fetch``'s answer carried (``StoredFetch.served``), where the log has them."""
    if fetch.served is None or fetch.served == (page.etag, page.last_modified):
        return page
    return replace(page, etag=fetch.served[0], last_modified=fetch.served[1])


def _revisit(
    writer: WARCWriter, target: str, date: str, earlier: _Written, profile: str, page: StoredPage | None,
    *, status: int = 304,
) -> Any:
    """WARC 1.1 §6.7: no payload; where it is (the earlier response: URI, date, record id, payload digest).

    An identical payload keeps this answer's HTTP head (status and the headers the store keeps). A 304's block is
    empty, as §6.7 allows: replay tools then serve the earlier response's head and payload for this date (pywb
    replays a 304 head as a bodiless 304); the 304 is named by the profile, and the request record says what
    made it conditional."""
    http_headers = None
    if status != 304 and page is not None:
        http_headers = StatusAndHeaders(_status_line(status), _page_headers(page, len(page.body)),
                                        protocol="HTTP/1.1")
    warc_headers = {
        "WARC-Date": date,
        "WARC-Profile": profile,
        "WARC-Refers-To-Target-URI": earlier.target,
        "WARC-Refers-To-Date": earlier.date,
        "WARC-Payload-Digest": earlier.payload_digest,
    }
    if earlier.record_id:
        warc_headers["WARC-Refers-To"] = earlier.record_id
    return writer.create_warc_record(target, "revisit", http_headers=http_headers, warc_headers_dict=warc_headers)


def _request(writer: WARCWriter, answer: Any, before: _Written | None, fetch: StoredFetch) -> Any:
    """The GET that got ``answer``: the User-Agent its run sent (none when not recorded: before migration 0013)
    and the validators the request carried, as the fetch log recorded them when it went out; for a fetch logged
    before they were (migration 0011), the validators of the URL's version before, which were the ones sent unless
    the request went without them or with newer ones."""
    target = answer.rec_headers.get_header("WARC-Target-URI")
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = [("Host", parts.netloc), *((("User-Agent", fetch.user_agent),) if fetch.user_agent else ()),
               ("Accept-Encoding", ACCEPT_ENCODING), ("Accept", ACCEPT)]
    sent = fetch.sent if fetch.sent is not None else _rebuilt(before, fetch)
    headers += [(n, v) for n, v in zip(("If-None-Match", "If-Modified-Since"), sent, strict=True) if v]
    return writer.create_warc_record(
        target, "request",
        http_headers=StatusAndHeaders(f"GET {path} HTTP/1.1", headers, protocol="", is_http_request=True),
        warc_headers_dict={"WARC-Date": answer.rec_headers.get_header("WARC-Date"),
                           "WARC-Concurrent-To": answer.rec_headers.get_header("WARC-Record-ID")},
    )


def _rebuilt(before: _Written | None, fetch: StoredFetch) -> tuple[str | None, str | None]:
    """The validators of a request logged without them (before 0011): those of the URL's version before."""
    if before is None and fetch.page is not None and (fetch.status == 304 or fetch.change == "same"):
        before = _stored(fetch.page)  # the version it was conditional on is the one the store names
    elif before is None and fetch.prior is not None:
        # A new version in a --since window: the version before it, outside the file, made the request conditional.
        return fetch.prior
    return (before.etag, before.last_modified) if before is not None else (None, None)


def _remember(
    fetch: StoredFetch, record: Any, latest: OrderedDict[str, _Written],
    by_digest: OrderedDict[tuple[str, str], _Written], limit: int,
) -> None:
    assert fetch.page is not None
    page = _as_answered(fetch.page, fetch)
    headers = record.rec_headers
    written = _Written(
        record_id=headers.get_header("WARC-Record-ID"), target=headers.get_header("WARC-Target-URI"),
        date=headers.get_header("WARC-Date"), payload_digest=headers.get_header("WARC-Payload-Digest"),
        etag=page.etag, last_modified=page.last_modified,
    )
    for cache, key in ((latest, fetch.url), (by_digest, (written.target, written.payload_digest))):
        cache[key] = written  # type: ignore[index]
        cache.move_to_end(key)  # type: ignore[arg-type]
        while len(cache) > max(limit, 1):
            cache.popitem(last=False)


def _stored(page: StoredPage) -> _Written:
    """A response outside this file, as the store names it: found by its URL, date and payload digest."""
    return _Written(record_id="", target=page.final_url or page.url, date=_warc_date(page.fetched_at),
                    payload_digest=sha1_digest(page.body), etag=page.etag, last_modified=page.last_modified)


def _page_headers(page: StoredPage, length: int) -> list[tuple[str, str]]:
    """The headers the store keeps; the body is stored decoded, so no Content-Encoding and its own length."""
    headers = [(n, v) for n, v in (("Content-Type", page.content_type), ("ETag", page.etag),
                                   ("Last-Modified", page.last_modified)) if v]
    return [*headers, ("Content-Length", str(length))]


def _status_line(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{status} {phrase}"


def _warc_date(moment: datetime) -> str:
    """WARC 1.1 §5.4: W3C-ISO8601 UTC, with fractions of a second when there are any."""
    utc = aware(moment).replace(tzinfo=None)
    return str(datetime_to_iso_date(utc, use_micros=utc.microsecond != 0))


def sha1_digest(body: bytes) -> str:
    """The digest form warcio writes (``sha1:`` + base32), for tests and consumers that compare payloads."""
    return "sha1:" + b32encode(hashlib.sha1(body, usedforsecurity=False).digest()).decode("ascii")


__all__ = ["REVISIT_IDENTICAL", "REVISIT_NOT_MODIFIED", "WarcCounts", "export_warc", "sha1_digest"]
