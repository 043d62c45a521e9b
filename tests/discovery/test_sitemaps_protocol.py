"""sitemaps.org protocol cases (tests/data/sitemaps/protocol/, each file names its source), namespace leniency
(issue 20 item 5) and documents that end early (item 3): only entries whose end tag came are ever read."""

from __future__ import annotations

import gzip
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harvester.discovery.feeds import parse_feed
from harvester.discovery.sitemap_model import SitemapDoc, SitemapEntry
from harvester.discovery.sitemaps import parse_sitemap
from harvester.rules.scope import UrlFilter
from harvester.rules.urls import canonicalize
from harvester.settings import DiscoverySettings, Settings

PROTOCOL = Path(__file__).resolve().parent.parent / "data" / "sitemaps" / "protocol"
SETTINGS = DiscoverySettings()
PARSERS = ["auto", "lxml", "usp"]
NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def parse(body: bytes, parser: str = "auto", settings: DiscoverySettings = SETTINGS,
          url: str = "https://www.example.com/sitemap.xml") -> tuple[SitemapDoc, list[SitemapEntry]]:
    doc = parse_sitemap(body, url=url, settings=settings, parser=parser)  # type: ignore[arg-type]
    return doc, list(doc.entries)


# --- item 5: namespace resets and foreign namespaces -------------------------------------------------------


@pytest.mark.parametrize("parser", ["auto", "lxml"])
def test_url_elements_that_reset_the_namespace_are_read_and_reported(parser: str) -> None:
    doc, entries = parse((PROTOCOL / "namespace_reset.xml").read_bytes(), parser)
    assert [e.loc for e in entries] == [f"https://www.example.com/{p}" for p in ("reset/1", "reset/2", "proper")]
    assert entries[0].lastmod == datetime(2024, 5, 1, tzinfo=UTC)
    assert doc.counts["foreign_namespace"] == 2
    assert any("2 <url> elements outside the sitemaps.org namespace" in p for p in doc.problems)


def test_children_in_another_namespace_are_read_and_a_proper_loc_wins() -> None:
    doc, entries = parse((PROTOCOL / "wrong_namespace_children.xml").read_bytes())
    assert [e.loc for e in entries] == [
        "https://www.example.com/other-ns", "https://www.example.com/right", "https://www.example.com/right-first"]
    assert doc.counts["foreign_namespace"] == 1
    assert any("incorrect namespace" in p for p in doc.problems)


def test_index_children_that_reset_the_namespace_are_followed() -> None:
    doc, _ = parse((PROTOCOL / "index_namespace_reset.xml").read_bytes())
    assert doc.kind == "index"
    assert doc.children == ["https://www.example.com/s1.xml", "https://www.example.com/s2.xml"]
    assert doc.child_lastmod["https://www.example.com/s1.xml"] == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert any("1 <sitemap> elements outside the sitemaps.org namespace" in p for p in doc.problems)


def test_a_proper_sitemap_reports_no_namespace_problem() -> None:
    """Control: the leniency says nothing about a file in the right namespace, extensions included."""
    body = (f'<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"><url><loc>https://www.'
            "example.com/a</loc><image:image><image:loc>https://www.example.com/i.png</image:loc></image:image>"
            "</url></urlset>").encode()
    doc, entries = parse(body)
    assert [e.loc for e in entries] == ["https://www.example.com/a"]
    assert entries[0].images == ["https://www.example.com/i.png"]
    assert doc.problems == []


def test_url_elements_without_loc_are_counted_as_skipped() -> None:
    doc, entries = parse(f"<urlset {NS}><url></url><url><lastmod>2024</lastmod></url><url><loc>https://www.example"
                         ".com/a</loc></url></urlset>".encode(), "lxml")
    assert [e.loc for e in entries] == ["https://www.example.com/a"]
    assert doc.counts["without_loc"] == 2
    assert "2 <url> elements without a <loc> skipped" in doc.problems


