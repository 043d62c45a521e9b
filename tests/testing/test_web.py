"""The test web itself: validators and 304s, robots, sitemaps (gz child), feeds, listings, recording, modes."""

from __future__ import annotations

import asyncio
import gzip
import re
import xml.etree.ElementTree as ET

import feedparser
import httpx
import pytest
from protego import Protego

from harvester.testing import HostSpec, RobotsSpec, TestWeb
from harvester.testing.record import count_status, max_in_flight

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def locs(xml: bytes) -> list[str]:
    return [e.text or "" for e in ET.fromstring(xml).iter(f"{SM}loc")]


@pytest.fixture(scope="module")
def paged():
    """A host whose listings span several pages."""
    with TestWeb([HostSpec("l", pages=120, listing_page_size=5)], seed=3) as web:
        yield web


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def test_detail_answers_304_to_its_etag_and_200_to_another(test_web: TestWeb, client: httpx.Client):
    url = test_web.truth["a"].detail_urls()[5]
    first = client.get(url)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(url, headers={"If-None-Match": '"something-else"'}).status_code == 200  # control
    # Weak comparison: the strong spelling of a weak tag still matches (RFC 9110 §13.1.2).
    assert client.get(url, headers={"If-None-Match": etag.removeprefix("W/")}).status_code == 304


