"""What one fetch ends with: its last answer read within the caps and made a ``FetchResult``, or a failure that
still reports what the fetch knew (status, hops, headers, bytes read).

The body is streamed raw and decoded boundedly here (``answers`` decides what headers and encodings mean, without
I/O); ``http.Fetcher`` sends the requests, follows the redirects and translates the exceptions. Never sends a
request.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harvester.fetch.answers import (
    content_length,
    content_type_accepted,
    decoders_for,
    error_class_for_status,
    looks_binary,
    parse_retry_after,
)
from harvester.records import ErrorClass, FetchResult, Validators

if TYPE_CHECKING:
    import httpx

ERROR_BODY_BYTES = 64 * 1024
"""Bodies of redirects and error statuses are read this far (to keep the connection alive) and no further."""


class Refused(Exception):
    """Ends a fetch early with an outcome (never escapes ``fetch.http``, which makes it a result)."""

    def __init__(self, error_class: ErrorClass, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.target = target
        """The redirect target refused (never requested), when a hop was: what the refusal judged."""


class TooLarge(Exception):
    """The streamed or decoded body passed the cap (``fetch.http`` makes it a TOO_LARGE result)."""


class FetchState:
    """What a fetch knows so far, so a failure mid-way still reports status, hops and headers."""

    __slots__ = ("answered", "current", "headers", "hop_statuses", "hops", "raw_bytes", "sent", "started",
                 "started_wall", "status", "url")

    def __init__(self, url: str) -> None:
        self.url = url
        self.current = url
        self.hops: list[str] = []
        self.hop_statuses: list[int] = []
        self.raw_bytes = 0
        self.status: int | None = None
        self.answered = False
        """Whether the request now in flight (this hop) got its status line."""
        self.headers: dict[str, str] | None = None
        self.sent: Validators | None = None
        """The validators of the last request that may have left (this hop's once it may have, else the hop's
        before); None while none has: a request refused before it left carried none (``http._fetch``)."""
        self.started_wall = time.time()
        self.started = time.monotonic()

    def failure(self, error_class: ErrorClass, error: str, *, refused_target: str | None = None) -> FetchResult:
        headers = self.headers
        return FetchResult(
            url=self.url,
            final_url=self.current,
            status=self.status,
            started_at=self.started_wall,
            elapsed_s=time.monotonic() - self.started,
            error_class=error_class,
            error=error,
            content_type=headers.get("content-type") if headers is not None else None,
            etag=headers.get("etag") if headers is not None else None,
            last_modified=headers.get("last-modified") if headers is not None else None,
            bytes_read=self.raw_bytes,
            redirects=tuple(self.hops),
            redirect_statuses=tuple(self.hop_statuses),
            retry_after_s=parse_retry_after(headers.get("retry-after")) if headers is not None else None,
            headers=headers if headers is not None else {},
            sent_validators=self.sent,
            refused_target=refused_target,
        )

    def unfollowed(self, target: str, drained_bytes: int) -> FetchResult:
        """The answer of a permanent redirect to ``target`` left unfollowed (``FetchResult.unfollowed``): the
        redirect's own status, headers and validators, ``target`` as the last hop, never requested."""
        headers = self.headers or {}
        return FetchResult(
            url=self.url,
            final_url=target,
            status=self.status,
            started_at=self.started_wall,
            elapsed_s=time.monotonic() - self.started,
            content_type=headers.get("content-type"),
            etag=headers.get("etag"),
            last_modified=headers.get("last-modified"),
            bytes_read=self.raw_bytes + drained_bytes,
            redirects=(*self.hops, target),
            redirect_statuses=(*self.hop_statuses, *(() if self.status is None else (self.status,))),
            headers=headers,
            sent_validators=self.sent,
            unfollowed=True,
        )