# --- sitemaps.org protocol --------------------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_entities_in_loc_are_decoded_once(parser: str) -> None:
    _, entries = parse((PROTOCOL / "entities_in_loc.xml").read_bytes(), parser)
    assert [e.loc for e in entries] == [
        "http://www.example.com/view.html?item=12&desc=vacation_hawaii",
        "http://www.example.com/q?x='a'&y=\"b\"",
        "http://www.example.com/cmp?a=<1>",
        "http://www.example.com/\u00fcmlat-d\u00fc",
    ]
    assert canonicalize(entries[1].loc, settings=Settings().urls) == "http://www.example.com/q?x='a'&y=%22b%22"


@pytest.mark.parametrize("parser", PARSERS)
def test_lastmod_in_every_w3c_datetime_precision(parser: str) -> None:
    _, entries = parse((PROTOCOL / "lastmod_w3c.xml").read_bytes(), parser)
    got = {e.loc.rsplit("/", 1)[1]: e.lastmod for e in entries}
    if parser != "usp":  # usp reads YYYY and YYYY-MM its own way; the harvester's parsers take the first day
        assert got["y"] == datetime(1997, 1, 1, tzinfo=UTC)
        assert got["ym"] == datetime(1997, 7, 1, tzinfo=UTC)
    assert got["ymd"] == datetime(1997, 7, 16, tzinfo=UTC)
    assert got["hm"] == datetime(1997, 7, 16, 18, 20, tzinfo=UTC)
    assert got["hms"] == datetime(1997, 7, 16, 18, 20, 30, tzinfo=UTC)
    assert got["frac"] == datetime(1997, 7, 16, 18, 20, 30, 450000, tzinfo=UTC)
    assert got["zulu"] == datetime(2005, 1, 1, tzinfo=UTC)
    assert got["bad"] is None


def test_a_loc_on_another_host_is_read_and_refused_by_scope() -> None:
    _, entries = parse((PROTOCOL / "other_host.xml").read_bytes(), url="http://example.com/catalog/sitemap.xml")
    assert len(entries) == 2
    url_filter = UrlFilter(Settings(), seeds=["http://example.com/"])
    verdicts = [url_filter.check(canonicalize(e.loc, settings=Settings().urls) or "") for e in entries]
    assert [v.value if v else None for v in verdicts] == [None, "out_of_scope"]


def test_index_and_urlset_gzipped_or_not_read_alike() -> None:
    for name in ("index_namespace_reset.xml", "entities_in_loc.xml"):
        body = (PROTOCOL / name).read_bytes()
        plain, plain_entries = parse(body)
        zipped, zipped_entries = parse(gzip.compress(body))
        assert (plain.kind, plain.children, plain_entries) == (zipped.kind, zipped.children, zipped_entries)


def test_the_50000_url_limit_keeps_the_first_50000() -> None:
    body = f"<urlset {NS}>".encode() + b"".join(
        f"<url><loc>https://www.example.com/p{i}</loc></url>".encode() for i in range(50_001)) + b"</urlset>"
    doc, entries = parse(body)
    assert len(entries) == 50_000 and entries[-1].loc == "https://www.example.com/p49999"
    assert doc.over_limit


# --- item 3: a document that ends early --------------------------------------------------------------------

LOCS = [f"https://www.example.com/news/article-{n}" for n in (1080, 1081, 1082)]
URLSET = (f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>\n'
          + "".join(f"<url><loc>{loc}</loc><lastmod>2024-05-0{i + 1}</lastmod></url>\n" for i, loc in enumerate(LOCS))
          + "</urlset>\n").encode()
PREFIXED = URLSET.replace(b"<urlset ", b"<sm:urlset ").replace(b"xmlns=", b"xmlns:sm=").replace(
    b"<url>", b"<sm:url>").replace(b"</url>", b"</sm:url>").replace(b"<loc>", b"<sm:loc>").replace(
    b"</loc>", b"</sm:loc>").replace(b"</urlset>", b"</sm:urlset>")
INDEX = (f"<sitemapindex {NS}>" + "".join(f"<sitemap><loc>{loc}.xml</loc></sitemap>" for loc in LOCS)
         + "</sitemapindex>").encode()


_ENTRY_START = re.compile(rb"<(?:sm:)?(?:url|sitemap)>")
_ENTRY_END = re.compile(rb"</(?:sm:)?(?:url|sitemap)>")


