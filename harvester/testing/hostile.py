"""Hostile routes, mounted under /hostile/ when ``HostSpec.hostile``: each is named for what it does wrong
(drip, huge bodies, redirect loops and chains, wrong types, fail-once, latin-1, hostile sitemaps, huge robots).

They exist to prove the harvester's bounds; nothing here is ever followed by the server itself. Big bodies
are produced while sending (the 1 GiB gzip bomb is ~1 MiB on the wire, built from one repeated deflate block).
"""

from __future__ import annotations

import asyncio
import re
import struct
import zlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING
from urllib.parse import unquote

from harvester.testing.resources import (
    HTML,
    Reply,
    Resource,
    Stream,
    http_date,
    make_resource,
    parse_http_date,
    status_line,
)
from harvester.testing.sites import BASE_EPOCH

if TYPE_CHECKING:
    from harvester.testing.render import ServedSite

__all__ = ["BOMB_INFLATED_BYTES", "HUGE_BYTES", "ROUTES", "HostileRoutes", "gzip_bomb", "huge_robots_body"]

HUGE_BYTES = 50 * 2**20
"""Size of /hostile/huge and /hostile/huge-chunked."""

BOMB_INFLATED_BYTES = 1100 * 2**20
"""What /hostile/sitemap-bomb.xml.gz inflates to (> 1 GiB)."""

DRIP_INTERVAL_S = 0.5

ROUTES = {
    "/hostile/drip": "200, then one byte every 0.5 s, forever (no Content-Length)",
    "/hostile/huge": "50 MiB body with Content-Length, streamed",
    "/hostile/huge-chunked": "50 MiB body, Transfer-Encoding: chunked (no Content-Length)",
    "/hostile/slow-headers": "headers only after ?s= seconds (default 5)",
    "/hostile/redirect-loop": "302 → /hostile/redirect-loop-b → 302 back",
    "/hostile/redirect-chain/15": "302 → …/14 → … → …/0, which answers 200 (any N up to 1000)",
    "/hostile/redirect-out": "302 to the URL in ?to= (another host, another scheme): the client must refuse",
    "/hostile/wrong-type": "PNG bytes as image/png where an HTML link points",
    "/hostile/wrong-type-html": "an HTML page served as application/octet-stream",
    "/hostile/fail-once": "500 the first time a target (path+query) is asked for, 200 after",
    "/hostile/latin1": "latin-1 bytes, Content-Type text/html without a charset",
    "/hostile/sitemap-billion-laughs.xml": "a urlset behind a DOCTYPE of nested entities",
    "/hostile/sitemap-xxe.xml": "a urlset with an external entity pointing at file:///etc/passwd",
    "/hostile/sitemap-bomb.xml.gz": "~1 MiB of gzip that inflates to > 1 GiB",
    "/hostile/gzip-bomb-page": "the same bomb as an HTML page with Content-Encoding: gzip",
    "/hostile/sitemap-self-index.xml": "a sitemap index listing itself",
    "/hostile/sitemap-malformed.xml": "valid entries with a bare & in the middle",
    "/hostile/sitemap-badloc.xml": "javascript:, relative, ftp: and empty <loc> values beside valid ones",
    "/hostile/robots-huge": "a 600 KiB+ robots.txt whose last rule lies past the 500 KiB limit",
}
"""Every hostile route and what it does (also served as the /hostile/ index page)."""

_PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"
)
_CHAIN_RE = re.compile(r"/hostile/redirect-chain/(\d{1,4})")


def huge_robots_body(size: int = 600 * 1024) -> str:
    """A robots.txt of at least ``size`` bytes; ``Disallow: /after-limit/`` is its last line, past 500 KiB
    (RFC 9309 §2.5: crawlers may ignore what lies beyond 500 KiB; protego does not stop by itself)."""
    lines = ["User-agent: *", "Disallow: /hostile/never/"]
    n = 0
    total = 40
    while total < size:
        line = f"Disallow: /generated/rule-{n:07d}/"
        lines.append(line)
        total += len(line) + 1
        n += 1
    lines.append("Disallow: /after-limit/")
    return "\n".join(lines) + "\n"


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A||B from crc(A), crc(B) and len(B): zlib's crc32_combine (GF(2) matrix powers), so the
    bomb's trailer costs microseconds instead of a pass over a gigabyte."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:
        even = _gf2_square(odd)  # first pass: one zero byte
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def gzip_bomb(inflated: int = BOMB_INFLATED_BYTES) -> bytes:
    """A valid gzip member of an XML urlset padded with spaces to ``inflated`` bytes. Deflate reaches a steady
    state on a run of spaces, so one sync-flushed 1 MiB block is compressed once and repeated."""
    block = b" " * 2**20
    prefix = b'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    suffix = b"</urlset>\n"
    n_blocks = max(4, (inflated - len(prefix) - len(suffix)) // len(block))
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    out = [co.compress(prefix)]
    warm = [co.compress(block) + co.flush(zlib.Z_SYNC_FLUSH) for _ in range(3)]
    out += warm
    steady = warm[-1] if warm[1] == warm[2] else b""
    for _ in range(n_blocks - 3):
        out.append(steady or (co.compress(block) + co.flush(zlib.Z_SYNC_FLUSH)))
    out.append(co.compress(suffix) + co.flush())
    # CRC of prefix + block * n_blocks + suffix, by doubling the block's CRC instead of reading 1 GiB.
    crc_block, len_block = zlib.crc32(block), len(block)
    crc_run, len_run, n = 0, 0, n_blocks
    while n:
        if n & 1:
            crc_run = crc32_combine(crc_run, crc_block, len_block) if len_run else crc_block
            len_run += len_block
        crc_block = crc32_combine(crc_block, crc_block, len_block)
        len_block *= 2
        n >>= 1
    crc = crc32_combine(zlib.crc32(prefix), crc_run, len_run)
    crc = crc32_combine(crc, zlib.crc32(suffix), len(suffix))
    size = len(prefix) + len_run + len(suffix)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    return header + b"".join(out) + struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF)


