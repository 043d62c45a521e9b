"""What an answer's headers and body mean, decided without I/O: bounded decoding of content encodings, Retry-After,
media types and the accepted list, the error class of a status, the header map a result carries."""

from __future__ import annotations

import email.utils
import time
import zlib
from collections.abc import Sequence
from typing import Any

import httpx

from harvester.records import ErrorClass


def content_length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length")
    if value is None:
        return None
    try:
        return int(value.split(",")[0].strip())
    except ValueError:
        return None



_JOIN = {"x-robots-tag": "\n"}



def headers_of(response: httpx.Response) -> dict[str, str]:
    """Response headers as one plain dict with lower-case names (httpx.Headers lookups are linear scans that
    decode on every call; repeated fields are joined as RFC 9110 §5.3 allows)."""
    out: dict[str, str] = {}
    for raw_key, raw_value in response.headers.raw:
        key = raw_key.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        # X-Robots-Tag lines stay apart: a "crawler:" prefix applies to the rest of its own line only.
        out[key] = f"{out[key]}{_JOIN.get(key, ', ')}{value}" if key in out else value
    return out



# --- bounded decoding ---------------------------------------------------------------------------------------


_GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip member (RFC 1952 §2.3.1)."""


class _Decoder:
    """Content-Encoding decoder whose output per call is bounded, so a bomb stops at the cap.

    zlib's ``max_length`` bounds each call; the unconsumed input is kept and drained on the next call, so
    the decoded size is checked without ever materialising more than ``limit + 1`` bytes. ``complete`` says, once
    the body has ended, whether the encoded stream ended where its format says it does.
    """

    __slots__ = ("_done", "_gzip", "_members", "_obj", "_pending")

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        # Made on the first bytes: a gzip member once its magic is seen; "deflate" once its first two bytes tell
        # zlib-wrapped (RFC 9110 §8.4.1.2) from the raw deflate some servers send.
        self._obj: Any = None
        self._pending = b""
        self._members = 0
        """Complete gzip members (or deflate streams) decoded."""
        self._done = False
        """The encoded stream has ended: whatever follows is not part of it and is ignored (still counted, and
        capped, as bytes on the wire)."""

    def feed(self, data: bytes, limit: int) -> bytes:
        """Decode ``data``; returns at most ``limit + 1`` bytes (one more than allowed means: too large)."""
        if self._done:
            return b""
        if self._obj is None:
            data = self._start(self._pending + data)
            if self._obj is None:
                return b""
        out: list[bytes] = []
        size = 0
        while data and size <= limit:
            chunk = self._obj.decompress(data, limit + 1 - size)
            out.append(chunk)
            size += len(chunk)
            data = self._obj.unconsumed_tail
            if self._obj.eof:
                self._members += 1
                rest = self._obj.unused_data + data
                self._obj = None
                if not self._gzip:
                    self._done = True  # a zlib or deflate stream ends once: what follows is ignored, as before
                    break
                # RFC 1952 §2.2: a gzip body may hold several members, decoded one after another.
                data = self._start(rest)
                if self._obj is None:
                    break
            elif not chunk and not data:
                break
        return b"".join(out)

    def _start(self, data: bytes) -> bytes:
        """Make the decompressor for the stream (or next gzip member) that ``data`` begins, and return ``data``;
        with fewer than two bytes, wait for more (kept pending). After a complete gzip member, bytes that do not
        begin another are trailing garbage (padding, a proxy's junk): ignored, as curl and browsers ignore them."""
        if len(data) < 2:
            self._pending = data
            return b""
        self._pending = b""
        if self._gzip:
            if self._members and data[:2] != _GZIP_MAGIC:
                self._done = True
                return b""
            self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            zlib_wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            self._obj = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        return data

    def flush(self, limit: int) -> bytes:
        if self._obj is None or self._obj.eof:
            return b""
        return bytes(self._obj.flush(limit + 1))

    @property
    def complete(self) -> bool:
        """Whether the body, now ended, held whole streams only: a gzip member's end is its CRC and length trailer
        (RFC 1952 §2.3), a zlib stream's its Adler-32, a raw deflate stream's its final block (it has no trailer:
        zlib's ``eof`` after the block marked last is all there is to go by). A stream cut anywhere before is an
        incomplete message (RFC 9112 §6.3), like a body short of its Content-Length. An empty body is complete
        (no stream at all); so is a lone byte after a complete member (garbage, ignored)."""
        if self._done:
            return True
        if self._obj is not None:
            return bool(self._obj.eof)
        return self._members > 0 or not self._pending


def decoders_for(content_encoding: str | None) -> list[_Decoder] | None:
    """Decoders in the order to apply them; None for an encoding we cannot bound (refused as BAD_CONTENT)."""
    if not content_encoding:
        return []
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    decoders: list[_Decoder] = []
    # RFC 9110 §8.4: codings are listed in the order applied, so decode from the last.
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding not in ("gzip", "x-gzip", "deflate"):
            return None
        decoders.append(_Decoder(coding))
    return decoders


# --- small parsers --------------------------------------------------------------------------------------------


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """RFC 9110 §10.2.3: delay-seconds or an HTTP-date; seconds from now, never negative; None if unusable."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)  # delay-seconds; fractions are not in the grammar but mean what they say
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 and seconds == seconds and seconds != float("inf") else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def media_type(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def content_type_accepted(content_type: str | None, accept: Sequence[str] | None) -> bool:
    """``accept`` None accepts anything; entries may be ``type/subtype``, ``type/*`` or ``*/*``.

    A response with no media type at all is accepted: RFC 9110 §8.3 lets the recipient examine the data, as
    browsers do, and the readers downstream sniff it (HTML by its markup, sitemaps by theirs) within the same
    byte cap as any body. A binary one is refused once read (``looks_binary``)."""
    if accept is None:
        return True
    mtype = media_type(content_type)
    if mtype is None:
        return True
    major = mtype.split("/", 1)[0]
    for allowed in accept:
        allowed = allowed.lower()
        if allowed in (mtype, "*/*") or (allowed.endswith("/*") and allowed[:-2] == major):
            return True
    return False


def looks_binary(body: bytes | None) -> bool:
    """A body no text reader wants: a NUL byte in its first KiB, unless it is UTF-16/32 text (a byte-order mark or
    a first ``<`` in one); sniffing as RFC 9110 §8.3 allows, the way browsers tell text from the rest."""
    head = (body or b"")[:1024]
    if b"\x00" not in head:
        return False
    return not head.startswith((b"\xff\xfe", b"\xfe\xff", b"<\x00", b"\x00<", b"\x00\x00\x00<"))


def error_class_for_status(status: int) -> ErrorClass | None:
    if status == 429:
        return ErrorClass.HTTP_429
    if 400 <= status < 500:
        return ErrorClass.HTTP_4XX
    if status >= 500:
        return ErrorClass.HTTP_5XX
    return None
