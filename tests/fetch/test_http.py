"""The bounded fetch: deadline, size caps (wire and decoded), redirects, content types, validators, taxonomy.

Most cases run against the test web's hostile routes. Content-Encoding bodies (a gzip bomb sent as
``Content-Encoding: gzip``, raw deflate, multi-member gzip) are not among them, so a tiny loopback server in
this file serves those.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from harvester.fetch.answers import content_type_accepted, parse_retry_after
from harvester.fetch.http import Fetcher
from harvester.records import ErrorClass, FetchResult, Validators
from harvester.settings import HttpSettings
from harvester.testing import HostSpec

CAP = 1 << 20
CHUNK = 256 * 1024  # more than any transport hands over at once

async def log_of(web):
    """The server's request log once it has caught up: in thread mode the server appends a record just after
    writing the response, so a client that reads the log at once can miss the last one (the sleep only yields
    the GIL and the loop; nothing here is timed)."""
    await asyncio.sleep(0.02)
    return web.records()



@pytest.fixture(scope="module")
def web():
    from harvester.testing import TestWeb

    with TestWeb([HostSpec("h", pages=20, hostile=True)], seed=3) as w:
        yield w


@pytest.fixture(params=["aiohttp", "httpcore"])
async def fetcher(request, web) -> AsyncIterator[Fetcher]:
    # The loopback servers of these tests (the test web and one-off servers on other ports) are let past the
    # address policy: what is tested here is the fetch, not the policy (tests/hardening/test_address_policy.py).
    f = Fetcher(HttpSettings(transport=request.param, timeout_s=5.0), user_agent="harvester/0.1 (+test)",
                seeds=web.seeds, allow_addresses=("127.0.0.1",))
    try:
        yield f
    finally:
        await f.aclose()


async def test_plain_page_and_user_agent(web, fetcher):
    url = web.truth["h"].allowed_detail_urls()[0]
    result = await fetcher.fetch(url, accept=("text/html",))
    assert result.ok
    assert result.body
    assert result.bytes_read >= len(result.body) // 20  # gzip or identity, bytes off the wire are counted
    assert result.etag
    rec = [r for r in (await log_of(web)) if r.path in url][-1]
    assert rec.user_agent == "harvester/0.1 (+test)"


async def test_conditional_headers_sent_and_304_returned_as_not_modified(web, fetcher):
    url = web.truth["h"].allowed_detail_urls()[1]
    first = await fetcher.fetch(url)
    again = await fetcher.fetch(url, validators=first.validators)
    assert again.not_modified
    assert again.error_class is None
    assert again.body is None
    rec = [r for r in (await log_of(web)) if r.path in url][-1]
    assert rec.if_none_match == first.etag
    assert rec.if_modified_since == first.last_modified
    # control: without validators the same URL is a full 200
    plain = await fetcher.fetch(url)
    assert plain.status == 200


async def test_drip_page_stops_at_the_total_deadline(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/drip"), timeout_s=1.0)
    assert result.error_class is ErrorClass.TIMEOUT
    assert result.status == 200  # headers came; the body never finished
    assert result.elapsed_s < 1.0 + 0.5


async def test_50mb_body_stops_at_the_cap_from_content_length(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/huge"), max_bytes=CAP)
    assert result.error_class is ErrorClass.TOO_LARGE
    assert result.bytes_read == 0  # refused from Content-Length before reading


async def test_50mb_chunked_body_stops_at_the_cap_while_streaming(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/huge-chunked"), max_bytes=CAP)
    assert result.error_class is ErrorClass.TOO_LARGE
    assert CAP < result.bytes_read <= CAP + CHUNK


async def test_redirect_loop_stops(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/redirect-loop"))
    assert result.error_class is ErrorClass.TOO_MANY_REDIRECTS
    assert len(result.redirects) <= 5


async def test_15_hop_chain_stops_at_5_hops(web, fetcher):
    web.clear_records()
    result = await fetcher.fetch(web.url("h", "/hostile/redirect-chain/15"))
    assert result.error_class is ErrorClass.TOO_MANY_REDIRECTS
    assert len(result.redirects) == 5
    assert len([r for r in (await log_of(web)) if "redirect-chain" in r.path]) == 6
    # control: a 3-hop chain ends in a 200
    short = await fetcher.fetch(web.url("h", "/hostile/redirect-chain/3"))
    assert short.ok
    assert len(short.redirects) == 3
    assert short.redirect_statuses == (302, 302, 302)


async def test_follow_hook_refuses_a_hop_with_its_reason(web, fetcher):
    web.clear_records()
    seen: list[str] = []

    async def follow(target: str):
        seen.append(target)
        return ErrorClass.ROBOTS_DISALLOWED

    started = time.monotonic()
    result = await fetcher.fetch(web.url("h", "/hostile/redirect-chain/3"), follow=follow)
    assert result.error_class is ErrorClass.ROBOTS_DISALLOWED
    assert seen == [web.url("h", "/hostile/redirect-chain/2")]
    paths = [r.path for r in await log_of(web) if r.start >= started]
    assert paths == ["/hostile/redirect-chain/3"]  # the refused hop was not requested


async def test_wrong_content_type_is_refused_without_reading_the_body(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/wrong-type"), accept=("text/html", "application/xhtml+xml"))
    assert result.error_class is ErrorClass.BAD_CONTENT_TYPE
    assert result.body is None
    control = await fetcher.fetch(web.url("h", "/hostile/wrong-type"), accept=None)
    assert control.ok


async def test_http_errors_are_classified_but_status_kept(web, fetcher):
    missing = await fetcher.fetch(web.url("h", "/no-such-page"))
    assert missing.error_class is ErrorClass.HTTP_4XX
    assert missing.status == 404
    assert missing.gone
    # A fresh key per run: id() of a freed object can repeat, and the route fails only once per URL.
    target = web.url("h", f"/hostile/fail-once?x={uuid.uuid4().hex}")
    failed = await fetcher.fetch(target)
    assert failed.error_class is ErrorClass.HTTP_5XX
    assert failed.status == 500
    assert (await fetcher.fetch(target)).ok


async def test_connect_refused_is_a_value_not_an_exception(fetcher):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = await fetcher.fetch(f"http://127.0.0.1:{port}/")
    assert result.error_class is ErrorClass.CONNECT
    assert result.status is None


async def test_a_request_that_never_left_carried_no_validators_and_one_that_left_did(fetcher):
    """The validators a result says were sent go to the fetch log and the WARC request records: a connection refused
    sent nothing (None); a request the server read and hung up on carried them, answer or not."""
    validators = Validators(etag='"v1"', last_modified="Sun, 06 Dec 2026 07:00:00 GMT")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    refused = await fetcher.fetch(f"http://127.0.0.1:{port}/", validators=validators)
    assert refused.error_class is ErrorClass.CONNECT
    assert refused.sent_validators is None
    received: list[bytes] = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b"\r\n\r\n"))  # the request read, then closed with no answer
        writer.close()

    dropped = await fetch_from_raw(fetcher, hang_up, validators=validators)
    assert dropped.error_class is ErrorClass.CONNECT, dropped.error
    assert b'if-none-match: "v1"' in received[0].lower()  # control: the request left with them
    assert dropped.sent_validators == validators


async def test_only_http_schemes_are_requested(fetcher):
    result = await fetcher.fetch("ftp://127.0.0.1/file")
    assert result.error_class is ErrorClass.OUT_OF_SCOPE


def test_retry_after_parsing():
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 - 60) == 60.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0 + 60) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_content_type_matching():
    assert content_type_accepted("text/html; charset=utf-8", ("text/html",))
    assert content_type_accepted("TEXT/HTML", ("text/html",))
    assert content_type_accepted("application/rss+xml", ("application/*",))
    assert not content_type_accepted("image/png", ("text/html",))
    assert content_type_accepted(None, ("text/html",))  # no media type: the body is sniffed (RFC 9110 §8.3)
    assert content_type_accepted(None, None)


# --- Content-Encoding bodies from a tiny local server ---------------------------------------------------------


def gzip_bomb_stream(total: int) -> list[bytes]:
    """A gzip stream of ``total`` zero bytes, compressed ~1000:1, produced in pieces (never all in memory)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    parts = [comp.compress(block) for _ in range(total // len(block))]
    parts.append(comp.flush())
    return [p for p in parts if p]


PAYLOAD = b"<html><body>" + b"hello world " * 500 + b"</body></html>"


@functools.cache
def bomb() -> bytes:
    return b"".join(gzip_bomb_stream(64 << 20))  # 64 MiB inflated, ~64 KiB on the wire


class EncodedServer:
    """Serves /gzip-bomb (Content-Encoding: gzip), /deflate-raw, /deflate-zlib and /gzip-members."""

    def __init__(self) -> None:
        self.payload = PAYLOAD
        raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        wrapped = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS)
        cut_raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        half = len(self.payload) // 2
        members = zlib.compress(self.payload[:half], wbits=31) + zlib.compress(self.payload[half:], wbits=31)
        self.routes = {
            b"/gzip-bomb": (b"gzip", bomb()),
            b"/deflate-raw": (b"deflate", raw.compress(self.payload) + raw.flush()),
            b"/deflate-zlib": (b"deflate", wrapped.compress(self.payload) + wrapped.flush()),
            b"/gzip-members": (b"gzip", members),
            b"/brotli": (b"br", b"\x0b\x02\x80hello\x03"),
            # cut short: without the CRC and length trailer; a zlib stream cut; raw deflate never reaching its last
            # block (sync-flushed, so everything before decodes); a second gzip member cut
            b"/gzip-cut": (b"gzip", zlib.compress(self.payload, wbits=31)[:-8]),
            b"/deflate-zlib-cut": (b"deflate", zlib.compress(self.payload)[:-20]),
            b"/deflate-raw-cut": (b"deflate", cut_raw.compress(self.payload) + cut_raw.flush(zlib.Z_SYNC_FLUSH)),
            b"/gzip-members-cut": (b"gzip", members[:-3]),
            # a complete member, then bytes that begin no other: the member is the body
            b"/gzip-garbage": (b"gzip", zlib.compress(self.payload, wbits=31) + b"\x00\x00garbage"),
            b"/gzip-one-byte-more": (b"gzip", zlib.compress(self.payload, wbits=31) + b"\n"),
            b"/empty-gzip": (b"gzip", b""),
        }
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                coding, body = self.routes.get(path, (b"identity", b"missing"))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: " + coding
                             + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
                for i in range(0, len(body), 65536):
                    writer.write(body[i:i + 65536])
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def fetch_from_raw(fetcher: Fetcher, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter],
                         Awaitable[None]], path: str = "/", **kw: Any) -> FetchResult:
    """One fetch from a bare asyncio server answering with ``handle``: for answers no web framework would send."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        return await fetcher.fetch(f"http://127.0.0.1:{port}{path}", **kw)
    finally:
        server.close()
        await server.wait_closed()


async def test_gzip_bomb_body_stops_at_the_decoded_cap(fetcher):
    server = EncodedServer()
    async with server as origin:
        started = time.process_time()
        result = await fetcher.fetch(origin + "/gzip-bomb", max_bytes=CAP)
        cpu = time.process_time() - started
    assert result.error_class is ErrorClass.TOO_LARGE
    assert "after decoding" in (result.error or "")
    assert result.bytes_read < CAP  # the wire bytes were under the cap: only the decoded cap caught it
    assert cpu < 5.0  # 64 MiB were never inflated (a bound, not a benchmark)


@pytest.mark.parametrize("path", ["/deflate-raw", "/deflate-zlib", "/gzip-members"])
async def test_encoded_bodies_are_decoded(fetcher, path):
    server = EncodedServer()
    async with server as origin:
        result = await fetcher.fetch(origin + path)
    assert result.ok
    assert result.body == server.payload


@pytest.mark.parametrize("path", ["/gzip-cut", "/deflate-zlib-cut", "/deflate-raw-cut", "/gzip-members-cut"])
async def test_a_compressed_body_cut_short_is_an_incomplete_answer(fetcher, path):
    """A compressed body that ends before its stream does (its Content-Length true to the bytes sent) is a message
    cut short (RFC 9112 §6.3): it was returned as the whole page, stored and counted new. It fails as a broken
    answer (PROTOCOL), as a body short of its Content-Length does, and carries no body."""
    async with EncodedServer() as origin:
        result = await fetcher.fetch(origin + path)
    assert (result.ok, result.error_class, result.body) == (False, ErrorClass.PROTOCOL, None), result.error
    assert "ended before its compressed stream did" in (result.error or "")


@pytest.mark.parametrize("path", ["/gzip-garbage", "/gzip-one-byte-more"])
async def test_bytes_after_the_last_gzip_member_are_ignored(fetcher, path):
    """Bytes after a complete gzip member that begin no other member were decoded as a member and the page refused
    as bad_content; curl and browsers ignore them, and so does the fetch: the member is the body."""
    server = EncodedServer()
    async with server as origin:
        result = await fetcher.fetch(origin + path)
    assert result.ok, result.error
    assert result.body == server.payload


async def test_an_empty_gzip_body_is_an_empty_body(fetcher):
    async with EncodedServer() as origin:
        result = await fetcher.fetch(origin + "/empty-gzip")
    assert (result.ok, result.body) == (True, b""), result.error


async def test_unbounded_encoding_is_refused(fetcher):
    async with EncodedServer() as origin:
        result = await fetcher.fetch(origin + "/brotli")
    assert result.error_class is ErrorClass.BAD_CONTENT


async def test_truncate_keeps_the_first_bytes_instead_of_failing(web, fetcher):
    result = await fetcher.fetch(web.url("h", "/hostile/huge"), max_bytes=1000, truncate=True)
    assert result.ok
    assert len(result.body or b"") == 1000


async def test_validators_go_to_the_url_that_issued_them_alone(web, fetcher, serve):
    """Told which URL issued them (robots.txt's redirect target), the validators go on that hop's request, both of
    them, and on no other: not on the first URL nor on the hops between, on another origin too. By default (pages)
    they go on the first request only (control)."""
    validators = Validators(etag='"x"', last_modified="Mon, 05 Jan 2026 00:00:00 GMT")
    web.clear_records()
    started = time.monotonic()
    await fetcher.fetch(web.url("h", "/hostile/redirect-chain/1"), validators=validators)
    recs = [r for r in await log_of(web) if r.start >= started]
    assert len(recs) >= 2
    assert (recs[0].if_none_match, recs[0].if_modified_since) == ('"x"', "Mon, 05 Jan 2026 00:00:00 GMT")
    assert all((r.if_none_match, r.if_modified_since) == (None, None) for r in recs[1:])
    issuer = web.url("h", recs[-1].path)
    started = time.monotonic()
    await fetcher.fetch(web.url("h", "/hostile/redirect-chain/1"), validators=validators, validators_url=issuer)
    recs = [r for r in await log_of(web) if r.start >= started]
    assert all((r.if_none_match, r.if_modified_since) == (None, None) for r in recs[:-1])
    assert (recs[-1].if_none_match, recs[-1].if_modified_since) == ('"x"', "Mon, 05 Jan 2026 00:00:00 GMT")

    from aiohttp import web as aioweb

    seen: list[tuple[str, str | None]] = []

    async def elsewhere(request: aioweb.Request) -> aioweb.Response:
        seen.append((request.path, request.headers.get("If-None-Match")))
        return aioweb.Response(text="<html><body>there</body></html>", content_type="text/html")

    other = await serve(elsewhere)

    async def away(request: aioweb.Request) -> aioweb.Response:
        seen.append((request.path, request.headers.get("If-None-Match")))
        raise aioweb.HTTPMovedPermanently(f"{other}/there")

    origin = await serve(away)
    moved = await fetcher.fetch(origin + "/here", validators=Validators(etag='"x"'), validators_url=f"{other}/there")
    assert moved.ok and seen == [("/here", None), ("/there", '"x"')]


async def test_the_result_says_what_the_request_that_got_the_answer_carried(web, fetcher):
    """``sent_validators`` is the last hop's request as the server received it (the WARC writes it): the
    validators of a conditional GET, none for a plain one, and for a redirect chain the hop's (all of them when it
    issued them, else nothing), not those the fetch was given."""
    url = web.truth["h"].allowed_detail_urls()[2]
    first = await fetcher.fetch(url)
    assert first.sent_validators == Validators() and first.validators
    again = await fetcher.fetch(url, validators=first.validators)
    rec = [r for r in (await log_of(web)) if r.path in url][-1]
    assert again.sent_validators == Validators(rec.if_none_match, rec.if_modified_since) == first.validators
    given = Validators(etag='"x"', last_modified="Mon, 05 Jan 2026 00:00:00 GMT")
    chain = web.url("h", "/hostile/redirect-chain/1")
    final = (await fetcher.fetch(chain)).final_url
    for issuer, last_hop in ((final, given), (None, Validators())):
        started = time.monotonic()
        result = await fetcher.fetch(chain, validators=given, validators_url=issuer)
        recs = [r for r in await log_of(web) if r.start >= started]
        assert result.sent_validators == last_hop == Validators(recs[-1].if_none_match, recs[-1].if_modified_since)


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        (b"<!DOCTYPE html><html><head><title>t</title></head><body>untyped</body></html>", True),
        ("<urlset/>".encode("utf-16"), True),  # UTF-16 text has NUL bytes too
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", False),
    ],
)
async def test_a_response_without_a_content_type_is_read_for_sniffing(fetcher, body, accepted):

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    result = await fetch_from_raw(fetcher, handle, "/page", accept=("text/html",))
    if accepted:
        assert result.ok, result.error
        assert result.body == body and result.content_type is None
    else:
        assert result.error_class is ErrorClass.BAD_CONTENT_TYPE and result.body is None


async def test_x_robots_tag_header_lines_stay_apart(fetcher):
    # A "crawler:" prefix holds to the end of its own line: joined by commas, it would swallow the next line.
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Robots-Tag: googlebot: noarchive\r\n"
                     b"X-Robots-Tag: noindex\r\nVary: a\r\nVary: b\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    result = await fetch_from_raw(fetcher, handle)
    assert result.headers["x-robots-tag"] == "googlebot: noarchive\nnoindex"
    assert result.headers["vary"] == "a, b"  # every other field as RFC 9110 §5.3 joins it


async def test_a_broken_answer_is_a_protocol_error_and_no_answer_a_connect_error(fetcher, serve):
    """A body cut short, a body longer than its Content-Length (whose surplus garbles the connection's next answer)
    and a refused connection: the first two are the server's fault (protocol), the last the network's (connect)."""
    from aiohttp import web as aioweb

    async def handle(request: aioweb.Request) -> aioweb.StreamResponse:
        if request.path == "/cut":
            response = aioweb.StreamResponse(headers={"Content-Type": "text/html", "Content-Length": "10000"})
            await response.prepare(request)
            await response.write(b"<html><body>" + b"a" * 500)
            assert request.transport is not None
            request.transport.close()
            return response
        if request.path == "/overrun":
            response = aioweb.StreamResponse(headers={"Content-Type": "text/html", "Content-Length": "100"})
            await response.prepare(request)
            assert request.transport is not None
            request.transport.write(b"<html><body>" + b"b" * 300 + b"</body></html>")
            return response
        return aioweb.Response(content_type="text/html", text="<html><body>fine</body></html>")

    origin = await serve(handle)
    cut = await fetcher.fetch(origin + "/cut", accept=("text/html",))
    assert (cut.ok, cut.error_class) == (False, ErrorClass.PROTOCOL), cut.error
    classes = []
    for path in ("/overrun", "/fine", "/fine"):
        result = await fetcher.fetch(origin + path, accept=("text/html",))
        classes.append(None if result.ok else result.error_class)
    # aiohttp flags the overrun itself; httpcore reads the surplus as the next answer's status line.
    assert (classes.count(ErrorClass.PROTOCOL), classes.count(None)) == (1, 2), classes
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    refused = await fetcher.fetch(f"http://127.0.0.1:{port}/", accept=("text/html",))
    assert refused.error_class is ErrorClass.CONNECT

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the request read, then closed with no answer at all
        writer.close()

    dropped = await fetch_from_raw(fetcher, hang_up, accept=("text/html",))
    assert dropped.error_class is ErrorClass.CONNECT, dropped.error


@pytest.mark.parametrize("head", [
    pytest.param(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Len", id="cut-in-the-head"),
    pytest.param(b"", id="no-answer"),
])
async def test_a_dropped_answer_reaches_the_server_once_per_attempt(fetcher, head):
    """A connection dropped before the answer's head is complete: the client library must not send the request a
    second time on its own (aiohttp retries an idempotent request once, unseen by the politeness gate that counted
    one): 3 attempts are 3 requests. A head cut after its status line is the server's broken answer (protocol), no
    answer at all a dropped connection (connect); httpcore reports both alike, so only the count is asked of it."""
    requests = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await reader.readuntil(b"\r\n\r\n")
        requests += 1
        writer.write(head)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        results = [await fetcher.fetch(f"http://127.0.0.1:{port}/", accept=("text/html",)) for _ in range(3)]
    finally:
        server.close()
        await server.wait_closed()
    assert requests == 3, [result.error for result in results]
    assert not any(result.ok for result in results)
    if fetcher.settings.transport == "aiohttp":
        expected = ErrorClass.PROTOCOL if head else ErrorClass.CONNECT
        assert {result.error_class for result in results} == {expected}, [result.error for result in results]