class HostileRoutes:
    """The /hostile/ routes of one host. ``fail-once`` remembers targets for the life of the server."""

    def __init__(self, site: ServedSite) -> None:
        self.site = site
        self._failed_once: set[str] = set()
        self._bomb: bytes | None = None
        origin = site.origin
        good = [p.path for p in site.model.pages if p.in_sitemap and p.coverage != "disallowed"][:6]
        urlset_head = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
        )

        def entries(paths: list[str]) -> str:
            return "".join(f"<url><loc>{origin}{p}</loc><lastmod>2026-01-04</lastmod></url>\n" for p in paths)

        ents = ['<!ENTITY lol "lol">'] + [
            f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)
        ]
        billion = (
            '<?xml version="1.0"?>\n<!DOCTYPE urlset [\n' + "\n".join(ents) + "\n]>\n"
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"<url><loc>{origin}/articles/&lol9;</loc></url>\n" + entries(good[:2]) + "</urlset>\n"
        )
        xxe = (
            '<?xml version="1.0"?>\n<!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
            '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"<url><loc>{origin}/leak?&xxe;</loc></url>\n" + entries(good[:2]) + "</urlset>\n"
        )
        self_index = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"<sitemap><loc>{origin}/hostile/sitemap-self-index.xml</loc></sitemap>\n</sitemapindex>\n"
        )
        half = len(good) // 2
        malformed = (
            urlset_head + entries(good[:half]) + f"<url><loc>{origin}/search?q=salt&pepper</loc></url>\n"
            "<url><loc>AT&T</loc></url>\n" + entries(good[half:]) + "</urlset>\n"
        )
        badloc = (
            urlset_head + "<url><loc>javascript:alert(1)</loc></url>\n<url><loc>/relative/path-1</loc></url>\n"
            "<url><loc>ftp://127.0.0.1/file.txt</loc></url>\n<url><loc></loc></url>\n"
            "<url><loc>   </loc></url>\n" + entries(good[:3]) + "</urlset>\n"
        )
        xml = "application/xml"
        index_html = (
            "<!DOCTYPE html><html><head><title>Hostile routes</title></head><body><h1>Hostile routes</h1><ul>"
            + "".join(f'<li><a href="{p}">{p}</a>: {what}</li>' for p, what in ROUTES.items())
            + "</ul></body></html>"
        )
        latin1 = (
            "<!DOCTYPE html><html><head><title>Caf\xe9 cr\xe8me</title></head><body><p>Gr\xfc\xdfe aus "
            "K\xf6ln, \xa9 2026, na\xefve fa\xe7ade.</p></body></html>"
        ).encode("latin-1")
        lm = BASE_EPOCH
        self.static: dict[str, Resource] = {}
        """Fixed routes, answering If-None-Match / If-Modified-Since as any server's files do."""
        for path, res in {
            "/hostile/": make_resource(200, HTML, index_html, lm_ts=lm),
            "/hostile/sitemap-billion-laughs.xml": make_resource(200, xml, billion, lm_ts=lm),
            "/hostile/sitemap-xxe.xml": make_resource(200, xml, xxe, lm_ts=lm),
            "/hostile/sitemap-self-index.xml": make_resource(200, xml, self_index, lm_ts=lm),
            "/hostile/sitemap-malformed.xml": make_resource(200, xml, malformed, lm_ts=lm),
            "/hostile/sitemap-badloc.xml": make_resource(200, xml, badloc, lm_ts=lm),
            "/hostile/robots-huge": make_resource(200, "text/plain", huge_robots_body(), lm_ts=lm),
            "/hostile/wrong-type": make_resource(200, "image/png", _PNG, lm_ts=lm),
            "/hostile/wrong-type-html": make_resource(
                200, "application/octet-stream", "<!DOCTYPE html><html><body><p>I am HTML.</p></body></html>"
            ),
            "/hostile/latin1": make_resource(200, "text/html", latin1, lm_ts=lm),
            "/hostile/redirect-loop": make_resource(
                302, HTML, "", headers=(("Location", "/hostile/redirect-loop-b"),), validators=False
            ),
            "/hostile/redirect-loop-b": make_resource(
                302, HTML, "", headers=(("Location", f"{origin}/hostile/redirect-loop"),), validators=False
            ),
            "/hostile/fail-once/ok": make_resource(200, HTML, "<!DOCTYPE html><html><body>fine now</body></html>"),
        }.items():
            self.static[path] = res
        err = make_resource(500, "text/plain", "internal error, try again\n", validators=False)
        self._error: Reply = (500, err.head, err.body(b""))

    def respond(self, path: str, query: str, inm: str | None = None, ims: str | None = None) -> Reply | Stream | None:
        """The reply for a /hostile/ path, or None (404) for one not mounted."""
        fixed = self.static.get(path)
        if fixed is not None:
            return fixed.reply(inm, ims, b"")
        if path == "/hostile/fail-once":
            target = path + "?" + query
            if target not in self._failed_once:
                self._failed_once.add(target)
                return self._error
            return self.static["/hostile/fail-once/ok"].reply(None, None, b"")
        if path == "/hostile/redirect-out":
            m3 = re.search(r"(?:^|&)to=([^&]+)", query)
            if m3 is None:
                return None
            res = make_resource(302, HTML, "", headers=(("Location", unquote(m3.group(1))),), validators=False)
            return res.status, res.head, res.body(b"")
        m = _CHAIN_RE.fullmatch(path)
        if m:
            n = int(m.group(1))
            if n == 0:
                res = make_resource(200, HTML, "<!DOCTYPE html><html><body>end of the chain</body></html>")
            else:
                res = make_resource(
                    302, HTML, "", headers=(("Location", f"/hostile/redirect-chain/{n - 1}"),), validators=False
                )
            return res.status, res.head, res.body(b"")
        if path == "/hostile/drip":
            return Stream(200, status_line(200) + b"Content-Type: text/html\r\n", _drip)
        if path == "/hostile/huge":
            head = status_line(200) + f"Content-Type: text/html\r\nContent-Length: {HUGE_BYTES}\r\n".encode()
            return Stream(200, head, lambda: _filler(HUGE_BYTES, chunked=False), close=False)
        if path == "/hostile/huge-chunked":
            head = status_line(200) + b"Content-Type: text/html\r\nTransfer-Encoding: chunked\r\n"
            return Stream(200, head, lambda: _filler(HUGE_BYTES, chunked=True), close=False)
        if path == "/hostile/slow-headers":
            m2 = re.search(r"(?:^|&)s=(\d+(?:\.\d+)?)", query)
            delay = min(60.0, float(m2.group(1))) if m2 else 5.0
            body = b"<!DOCTYPE html><html><body>finally</body></html>"
            head = status_line(200) + f"Content-Type: text/html\r\nContent-Length: {len(body)}\r\n".encode()
            return Stream(200, head, lambda: _single(body), close=False, delay_s=delay)
        if path == "/hostile/sitemap-bomb.xml.gz":
            # A static file: If-Modified-Since is answered as a file server would (Last-Modified never moves).
            seen = parse_http_date(ims) if ims is not None and inm is None else None
            if seen is not None and seen >= BASE_EPOCH:
                return 304, status_line(304) + f"Last-Modified: {http_date(BASE_EPOCH)}\r\n".encode(), b""
            return Stream(200, self._bomb_head, self._bomb_body, close=False)
        if path == "/hostile/gzip-bomb-page":
            return Stream(200, self._bomb_page_head, self._bomb_body, close=False)
        return None

    async def _bomb_head(self) -> bytes:
        if self._bomb is None:
            self._bomb = await asyncio.to_thread(gzip_bomb)  # built once, on first request
        return (
            status_line(200)
            + (
                f"Content-Type: application/gzip\r\nContent-Length: {len(self._bomb)}\r\n"
                f"Last-Modified: {http_date(BASE_EPOCH)}\r\n"
            ).encode()
        )

    async def _bomb_page_head(self) -> bytes:
        head = await self._bomb_head()
        return head.replace(b"Content-Type: application/gzip", b"Content-Type: text/html\r\nContent-Encoding: gzip")

    async def _bomb_body(self) -> AsyncIterator[bytes]:
        data = self._bomb or b""
        for i in range(0, len(data), 65_536):
            yield data[i : i + 65_536]


async def _drip() -> AsyncIterator[bytes]:
    yield b"<!DOCTYPE html><html><body>"
    while True:
        await asyncio.sleep(DRIP_INTERVAL_S)
        yield b"."


async def _filler(total: int, *, chunked: bool) -> AsyncIterator[bytes]:
    block = (b"<p>" + b"filler " * 9_360 + b"</p>\n")[:65_536]
    sent = 0
    while sent < total:
        piece = block[: min(len(block), total - sent)]
        sent += len(piece)
        yield (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
    if chunked:
        yield b"0\r\n\r\n"


async def _single(body: bytes) -> AsyncIterator[bytes]:
    yield body
