"""HTTP resources of the test web: precomputed replies with validators (ETag, Last-Modified), conditional answers,
dates in HTTP and W3C forms, and streamed bodies."""

from __future__ import annotations

import email.utils
import functools
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

TOKEN = "\x00TOKEN\x00"  # noqa: S105 - a placeholder, not a secret
"""Marks a per-request slot (ad impression id, session id) inside a rendered body; always 8 bytes wide."""

REASONS = {
    200: "OK", 206: "Partial Content", 301: "Moved Permanently", 302: "Found", 303: "See Other",
    304: "Not Modified", 307: "Temporary Redirect", 308: "Permanent Redirect", 400: "Bad Request",
    401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed", 410: "Gone",
    429: "Too Many Requests", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable",
}  # fmt: skip

HTML = "text/html; charset=utf-8"


def status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n".encode()


def http_date(ts: float) -> str:
    return email.utils.formatdate(ts, usegmt=True)


def w3c_date(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ts))


@functools.lru_cache(maxsize=4096)
def parse_http_date(value: str) -> float | None:
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


Reply = tuple[int, bytes, bytes]
"""(status, head without the final CRLF and without Connection, body)."""


@dataclass(slots=True)
class Stream:
    """A reply whose body is produced while sending (drip, huge, bomb). ``head`` (no final CRLF) may be a
    coroutine function, awaited first; ``delay_s`` passes before the head; ``close`` ends the connection."""

    status: int
    head: bytes | Callable[[], Awaitable[bytes]]
    body: Callable[[], AsyncIterator[bytes]]
    close: bool = True
    delay_s: float = 0.0


class Resource:
    """A precomputed response. ``chunks`` joined with the per-request token is the body (usually one chunk)."""

    __slots__ = ("chunks", "etag", "head", "head_304", "lm_ts", "status")

    def __init__(
        self, status: int, chunks: list[bytes], head: bytes, head_304: bytes, etag: str | None, lm_ts: float | None
    ) -> None:
        self.status = status
        self.chunks = chunks
        self.head = head
        self.head_304 = head_304
        self.etag = etag
        self.lm_ts = lm_ts

    def body(self, token: bytes) -> bytes:
        chunks = self.chunks
        return chunks[0] if len(chunks) == 1 else token.join(chunks)

    def reply(self, inm: str | None, ims: str | None, token: bytes) -> Reply:
        if (inm is not None or ims is not None) and self.status == 200 and self.not_modified(inm, ims):
            return 304, self.head_304, b""
        return self.status, self.head, self.body(token)

    def not_modified(self, inm: str | None, ims: str | None) -> bool:
        # RFC 9110 §13.2.2: If-None-Match is evaluated first; If-Modified-Since only when it is absent.
        if inm is not None:
            return self.etag is not None and etag_matches(inm, self.etag)
        if ims is not None and self.lm_ts is not None:
            t = parse_http_date(ims)
            return t is not None and int(self.lm_ts) <= t
        return False


def etag_matches(header: str, etag: str) -> bool:
    """RFC 9110 §8.8.3.2 weak comparison, as If-None-Match requires."""
    if header == etag or header.strip() == "*":
        return True
    mine = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == mine for tag in header.split(","))


def make_resource(
    status: int,
    content_type: str | None,
    body: str | bytes,
    *,
    etag: str | None = None,
    weak: bool = False,
    lm_ts: float | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    validators: bool = True,
) -> Resource:
    """Build a Resource; ``body`` as str may contain TOKEN slots. The ETag defaults to a hash of the static
    bytes (weak when the body has per-request slots or non-semantic parts)."""
    chunks = [c.encode() for c in body.split(TOKEN)] if isinstance(body, str) else [body]
    length = sum(map(len, chunks)) + 8 * (len(chunks) - 1)
    if validators and etag is None:
        digest = hashlib.md5(b"".join(chunks)).hexdigest()[:20]
        etag = f'W/"{digest}"' if weak or len(chunks) > 1 else f'"{digest}"'
    if not validators:
        etag = None
        lm_ts = None
    common = []
    if etag is not None:
        common.append(f"ETag: {etag}\r\n")
    if lm_ts is not None:
        common.append(f"Last-Modified: {http_date(lm_ts)}\r\n")
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers)
    ctype = f"Content-Type: {content_type}\r\n" if content_type else ""
    head = status_line(status) + f"{ctype}Content-Length: {length}\r\n{''.join(common)}{extra}".encode()
    head_304 = status_line(304) + "".join(common).encode()
    return Resource(status, chunks, head, head_304, etag, lm_ts)
