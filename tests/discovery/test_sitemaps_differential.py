"""The streaming lxml path and ultimate-sitemap-parser produce identical entries: the proof that lets lxml be
the default. Differences are allowed only where usp is documented wrong, and each one is pinned here."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.discovery.sitemap_model import SitemapDoc, SitemapEntry
from harvester.discovery.sitemaps import parse_sitemap
from harvester.settings import DiscoverySettings

DATA = Path(__file__).resolve().parent.parent / "data"
SETTINGS = DiscoverySettings()

URLSET_SAMPLES = sorted(
    p.name for p in (DATA / "sitemaps").iterdir() if p.suffix in (".xml", ".txt") and "_as_sitemap" not in p.name
)


def both(body: bytes, url: str = "https://x.example/sitemap.xml") -> tuple[tuple[SitemapDoc, list[SitemapEntry]], ...]:
    out = []
    for parser in ("lxml", "usp"):
        doc = parse_sitemap(body, url=url, settings=SETTINGS, parser=parser)  # type: ignore[arg-type]
        out.append((doc, list(doc.entries)))
    return tuple(out)


def without_usp_defects(entries: list[SitemapEntry]) -> list[SitemapEntry]:
    """Known usp defects, normalized away on the lxml side only for the comparison:
    - usp never reads <news:genres> (no branch for it in PagesXMLSitemapParser.xml_element_end)."""
    out = []
    for entry in entries:
        if entry.news is not None and entry.news.get("genres"):
            entry = entry._replace(news={**entry.news, "genres": []})
        out.append(entry)
    return out


@pytest.mark.parametrize("name", URLSET_SAMPLES)
def test_samples_identical(name: str) -> None:
    body = (DATA / "sitemaps" / name).read_bytes()
    (lx_doc, lx), (usp_doc, us) = both(body)
    assert lx_doc.kind == usp_doc.kind
    assert lx_doc.children == usp_doc.children
    if name == "shop_products.xml":
        # usp's html.unescape reads "&curren" and "&not" (legacy entities without ";") in "&currency=EUR&notify=1"
        # as "¤" and "¬"; the differing entries are those two (one in CDATA, where the '&' is well-formed text).
        diff = [(a.loc, b.loc) for a, b in zip(lx, us, strict=True) if a != b]
        assert diff == [
            (
                "https://shop.example.com/products/gift-card-25?amount=25&currency=EUR",
                "https://shop.example.com/products/gift-card-25?amount=25¤cy=EUR",
            ),
            (
                "https://shop.example.com/products/gift-card-50?amount=50&currency=EUR&notify=1",
                "https://shop.example.com/products/gift-card-50?amount=50¤cy=EUR¬ify=1",
            )
        ]
        return
    assert without_usp_defects(lx) == us
    assert len(lx) > 0 or lx_doc.kind == "index"


@pytest.mark.parametrize("name", URLSET_SAMPLES)
def test_gzipped_samples_identical(name: str) -> None:
    body = (DATA / "sitemaps" / name).read_bytes()
    (_, plain), _ = both(body)
    (_, lx), (_, us) = both(gzip.compress(body))
    assert lx == plain
    if name != "shop_products.xml":
        assert without_usp_defects(lx) == us


def test_control_the_comparison_can_fail() -> None:
    """A mutated body really changes the entries: the equality above is not vacuous."""
    body = (DATA / "sitemaps" / "wordpress_posts.xml").read_bytes()
    (_, lx), _ = both(body)
    (_, mutated), _ = both(body.replace(b"2026-04-18T08:00:00", b"2026-04-18T08:00:01"))
    assert lx != mutated


def test_usp_mangles_parameters_named_like_legacy_entities() -> None:
    body = b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>https://h.example/?id=1&amp;amp=2</loc></url></urlset>'
    (_, lx), (_, us) = both(body)
    assert [e.loc for e in lx] == ["https://h.example/?id=1&amp=2"]
    assert [e.loc for e in us] == ["https://h.example/?id=1&=2"]


def test_news_genres_are_the_only_news_difference() -> None:
    (_, lx), (_, us) = both((DATA / "sitemaps" / "news.xml").read_bytes())
    assert lx != us
    assert without_usp_defects(lx) == us


# --- generated urlsets -------------------------------------------------------------------------------------

_loc_path = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_./~%", min_size=0, max_size=30)
_query = st.lists(
    # No names starting with an HTML legacy entity ("amp", "not", "copy"...): usp mangles those (pinned below).
    st.tuples(st.sampled_from(["id", "page", "q", "lang", "x"]), st.text(alphabet="abc123", max_size=4)),
    max_size=3,
).map(lambda pairs: "&amp;".join(f"{k}={v}" for k, v in pairs))
_lastmod = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "2026-05-01",
            "2026-05-01T10:20:30Z",
            "2026-05-01T10:20:30+02:00",
            "2026-05-01T10:20:30.123456-07:00",
            "2026-05-01T10:20Z",
            "1999-12-31T23:59:59+00:00",
            "garbage",
            "",
        ]
    ),
)
_changefreq = st.one_of(st.none(), st.sampled_from(["daily", "WEEKLY", "Monthly", "never", "sometimes", ""]))
_priority = st.one_of(st.none(), st.sampled_from(["0.0", "0.5", "1.0", ".8", "1.5", "-1", "abc", "0.25", ""]))


@st.composite
def url_elements(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["https", "http", "javascript", ""]))
    path = draw(_loc_path)
    query = draw(_query)
    loc = (f"{scheme}://h{draw(st.integers(0, 3))}.example/{path}" if scheme else f"/{path}") + (
        f"?{query}" if query else ""
    )
    pad = draw(st.sampled_from(["", " ", "\n  "]))
    parts = [f"<loc>{pad}{loc}{pad}</loc>"]
    lastmod, changefreq, priority = draw(_lastmod), draw(_changefreq), draw(_priority)
    if lastmod is not None:
        parts.append(f"<lastmod>{lastmod}</lastmod>")
    if changefreq is not None:
        parts.append(f"<changefreq>{changefreq}</changefreq>")
    if priority is not None:
        parts.append(f"<priority>{priority}</priority>")
    if draw(st.booleans()):
        parts.append(f"<image:image><image:loc>https://img.example/{path}.jpg</image:loc></image:image>")
    if draw(st.booleans()):
        parts.append(
            "<news:news><news:publication><news:name>N</news:name><news:language>en</news:language>"
            f"</news:publication><news:publication_date>{lastmod or '2026-01-01'}</news:publication_date>"
            f"<news:title>T {path}</news:title><news:keywords>a, b</news:keywords></news:news>"
        )
    return "<url>" + "".join(draw(st.permutations(parts))) + "</url>"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(url_elements(), min_size=1, max_size=30))
def test_generated_urlsets_identical(elements: list[str]) -> None:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:news="http://www.google.com/schemas/sitemap-news/0.9" '
        'xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">\n' + "\n".join(elements) + "\n</urlset>\n"
    ).encode()
    (lx_doc, lx), (usp_doc, us) = both(body)
    assert lx == us
    assert lx_doc.counts == usp_doc.counts or lx_doc.counts["kept"] == usp_doc.counts["kept"]


# --- the test web ------------------------------------------------------------------------------------------


def test_test_web_sitemaps_identical(test_web) -> None:  # type: ignore[no-untyped-def]
    import httpx

    compared = 0
    with httpx.Client(timeout=30) as client:
        for name in test_web.truth:
            truth = test_web.truth[name]
            for url in truth.sitemap_documents():
                response = client.get(url)
                assert response.status_code == 200
                (lx_doc, lx), (usp_doc, us) = both(response.content, url)
                assert lx_doc.kind == usp_doc.kind
                assert lx_doc.children == usp_doc.children
                assert lx == us
                compared += len(lx) + len(lx_doc.children)
            docs = truth.sitemap_documents()
            if docs:
                entries = set()
                for url in docs[1:]:
                    doc = parse_sitemap(client.get(url).content, url=url, settings=SETTINGS)
                    entries |= {e.loc for e in doc.entries}
                # Every sitemap-published page is found (disallowed ones included: robots is the caller's job).
                assert set(truth.sitemap_urls()) <= entries
    assert compared > 50
