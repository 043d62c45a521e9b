"""Every way a URL enters the harvester survives any Unicode text, lone surrogates included (issue 20, item 4).

Hypothesis's ``st.text()`` leaves out surrogates unless asked: ``_ANY`` asks. A JSON Feed item can carry "\\ud800",
which has no UTF-8 form; before the fix canonicalization raised UnicodeEncodeError instead of dropping the URL.
"""

from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import escape

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harvester.discovery.feeds import parse_feed
from harvester.discovery.listings import extract_links
from harvester.discovery.sitemaps import parse_sitemap
from harvester.errors import ContentRejected, NotASitemap
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.rules.scope import UrlFilter
from harvester.rules.urls import Canonicalizer, canonicalize
from harvester.settings import Settings

SETTINGS = Settings()
URLS = SETTINGS.urls
SEED = "http://a.org/"

_ANY = st.text(st.characters(exclude_categories=()), max_size=40)
"""Any code point, surrogates (category Cs) included."""


def _candidates(text: str) -> list[str]:
    return [text, SEED + text, "https://" + text, SEED + "x?q=" + text, "http://" + text + "@a.org/",
            "http://a.org:" + text, "http://[" + text + "]/"]


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_ANY, _ANY)
@example("\ud800", "")
@example("&0\x85", "")  # U+0085 at the end: trimmed from the key, once kept in the fetch form
@example("x\udfff", "\ud800")
@example("é\ud800", "http://a.org/\ud800/")
def test_canonicalize_and_the_filter_never_raise(text: str, other: str) -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    url_filter = UrlFilter(SETTINGS, seeds=[SEED])
    for candidate in _candidates(text):
        for base in (None, SEED, other, SEED + other):
            once = canonicalize(candidate, base=base, settings=URLS)
            assert canonicalizer.slow(candidate.strip(), base) == canonicalizer(candidate, base)
            if once is not None:
                once.encode("utf-8")  # a key always has a UTF-8 form
                assert canonicalize(once, settings=URLS) == once
                url_filter.check(once)
                url_filter.check(once, trusted=True)
                # The fetch form never raises, names the same key, and only its query's order may differ.
                fetch = canonicalizer.fetch_form(candidate, base)
                assert fetch is not None and canonicalize(fetch, settings=URLS) == once
                assert fetch.partition("?")[0] == once.partition("?")[0]
                assert sorted(fetch.partition("?")[2].split("&")) == sorted(once.partition("?")[2].split("&"))


def test_a_lone_surrogate_is_dropped_not_raised() -> None:
    assert canonicalize("https://a.org/\ud800", settings=URLS) is None
    assert canonicalize("\ud800", base="https://a.org/x", settings=URLS) is None
    assert canonicalize("https://a.org/x", base="https://a.org/\ud800", settings=URLS) == "https://a.org/x"
    # Control: the same URL without the surrogate is kept.
    assert canonicalize("https://a.org/\u00e9", settings=URLS) == "https://a.org/%C3%A9"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_ANY)
@example("\ud800")
@example("/\udfff?x=1")
def test_the_json_feed_parser_drops_what_has_no_utf8_form(text: str) -> None:
    body = json.dumps({
        "version": "https://jsonfeed.org/version/1.1", "next_url": text,
        "items": [{"url": text}, {"url": SEED + text}, {"external_url": "https://" + text}],
    }).encode("ascii")
    doc = parse_feed(body, url=SEED + "feed.json")
    for link in [entry.link for entry in doc.entries] + [doc.next_page, doc.prev_archive]:
        if link is not None:
            link.encode("utf-8")
            canonicalize(link, settings=URLS)


def test_a_json_feed_item_with_a_lone_surrogate_is_counted_as_invalid() -> None:
    body = json.dumps({
        "version": "https://jsonfeed.org/version/1.1", "next_url": "/page/\ud800",
        "items": [{"url": "https://a.org/\ud800"}, {"url": "https://a.org/ok"}],
    }).encode("ascii")
    doc = parse_feed(body, url=SEED + "feed.json")
    assert [entry.link for entry in doc.entries] == ["https://a.org/ok"]
    assert doc.next_page is None
    assert any("1 entries without an absolute http(s) link" in p for p in doc.problems)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)  # never raising, untimed
@given(_ANY)
@example("\ud800")
def test_the_sitemap_and_listing_parsers_never_raise(text: str) -> None:
    raw = escape(text, {'"': "&quot;"}).encode("utf-8", "surrogatepass")
    xml = (b'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
           b"<url><loc>" + raw + b"</loc></url><url><loc>http://a.org/" + raw + b"</loc></url></urlset>")
    bodies = [xml, raw, b"http://a.org/" + raw + b"\n" + raw]
    for body in bodies:
        for parser in ("auto", "usp"):
            try:
                doc = parse_sitemap(body, url=SEED + "s.xml", settings=SETTINGS.discovery, parser=parser)
            except (ContentRejected, NotASitemap):
                continue
            for entry in doc.entries:
                entry.loc.encode("utf-8")
                canonicalize(entry.loc, settings=URLS)
    page = extract_links(b'<a href="' + raw + b'">x</a><a href="/' + raw + b'">y</a>', base_url=SEED)
    for link in page.links + page.next_pages + page.feeds:
        link.encode("utf-8")
        canonicalize(link, settings=URLS)


def test_store_writes_take_every_canonical_form_of_any_text(tmp_path: Path) -> None:
    """What canonicalization lets through, a real SQLite frontier stores and gives back unchanged."""
    with FrontierStore.open(Settings(database_url=f"sqlite:///{tmp_path}/f.db"), upgrade=True) as store:

        @settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
        @given(_ANY)
        @example("\ud800")
        @example("é[1] b%zz")
        def write(text: str) -> None:
            found = {c for candidate in _candidates(text) if (c := canonicalize(candidate, settings=URLS))}
            batch = [DiscoveredUrl(url, UrlKind.DETAIL, "sitemap:" + SEED + "s.xml") for url in sorted(found)]
            store.add_discovered(batch)
            assert store.known_urls(sorted(found)) == found

        write()
