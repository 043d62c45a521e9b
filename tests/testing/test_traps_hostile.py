"""Traps are infinite, hostile routes do what they are named for, robots variants, 429 above max_in_flight."""

from __future__ import annotations

import asyncio
import gzip
import re
import struct
import zlib

import httpx
import pytest
from protego import Protego

from harvester.testing import HostSpec, RobotsSpec, TestWeb
from harvester.testing.hostile import HUGE_BYTES, crc32_combine, gzip_bomb
from harvester.testing.record import count_status


@pytest.fixture(scope="module")
def web():
    with TestWeb([HostSpec("t", pages=30, traps=True, hostile=True)], seed=1) as w:
        yield w


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def hrefs(html: str) -> list[str]:
    return [h.replace("&amp;", "&") for h in re.findall(r'href="([^"]*)"', html)]


def test_traps_are_linked_from_listings_and_details(web: TestWeb, client: httpx.Client):
    t = web.truth["t"]
    for url in (t.listing_urls()[0], t.detail_urls()[0]):
        links = hrefs(client.get(url).text)
        for kind, prefix in t.trap_prefixes().items():
            start = "/a/b/" if kind == "repeat" else prefix
            assert any(start in h for h in links), (kind, url)


def test_calendar_next_links_never_end(web: TestWeb, client: httpx.Client):
    url = web.url("t", "/calendar/2026/01")
    seen = set()
    for _ in range(200):
        r = client.get(url)
        assert r.status_code == 200
        seen.add(url)
        nxt = re.search(r'<a rel="next" href="([^"]+)"', r.text)
        assert nxt, url
        url = str(httpx.URL(url).join(nxt.group(1)))
    assert len(seen) == 200
    assert url.endswith("/calendar/2042/09")


def test_facets_and_repeating_segments_keep_producing_new_urls(web: TestWeb, client: httpx.Client):
    url = web.url("t", "/shop?color=red")
    seen: set[str] = set()
    for _ in range(30):
        links = [str(httpx.URL(url).join(h)) for h in hrefs(client.get(url).text) if "/shop?" in h]
        fresh = [u for u in links if u not in seen]
        assert fresh
        seen |= set(links)
        url = fresh[-1]
    assert len(seen) > 100
    url = web.url("t", "/a/b/")
    for _ in range(50):
        r = client.get(url)
        assert r.status_code == 200
        url = str(httpx.URL(url).join(re.search(r'href="(a/b/)"', r.text).group(1)))  # type: ignore[union-attr]
    assert url.count("/a/b") == 51


def test_session_ids_differ_per_render_and_serve_the_same_page(web: TestWeb, client: httpx.Client):
    page = web.truth["t"].detail_urls()[0]

    def sid(html: str) -> str:
        return re.search(r"sid=([0-9a-f]{8})", html).group(1)  # type: ignore[union-attr]

    a, b = sid(client.get(page).text), sid(client.get(page).text)
    assert a != b
    with_sid = client.get(f"{page}?sid={a}")
    assert with_sid.status_code == 200
    assert "<article>" in with_sid.text


def test_no_traps_without_traps(make_web, client: httpx.Client):
    plain = make_web([HostSpec("p", pages=10)])
    assert client.get(plain.url("p", "/calendar/2026/01")).status_code == 404  # control
    assert plain.truth["p"].trap_prefixes() == {}
    assert client.get(plain.url("p", "/hostile/huge")).status_code == 404


def test_redirect_loop_chain_and_fail_once(web: TestWeb, client: httpx.Client):
    with pytest.raises(httpx.TooManyRedirects):
        client.get(web.url("t", "/hostile/redirect-loop"), follow_redirects=True)
    r = client.get(web.url("t", "/hostile/redirect-chain/15"), follow_redirects=True)
    assert r.status_code == 200
    assert len(r.history) == 15
    assert [client.get(web.url("t", "/hostile/fail-once?k=a")).status_code for _ in range(3)] == [500, 200, 200]
    assert client.get(web.url("t", "/hostile/fail-once?k=b")).status_code == 500


