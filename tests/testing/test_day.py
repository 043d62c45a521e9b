"""advance_day: the right fractions change, appear and vanish; documents change only when their content does."""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET

import httpx

from harvester.testing import HostSpec

SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def sitemap_locs(client: httpx.Client, web, name: str) -> set[str]:
    out: set[str] = set()
    for url in web.truth[name].sitemap_documents()[1:]:
        data = client.get(url).content
        if url.endswith(".gz"):
            data = gzip.decompress(data)
        out |= {e.text or "" for e in ET.fromstring(data).iter(f"{SM}loc")}
    return out


def test_day_changes_the_asked_fractions_and_pages_answer_accordingly(make_web):
    web = make_web([HostSpec("d", pages=100)], seed=5)
    t = web.truth["d"]
    with httpx.Client() as c:
        before = {u: c.get(u).headers for u in t.detail_urls()}
        change = web.advance_day(changed=0.1, new=0.05, gone=0.04)
        changed, new, gone = change.changed["d"], change.new["d"], change.gone["d"]
        assert (len(changed), len(new), len(gone)) == (10, 5, 4)
        assert not set(changed) & set(gone)
        assert set(t.changed()) == set(changed)
        for url in gone:
            assert c.get(url).status_code == 410
        for url in changed:
            r = c.get(url, headers={"If-None-Match": before[url]["etag"]})
            assert r.status_code == 200
            assert r.headers["etag"] != before[url]["etag"]
            assert c.get(url, headers={"If-Modified-Since": before[url]["last-modified"]}).status_code == 200
        unchanged = [u for u in before if u not in changed and u not in gone]
        assert len(unchanged) == 86
        for url in unchanged:  # the per-request ad block differs, the validators do not
            assert c.get(url, headers={"If-None-Match": before[url]["etag"]}).status_code == 304
            assert c.get(url, headers={"If-Modified-Since": before[url]["last-modified"]}).status_code == 304
        for url in new:
            assert c.get(url).status_code == 200
        assert set(t.detail_urls()) == (set(before) - set(gone)) | set(new)
        locs = sitemap_locs(c, web, "d")
        assert not locs & set(gone)
        assert {u for u in new if u in t.sitemap_urls()} <= locs
        assert locs == set(t.sitemap_urls())


def test_changed_main_text_differs_and_unchanged_main_text_does_not(make_web):
    web = make_web([HostSpec("d", pages=30)], seed=2)
    with httpx.Client() as c:
        urls = web.truth["d"].detail_urls()
        first = {u: c.get(u).text for u in urls}
        change = web.advance_day(changed=0.2, new=0, gone=0)

        def article(html: str) -> str:
            return html.split("<article>", 1)[1].split("</article>", 1)[0]

        for u in urls:
            again = c.get(u).text
            assert again != first[u]  # the ad block differs per request, always
            assert (article(again) != article(first[u])) == (u in change.changed["d"])


def test_unchanged_day_leaves_every_document_answering_304(make_web):
    web = make_web([HostSpec("d", pages=60, sitemap_children=3)], seed=3)
    t = web.truth["d"]
    docs = t.sitemap_documents() + t.feed_documents() + t.listing_urls() + [web.url("d", "/robots.txt")]
    with httpx.Client() as c:
        seen = {u: c.get(u).headers for u in docs}
        web.advance_day(changed=0, new=0, gone=0)
        for u in docs:
            assert c.get(u, headers={"If-None-Match": seen[u]["etag"]}).status_code == 304, u
            assert c.get(u, headers={"If-Modified-Since": seen[u]["last-modified"]}).status_code == 304, u


def test_sitemaps_change_only_where_their_content_changed(make_web):
    web = make_web([HostSpec("d", pages=60, sitemap_children=3, sitemap_only=0.5)], seed=4)
    t = web.truth["d"]
    index, *children = t.sitemap_documents()
    with httpx.Client() as c:
        seen = {u: c.get(u).headers for u in [index, *children, *t.feed_documents()]}
        change = web.advance_day(changed=0, new=0.1, gone=0)  # new pages join the last child only
        assert change.new["d"]
        assert any(u in t.sitemap_urls() for u in change.new["d"])

        def status(u: str, header: str, key: str) -> int:
            return c.get(u, headers={header: seen[u][key]}).status_code

        for child in children[:-1]:
            assert status(child, "If-None-Match", "etag") == 304
            assert status(child, "If-Modified-Since", "last-modified") == 304
        assert status(children[-1], "If-None-Match", "etag") == 200  # control: the changed child is new
        assert status(children[-1], "If-Modified-Since", "last-modified") == 200
        assert status(index, "If-None-Match", "etag") == 200  # its lastmod for the last child moved
        if any(u in t.feed_urls() for u in change.new["d"]):
            assert status(t.feed_documents()[0], "If-None-Match", "etag") == 200


def test_days_are_deterministic_from_the_seed(make_web):
    a = make_web([HostSpec("d", pages=50)], seed=9)
    b = make_web([HostSpec("d", pages=50)], seed=9)
    other = make_web([HostSpec("d", pages=50)], seed=10)

    def paths(web, ch) -> list[str]:
        return [u.split("/", 3)[3] for u in ch.changed["d"] + ch.new["d"] + ch.gone["d"]]

    ca, cb, co = (w.advance_day(changed=0.2, new=0.1, gone=0.1) for w in (a, b, other))
    assert paths(a, ca) == paths(b, cb)
    assert paths(a, ca) != paths(other, co)  # control: the seed matters