async def read_answer(
    state: FetchState,
    response: httpx.Response,
    headers: dict[str, str],
    accept: Sequence[str] | None,
    cap: int,
    truncate: bool,
) -> FetchResult:
    """The result of the fetch's last answer (no redirect followed): a 2xx body read within ``cap`` if its type
    is accepted, an error status's body drained, a 304 or anything else as its status says."""
    status = response.status_code
    content_type = headers.get("content-type")
    error_class = error_class_for_status(status)
    error: str | None = None
    body: bytes | None = None
    raw = 0
    if 200 <= status < 300:
        if not content_type_accepted(content_type, accept):
            error_class, error = ErrorClass.BAD_CONTENT_TYPE, f"content-type {content_type!r} not accepted"
        else:
            length = content_length(headers)
            if length is not None and length > cap and not truncate:
                error_class, error = ErrorClass.TOO_LARGE, f"Content-Length {length} over {cap}"
            else:
                read = await _read_body(response, headers, cap, truncate=truncate, state=state)
                body, raw = read.data, read.raw_bytes
                if content_type is None and accept is not None and looks_binary(body):
                    # Untyped and not text (an image, an archive): what a typed one would have been refused as.
                    error_class, error = ErrorClass.BAD_CONTENT_TYPE, "no content-type, and the body is binary"
                    body = None
    elif status != 304 and status >= 400:
        error = f"HTTP {status}"
        read_err = await drain(response, headers)
        body, raw = read_err.data, read_err.raw_bytes
    retry_after = parse_retry_after(headers.get("retry-after")) if "retry-after" in headers else None
    return FetchResult(
        url=state.url,
        final_url=state.current,
        status=status,
        started_at=state.started_wall,
        elapsed_s=time.monotonic() - state.started,
        error_class=error_class,
        error=error,
        content_type=content_type,
        etag=headers.get("etag"),
        last_modified=headers.get("last-modified"),
        body=body,
        bytes_read=raw,
        redirects=tuple(state.hops),
        redirect_statuses=tuple(state.hop_statuses),
        retry_after_s=retry_after,
        headers=headers,
        sent_validators=state.sent,
    )


@dataclass(slots=True)
class Body:
    data: bytes
    raw_bytes: int


async def _read_body(
    response: httpx.Response, headers: dict[str, str], max_bytes: int, *, truncate: bool, state: FetchState
) -> Body:
    """Stream raw bytes, decoding boundedly; over ``max_bytes`` (raw or decoded) raises TooLarge or truncates."""
    encoding = headers.get("content-encoding")
    decoders = decoders_for(encoding)
    if decoders is None:
        raise Refused(ErrorClass.BAD_CONTENT, f"unsupported content-encoding {encoding!r}")
    parts: list[bytes] = []
    raw = 0
    size = 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        state.raw_bytes = raw
        # A compressed body larger than the cap can only decode larger still (and identity is 1:1).
        if raw > max_bytes and not (truncate and not decoders):
            if truncate:
                break
            raise TooLarge(f"body over {max_bytes} bytes on the wire")
        data = chunk
        for decoder in decoders:
            data = decoder.feed(data, max_bytes - size)
        if size + len(data) > max_bytes:
            if truncate:
                parts.append(data[: max_bytes - size])
                size = max_bytes
                break
            raise TooLarge(f"body over {max_bytes} bytes after decoding")
        if data:
            parts.append(data)
            size += len(data)
    else:
        for decoder in decoders:
            tail = decoder.flush(max_bytes - size)
            if tail:
                if size + len(tail) > max_bytes and not truncate:
                    raise TooLarge(f"body over {max_bytes} bytes after decoding")
                parts.append(tail[: max_bytes - size])
                size += len(parts[-1])
        if not all(decoder.complete for decoder in decoders):
            # The body ended inside a compressed stream (a gzip member without its trailer, deflate short of its
            # last block): a message cut short (RFC 9112 §6.3), failed and retried like a short Content-Length,
            # never stored as the page. (Cut on purpose by ``truncate``, the loop broke off and this is not asked.)
            raise Refused(ErrorClass.PROTOCOL, f"{encoding} body ended before its compressed stream did")
    return Body(b"".join(parts), raw)


async def drain(response: httpx.Response, headers: dict[str, str]) -> Body:
    """Read a redirect/error body up to ERROR_BODY_BYTES so the connection can be reused; beyond that, drop it."""
    length = content_length(headers)
    if length is not None and length > ERROR_BODY_BYTES:
        return Body(b"", 0)
    parts: list[bytes] = []
    raw = 0
    async for chunk in response.aiter_raw():
        raw += len(chunk)
        if raw > ERROR_BODY_BYTES:
            return Body(b"", raw)
        parts.append(chunk)
    return Body(b"".join(parts), raw)