def _read(doc: SitemapDoc, entries: list[SitemapEntry]) -> list[str]:
    return doc.children if doc.kind == "index" else [e.loc for e in entries]


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(("body", "whole"), [
    pytest.param(URLSET, LOCS, id="urlset"),
    pytest.param(PREFIXED, LOCS, id="prefixed"),
    pytest.param(INDEX, [loc + ".xml" for loc in LOCS], id="index"),
])
def test_every_cut_of_a_sitemap_reads_only_whole_entries(parser: str, body: bytes, whole: list[str]) -> None:
    """Cut at every byte (a short download): what is read is a prefix of the whole, never a cut URL, and a cut
    that drops part of an entry is a problem and marks the document truncated."""
    for at in range(len(body)):
        doc, entries = parse(body[:at], parser)
        read = _read(doc, entries)
        assert read == whole[: len(read)], (at, read)
        opened = len(_ENTRY_START.findall(body, 0, at))
        if opened > len(_ENTRY_END.findall(body, 0, at)):  # cut inside an entry: dropped, and said so
            assert doc.truncated, at
            assert any("partial" in p for p in doc.problems), at


@pytest.mark.parametrize("parser", PARSERS)
def test_a_cut_inside_loc_never_yields_the_cut_text(parser: str) -> None:
    cut = URLSET[: URLSET.index(b"1081") + 3]
    doc, entries = parse(cut, parser)
    assert [e.loc for e in entries] == LOCS[:1]
    assert doc.truncated
    assert any("a partial <url> dropped" in p for p in doc.problems)


def test_the_byte_cap_cutting_inside_loc_keeps_only_whole_entries() -> None:
    cap = URLSET.index(b"1081") + 3
    doc, entries = parse(URLSET, settings=DiscoverySettings(max_sitemap_bytes=cap))
    assert [e.loc for e in entries] == LOCS[:1]
    assert doc.over_limit and doc.truncated
    assert any("cut at the cap" in p for p in doc.problems)
    assert any("a partial <url> dropped" in p for p in doc.problems)


def test_a_whole_document_is_not_truncated() -> None:
    """Control: the uncut file (and one with junk after its root) reads whole, with no problem."""
    for body in (URLSET, URLSET + b"<!-- generated in 0.2 s -->\n", URLSET + b"<div>PHP notice</div>"):
        doc, entries = parse(body, "lxml")
        assert [e.loc for e in entries] == LOCS
        assert not doc.truncated


def test_every_cut_of_a_gzipped_sitemap_reads_only_whole_entries() -> None:
    for body in (URLSET, "\n".join(LOCS).encode() + b"\n"):
        zipped = gzip.compress(body)
        for at in range(2, len(zipped)):  # from the gzip magic on (shorter is no gzip stream at all)
            doc, entries = parse(zipped[:at])
            read = [e.loc for e in entries]
            assert read == LOCS[: len(read)], (at, read)
            if at < len(zipped) - 8:  # the CRC and length trailer: a cut there loses no text
                assert doc.truncated, at
        assert parse(zipped)[0].truncated is False


def test_a_text_sitemap_cut_at_the_cap_drops_its_partial_line() -> None:
    body = "\n".join(LOCS).encode() + b"\n"
    cap = body.index(b"1081") + 3
    doc, entries = parse(body, settings=DiscoverySettings(max_sitemap_bytes=cap))
    assert [e.loc for e in entries] == LOCS[:1]
    assert any("partial last line dropped" in p for p in doc.problems)


def test_every_cut_of_a_feed_reads_only_whole_entries() -> None:
    """Feeds do not share the flaw (feedparser keeps an element's text only at its end tag): a guard."""
    feed = ('<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
            + "".join(f"<item><title>{i}</title><link>{loc}</link></item>" for i, loc in enumerate(LOCS))
            + "</channel></rss>").encode()
    for at in range(len(feed)):
        read = [e.link for e in parse_feed(feed[:at], url="https://www.example.com/feed").entries]
        assert read == LOCS[: len(read)], (at, read)