def test_if_modified_since_answers_304_only_when_not_newer(test_web: TestWeb, client: httpx.Client):
    url = test_web.truth["a"].sitemap_documents()[0]
    lm = client.get(url).headers["last-modified"]
    assert client.get(url, headers={"If-Modified-Since": lm}).status_code == 304
    assert client.get(url, headers={"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}).status_code == 200


def test_if_none_match_takes_precedence_over_if_modified_since(test_web: TestWeb, client: httpx.Client):
    url = test_web.truth["b"].feed_documents()[0]
    r = client.get(url)
    headers = {"If-None-Match": '"stale"', "If-Modified-Since": r.headers["last-modified"]}
    assert client.get(url, headers=headers).status_code == 200  # RFC 9110 §13.2.2


def test_every_page_sitemap_and_feed_has_validators(test_web: TestWeb, client: httpx.Client):
    t = test_web.truth["a"]
    urls = [test_web.url("a"), t.detail_urls()[0], *t.sitemap_documents(), *t.feed_documents(), t.listing_urls()[0]]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, url
        assert r.headers.get("etag"), url
        assert r.headers.get("last-modified"), url


def test_robots_lists_disallows_and_the_sitemap_index(test_web: TestWeb, client: httpx.Client):
    body = client.get(test_web.url("a", "/robots.txt")).text
    rp = Protego.parse(body)
    assert not rp.can_fetch(test_web.url("a", "/private/x"), "harvester")
    assert list(rp.sitemaps) == [test_web.url("a", "/sitemap_index.xml")]
    for url in test_web.truth["a"].disallowed_urls():
        assert not rp.can_fetch(url, "harvester")
    assert test_web.truth["a"].disallowed_urls(), "some sitemap entries must be disallowed"


def test_sitemap_index_children_cover_the_sitemap_truth_and_one_child_is_gzip(test_web: TestWeb, client):
    t = test_web.truth["b"]
    index, *children = t.sitemap_documents()
    assert locs(client.get(index).content) == children
    assert len(children) == 3
    assert children[0].endswith(".xml.gz")
    found: list[str] = []
    for child in children:
        data = client.get(child).content
        if child.endswith(".gz"):
            assert data[:2] == b"\x1f\x8b"
            data = gzip.decompress(data)
        root = ET.fromstring(data)
        assert all(u.find(f"{SM}lastmod") is not None and u.find(f"{SM}priority") is not None for u in root)
        found += locs(data)
    assert sorted(found) == sorted(t.sitemap_urls())
    assert set(t.sitemap_only()) <= set(found)
    assert not set(t.feed_only()) & set(found)
    assert not set(t.listing_only()) & set(found)


def test_feeds_are_linked_from_the_homepage_and_hold_the_feed_truth(test_web: TestWeb, client: httpx.Client):
    home = client.get(test_web.url("a")).text
    hrefs = re.findall(r'<link rel="alternate" type="application/(?:rss|atom)\+xml"[^>]*href="([^"]+)"', home)
    assert [test_web.url("a", h) for h in hrefs] == test_web.truth["a"].feed_documents()
    truth = test_web.truth["a"]
    for url in truth.feed_documents():
        # The head lists the newest entries only; RFC 5005 rel="next" pages hold the rest, each entry once.
        links: list[str] = []
        pages = 0
        next_url: str | None = url
        while next_url is not None:
            parsed = feedparser.parse(client.get(next_url).content)
            pages += 1
            assert 0 < len(parsed.entries) <= truth.spec.feed_entries
            assert all(e.get("published") or e.get("updated") for e in parsed.entries)
            links += [e.link.split("?")[0] for e in parsed.entries]
            next_url = next((link.href for link in parsed.feed.links if link.rel == "next"), None)
        assert pages > 1  # control: the head alone does not hold every entry
        assert sorted(links) == sorted(truth.feed_urls())


def test_feeds_order_newest_first_and_an_edit_moves_an_atom_entry_up(make_web):
    web = make_web([HostSpec("f", pages=60, feed_entries=5)], seed=2)
    truth = web.truth["f"]
    rss, atom = truth.feed_documents()
    with httpx.Client() as client:

        def head(url: str) -> list[str]:
            return [e.link.split("?")[0] for e in feedparser.parse(client.get(url).content).entries]

        assert len(head(rss)) == len(head(atom)) == 5
        change = web.advance_day(changed=0.3, new=0.05, gone=0)
        listed = set(truth.feed_urls())
        new = [u for u in change.new["f"] if u in listed]
        edited = [u for u in change.changed["f"] if u in listed]
        assert new and edited
        assert set(head(rss)) >= set(new[:5])  # RSS: by publication, new entries on top
        assert set(head(atom)) <= set(new) | set(edited)  # Atom: by update, edited entries move up too
        assert set(head(atom)) & set(edited)


def test_archived_feeds_chain_fixed_documents_by_prev_archive(make_web):
    web = make_web([HostSpec("r", pages=60, feed_entries=8, feed_paging="archive")], seed=4)
    truth = web.truth["r"]
    with httpx.Client() as client:
        for url in truth.feed_documents():
            links: set[str] = set()
            archives = 0
            current: str | None = url
            while current is not None:
                parsed = feedparser.parse(client.get(current).content)
                links |= {e.link.split("?")[0] for e in parsed.entries}
                current = next((link.href for link in parsed.feed.links if link.rel == "prev-archive"), None)
                archives += current is not None
            assert archives >= 3
            assert links == set(truth.feed_urls())


def _hrefs(html: str) -> list[str]:
    return [h.strip().replace("&amp;", "&") for h in re.findall(r'href="([^"]*)"', html)]


def _canonical_detail_links(base: str, html: str, origin: str) -> set[str]:
    out = set()
    for h in _hrefs(html):
        u = httpx.URL(base).join(h)
        out.add(f"{origin}{u.path}")
    return out


def test_listing_pages_paginate_and_reach_exactly_the_listed_details(paged: TestWeb, client: httpx.Client):
    t = paged.truth["l"]
    origin = paged.origin("l")
    seen: set[str] = set()
    pages = 0
    for first in [u for u in t.listing_urls() if "page=" not in u]:
        url: str | None = first
        while url:
            r = client.get(url)
            assert r.status_code == 200
            pages += 1
            seen |= _canonical_detail_links(url, r.text, origin)
            m = re.search(r'<a rel="next" href="([^"]+)"', r.text)
            url = str(httpx.URL(url).join(m.group(1).replace("&amp;", "&"))) if m else None
    assert pages == len(t.listing_urls()) > 8
    listed = set(t.listed_urls())
    assert listed <= seen
    assert not (set(t.sitemap_only()) | set(t.feed_only())) & seen


def test_detail_pages_are_realistic_html(test_web: TestWeb, client: httpx.Client):
    spec = test_web.spec("a")
    for url in test_web.truth["a"].detail_urls()[:10]:
        html = client.get(url).text
        assert spec.page_bytes[0] * 0.9 <= len(html.encode()) <= spec.page_bytes[1] * 1.1
        assert '<html lang="en">' in html
        assert f'<link rel="canonical" href="{url}">' in html
        assert '"@type": "Article"' in html
        assert '<meta name="description"' in html
        assert "<main>" in html
        assert "<footer>" in html


def test_links_come_in_many_spellings(paged: TestWeb, client: httpx.Client):
    hrefs: list[str] = []
    for url in paged.truth["l"].listing_urls() + paged.truth["l"].detail_urls()[:20]:
        hrefs += _hrefs(client.get(url).text)
    origin = paged.origin("l")
    assert any("utm_" in h for h in hrefs)
    assert any("#" in h for h in hrefs)
    assert any(h.startswith("HTTP://") for h in hrefs)
    assert any(h.startswith(("../", "./")) for h in hrefs)
    assert any(h.startswith("//") for h in hrefs)
    assert any("/./" in h for h in hrefs)
    assert any(h.startswith(origin) for h in hrefs)
    assert any("page=" in h and h.index("page=") < h.index("order=") for h in hrefs if "order=" in h)


def test_unknown_path_is_404_and_head_has_no_body(test_web: TestWeb, client: httpx.Client):
    assert client.get(test_web.url("a", "/no/such/page")).status_code == 404
    url = test_web.truth["a"].detail_urls()[0]
    r = client.head(url)
    assert r.status_code == 200
    assert r.content == b""
    assert int(r.headers["content-length"]) > 5000


def test_requests_are_recorded_with_their_headers(make_web):
    web = make_web([HostSpec("x", pages=10)])
    url = web.truth["x"].detail_urls()[0]
    with httpx.Client(headers={"User-Agent": "probe/1.0"}) as c:
        etag = c.get(url).headers["etag"]
        c.get(url, headers={"If-None-Match": etag, "If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})
    first, second = web.records()
    assert (first.host, first.method, first.status, first.user_agent) == ("x", "GET", 200, "probe/1.0")
    assert first.url == url
    assert first.bytes > 5000
    assert first.end >= first.start
    assert second.status == 304
    assert second.if_none_match == etag
    assert second.if_modified_since == "Mon, 01 Jan 2001 00:00:00 GMT"
    assert first.if_none_match is None
    web.clear_records()
    assert web.records() == []


async def test_in_flight_is_counted_under_concurrency(make_web):
    web = make_web([HostSpec("slow", pages=20, latency_s=0.2), HostSpec("other", pages=5)])
    urls = web.truth["slow"].detail_urls()[:6]
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=10)) as c:
        await asyncio.gather(*(c.get(u) for u in urls), c.get(web.url("other")))
    recs = web.records()
    assert max_in_flight(recs, "slow") == 6
    assert max_in_flight(recs, "other") == 1
    assert sorted(r.in_flight for r in recs if r.host == "slow") == [1, 2, 3, 4, 5, 6]


async def test_sequential_requests_never_overlap(make_web):
    web = make_web([HostSpec("slow", pages=20, latency_s=0.02)])
    async with httpx.AsyncClient() as c:
        for u in web.truth["slow"].detail_urls()[:4]:
            await c.get(u)
    assert max_in_flight(web.records(), "slow") == 1  # control for the test above


def test_process_mode_serves_and_records_like_thread_mode(make_web):
    specs = [HostSpec("p", pages=15, robots=RobotsSpec(crawl_delay=0.5)), HostSpec("q", pages=5)]
    thread = make_web(specs, seed=7)
    proc = make_web(specs, seed=7, mode="process")
    with httpx.Client() as c:
        for web in (thread, proc):
            for path in ("/robots.txt", "/sitemap_index.xml", "/feeds/rss.xml"):
                r = c.get(web.url("p", path))
                assert r.status_code == 200
            url = web.truth["p"].detail_urls()[2]
            etag = c.get(url).headers["etag"]
            assert c.get(url, headers={"If-None-Match": etag}).status_code == 304
    t_paths = [(r.path, r.status) for r in thread.records()]
    p_paths = [(r.path, r.status) for r in proc.records()]
    assert t_paths == p_paths
    assert [u.rsplit(":", 1)[1].split("/", 1)[1] for u in thread.truth["p"].detail_urls()] == [
        u.rsplit(":", 1)[1].split("/", 1)[1] for u in proc.truth["p"].detail_urls()
    ]
    assert count_status(proc.records(), 304) == 1
    assert proc.server_cpu_s() is not None
    assert proc.server_cpu_s() > 0
    t_change, p_change = thread.advance_day(changed=0.2), proc.advance_day(changed=0.2)
    strip = lambda urls: [u.split("/", 3)[3] for u in urls]  # noqa: E731
    assert strip(t_change.changed["p"]) == strip(p_change.changed["p"])
    assert p_change.changed["p"]
    assert proc.truth["p"].changed() == list(p_change.changed["p"])


def read_responses(sock, n: int) -> list[tuple[int, bytes]]:
    """Read ``n`` Content-Length framed responses off a raw socket."""
    buf, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in buf:
            buf += sock.recv(65536)
        head, buf = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?im)^content-length: *(\d+)", head)
        length = int(m.group(1)) if m else 0
        while len(buf) < length:
            buf += sock.recv(65536)
        out.append((status, buf[:length]))
        buf = buf[length:]
    return out


def test_keep_alive_and_pipelining_answer_in_order(test_web: TestWeb):
    import socket

    port = int(test_web.origin("b").rsplit(":", 1)[1])  # b has latency: answers go through the queue
    detail = test_web.truth["b"].detail_urls()[0].split(str(port), 1)[1]
    paths = ["/robots.txt", "/", "/no-such", detail, "/robots.txt"]
    req = b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for p in paths)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(req)
        got = read_responses(s, len(paths))
    assert [st for st, _ in got] == [200, 200, 404, 200, 200]
    assert got[0][1] == got[4][1]
    assert got[0][1].startswith(b"# robots.txt")
    assert b"<article>" in got[3][1]