def test_wrong_types_and_latin1(web: TestWeb, client: httpx.Client):
    r = client.get(web.url("t", "/hostile/wrong-type"))
    assert r.headers["content-type"] == "image/png"
    assert r.content.startswith(b"\x89PNG")
    r = client.get(web.url("t", "/hostile/wrong-type-html"))
    assert r.headers["content-type"] == "application/octet-stream"
    assert b"<html>" in r.content
    r = client.get(web.url("t", "/hostile/latin1"))
    assert r.headers["content-type"] == "text/html"
    assert "Caf\xe9".encode("latin-1") in r.content
    with pytest.raises(UnicodeDecodeError):
        r.content.decode("utf-8")


def test_huge_bodies_are_streamed_in_full(web: TestWeb, client: httpx.Client):
    with client.stream("GET", web.url("t", "/hostile/huge")) as r:
        assert int(r.headers["content-length"]) == HUGE_BYTES
        assert sum(len(b) for b in r.iter_raw()) == HUGE_BYTES
    with client.stream("GET", web.url("t", "/hostile/huge-chunked")) as r:
        assert "content-length" not in r.headers
        assert r.headers["transfer-encoding"] == "chunked"
        assert sum(len(b) for b in r.iter_bytes()) == HUGE_BYTES
    assert client.get(web.url("t", "/robots.txt")).status_code == 200  # the connection is still usable


async def test_drip_never_finishes_and_is_recorded_when_abandoned(web: TestWeb):
    got = bytearray()

    async def read_drip() -> None:
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(1.0)) as c,
            asyncio.timeout(1.6),
            c.stream("GET", web.url("t", "/hostile/drip")) as r,
        ):
            async for chunk in r.aiter_raw():  # a 1 s read timeout never fires: a byte every 0.5 s
                got.extend(chunk)

    with pytest.raises(TimeoutError):
        await read_drip()
    assert got.endswith(b"..")
    for _ in range(50):
        if any(rec.path == "/hostile/drip" for rec in web.records()):
            break
        await asyncio.sleep(0.05)
    assert any(rec.path == "/hostile/drip" and rec.status == 200 for rec in web.records())


def test_gzip_bomb_is_small_and_announces_more_than_one_gib(web: TestWeb, client: httpx.Client):
    raw = client.get(web.url("t", "/hostile/sitemap-bomb.xml.gz")).content
    assert len(raw) < 2 * 2**20
    assert struct.unpack("<I", raw[-4:])[0] > 2**30  # ISIZE: the inflated size (mod 2**32)
    head = zlib.decompressobj(wbits=31).decompress(raw[: 64 * 1024], 4 * 2**20)
    assert len(head) == 4 * 2**20  # 64 KiB of it already inflate to the 4 MiB asked for
    assert head.startswith(b'<?xml version="1.0"')


def test_gzip_bomb_round_trip_is_valid_gzip():
    # The same construction at 8 MiB: gzip checks CRC-32 and ISIZE, so the 1.1 GiB one is valid too
    # (its trailer comes from the same crc32_combine doubling; inflating it in a test would take seconds).
    small = gzip_bomb(8 * 2**20)
    data = gzip.decompress(small)  # checks CRC-32 and ISIZE
    assert len(data) >= 8 * 2**20 - 2**20
    assert data.rstrip().endswith(b"</urlset>")