def test_without_link_spellings_every_detail_link_is_canonical(make_web):
    web = make_web([HostSpec("s", pages=40, link_spellings=False)])
    t = web.truth["s"]
    details = set(t.detail_urls())
    with httpx.Client() as c:
        links = [h for u in t.listing_urls() + t.detail_urls()[:10] for h in _hrefs(c.get(u).text)]
    to_details = [h for h in links if h.split("#")[0].split("?")[0].strip() in details or "/./" in h]
    assert to_details
    assert all(h in details for h in to_details)


def test_process_mode_times_compare_with_the_parent_clock(make_web):
    import time

    web = make_web([HostSpec("p", pages=5)], mode="process")
    with httpx.Client() as c:
        before = time.monotonic()
        c.get(web.url("p", "/robots.txt"))
        after = time.monotonic()
    (r,) = web.records()
    # ``end`` is stamped after the last write, so the client may already hold the answer: only ``start`` is
    # bracketed by this process's clock readings.
    assert before <= r.start <= after
    assert r.start <= r.end


def test_specs_are_validated():
    with pytest.raises(ValueError, match="add up"):
        HostSpec("x", sitemap_only=0.6, feed_only=0.5)
    with pytest.raises(ValueError, match="unique"):
        TestWeb([HostSpec("x"), HostSpec("x")])
    with pytest.raises(RuntimeError, match="not started"):
        TestWeb([HostSpec("x")]).records()


def test_gone_pages_come_back_in_a_new_version_in_both_modes(make_web):
    """``advance_day(returned=...)``: pages gone on earlier days answer 200 again, in a new version, and are
    published again (the same in a child process as in a thread)."""
    for mode in ("thread", "process"):
        web = make_web([HostSpec("p", pages=20, sitemap_only=1.0, feed_only=0.0, listing_only=0.0,
                                 disallowed_in_sitemap=0.0)], seed=3, mode=mode)
        with httpx.Client() as c:
            before = {url: c.get(url).headers["etag"] for url in web.truth["p"].detail_urls()}
            went = web.advance_day(changed=0.0, new=0.0, gone=0.2).all("gone")
            assert went and all(c.get(url).status_code == 410 for url in went), mode
            back = web.advance_day(changed=0.0, new=0.0, gone=0.0, returned=1.0).all("returned")
            assert back == went, mode
            for url in back:
                answer = c.get(url)
                assert answer.status_code == 200 and answer.headers["etag"] != before[url], (mode, url)
                assert web.truth["p"].model.by_path["/" + url.split("/", 3)[3]].in_sitemap, (mode, url)