def test_crc32_combine_matches_zlib():
    for n in (0, 1, 7, 1000, 65_537):
        a, b = bytes(range(256)) * 3, bytes(reversed(range(256))) * (n // 256) + b"x" * (n % 256)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_hostile_sitemaps_say_what_they_are(web: TestWeb, client: httpx.Client):
    def text(path: str) -> str:
        return client.get(web.url("t", path)).text

    assert "<!ENTITY lol9" in text("/hostile/sitemap-billion-laughs.xml")
    assert 'SYSTEM "file:///etc/passwd"' in text("/hostile/sitemap-xxe.xml")
    assert web.url("t", "/hostile/sitemap-self-index.xml") in text("/hostile/sitemap-self-index.xml")
    malformed = text("/hostile/sitemap-malformed.xml")
    assert "salt&pepper" in malformed
    assert malformed.count("<loc>") >= 6
    bad = text("/hostile/sitemap-badloc.xml")
    assert "<loc>javascript:alert(1)</loc>" in bad
    assert "<loc>/relative/path-1</loc>" in bad
    huge = client.get(web.url("t", "/hostile/robots-huge")).content
    assert len(huge) > 600 * 1024
    assert huge.rstrip().endswith(b"Disallow: /after-limit/")
    assert huge.index(b"/after-limit/") > 500 * 1024


async def test_429_with_retry_after_above_max_in_flight(make_web):
    web = make_web([HostSpec("m", pages=20, latency_s=0.3, max_in_flight=3, retry_after_s=2)])
    urls = web.truth["m"].detail_urls()[:8]
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=20)) as c:
        answers = await asyncio.gather(*(c.get(u) for u in urls))
    assert sorted(r.status_code for r in answers) == [200] * 3 + [429] * 5
    assert all(r.headers["retry-after"] == "2" for r in answers if r.status_code == 429)
    web.clear_records()
    async with httpx.AsyncClient() as c:
        answers = await asyncio.gather(*(c.get(u) for u in urls[:3]))
    assert [r.status_code for r in answers] == [200] * 3  # control: at the limit, no 429
    assert count_status(web.records(), 429) == 0


def test_robots_status_variants_and_groups(make_web, client: httpx.Client):
    web = make_web(
        [
            HostSpec("missing", pages=5, robots=RobotsSpec(status=404)),
            HostSpec("down", pages=5, robots=RobotsSpec(status=503)),
            HostSpec("moved", pages=5, robots=RobotsSpec(status=301, redirect_to="/robots-real.txt")),
            HostSpec("raw", pages=5, robots=RobotsSpec(body="\ufeffUser-agent: *\r\nDisallow: /x\r\n")),
            HostSpec(
                "grouped",
                pages=40,
                robots=RobotsSpec(agent_groups={"harvester": ("/private",)}, crawl_delay=0.05, request_rate="10/1s"),
            ),
        ]
    )
    assert client.get(web.url("missing", "/robots.txt")).status_code == 404
    assert web.truth["missing"].disallowed_urls() == []
    assert client.get(web.url("down", "/robots.txt")).status_code == 503
    assert web.truth["down"].disallowed_urls() == web.truth["down"].detail_urls()
    r = client.get(web.url("moved", "/robots.txt"))
    assert r.status_code == 301
    assert r.headers["location"] == "/robots-real.txt"
    assert client.get(web.url("moved", "/robots-real.txt")).text.startswith("# robots.txt")
    assert client.get(web.url("raw", "/robots.txt")).content.startswith(b"\xef\xbb\xbfUser-agent")
    body = client.get(web.url("grouped", "/robots.txt")).text
    assert "Crawl-delay: 0.05" in body
    assert "Request-rate: 10/1s" in body
    rp = Protego.parse(body)
    assert not rp.can_fetch(web.url("grouped", "/private/x"), "harvester/1.0")
    assert rp.can_fetch(web.url("grouped", "/private/x"), "otherbot")
    g = web.truth["grouped"]
    assert not g.is_allowed("/private/x", "harvester/1.0")
    assert g.is_allowed("/private/x", "otherbot")
    # The harvester's own group replaces "*": /members/ is disallowed for others only.
    assert g.disallowed_urls("otherbot")
    assert g.disallowed_urls("harvester") == []
