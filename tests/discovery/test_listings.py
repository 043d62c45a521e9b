"""extract_links and LinkClassifier over real-world shaped pages, and against the test web with no configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from harvester.discovery._html import absolute_http, joined_http
from harvester.discovery.listings import extract_links
from harvester.records import UrlKind
from harvester.rules.classify import LinkClassifier, is_pagination, is_pagination_split, segment_shape
from harvester.rules.urls import canonicalize
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

DATA = Path(__file__).resolve().parent.parent / "data" / "html"
TRUTH = json.loads((DATA / "truth.json").read_text())
KIND = {"details": UrlKind.DETAIL, "listings": UrlKind.LISTING, "neither": None}


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_extract_links_on_samples(name: str) -> None:
    truth = TRUTH[name]
    page = extract_links((DATA / name).read_bytes(), base_url=truth["base_url"])
    assert page.canonical == truth["canonical"]
    assert page.feeds == truth["feeds"]
    assert page.next_pages == truth["next_pages"]
    assert page.nofollow == truth["nofollow"]
    links = set(page.links)
    # Every detail and listing link on the page was extracted, resolved against the right base.
    for url in truth["details"] + truth["listings"] + truth["neither"]:
        if url.startswith("https://news.example.net/") and url == "https://news.example.net/":
            continue
        assert url in links or url.lower() in {link.lower() for link in links}, url
    assert not [link for link in page.links if not link.startswith(("http://", "https://"))]
    assert len(page.links) == len(set(page.links))


def test_base_href_and_relative_forms() -> None:
    page = extract_links((DATA / "news_section.html").read_bytes(), base_url="https://news.example.net/world/x")
    assert page.base == "https://news.example.net/world/"
    assert "https://news.example.net/world/2026/05/31/summit-ends-without-agreement-5512" in page.links


def test_meta_robots_and_junk_hrefs() -> None:
    html = b"""<html><head><meta name="robots" content="noindex, nofollow"></head><body>
    <a href="javascript:void(0)">j</a><a href="mailto:x@y">m</a><a href="tel:+1">t</a><a href="#x">f</a>
    <a href=" /ok ">ok</a><a>no href</a><a href="">empty</a><a href="data:text/html,x">d</a></body></html>"""
    page = extract_links(html, base_url="https://h.example/a/")
    assert page.links == ["https://h.example/ok"]
    assert page.robots_nofollow
    assert page.robots_noindex


def test_latin1_without_charset_does_not_crash_and_decodes() -> None:
    page = extract_links((DATA / "latin1_listing.html").read_bytes(), base_url="https://rezepte.example.de/")
    assert "https://rezepte.example.de/rezepte/käsespätzle-mit-röstzwiebeln-412" in page.links
    assert page.next_pages == ["https://rezepte.example.de/rezepte/seite/2"]
    canonical = canonicalize(page.links[0], settings=Settings().urls)
    assert canonical == "https://rezepte.example.de/rezepte/k%C3%A4sesp%C3%A4tzle-mit-r%C3%B6stzwiebeln-412"


@pytest.mark.parametrize(
    ("header", "body", "expected"),
    [
        ("text/html; charset=windows-1251", "Привет".encode("cp1251"), "Привет"),
        (None, "日本".encode("shift_jis"), "日本"),
        ("text/html; charset=utf-8", "naïve".encode(), "naïve"),
        ("text/html; charset=bogus-charset", "naïve".encode(), "naïve"),
        (None, "naïve".encode("latin-1"), "naïve"),
    ],
)
def test_charsets(header: str | None, body: bytes, expected: str) -> None:
    meta = b'<meta charset="shift_jis">' if header is None and expected == "日本" else b""
    html = b"<html><head>" + meta + b'</head><body><a href="/' + body + b'">x</a></body></html>'
    page = extract_links(html, base_url="https://h.example/", content_type=header)
    assert page.links == [f"https://h.example/{expected}"]


def test_garbage_and_empty_pages() -> None:
    for body in (b"", b"   ", b"\x00\x01\x02", b"<<<>>>", b"<?xml version='1.0' encoding='utf-8'?><html/>"):
        page = extract_links(body, base_url="https://h.example/")
        assert page.links == []


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://h.example/list?page=2", True),
        ("https://h.example/list?order=recent&page=12", True),
        ("https://h.example/blog/page/3/", True),
        ("https://h.example/page-4", True),
        ("https://h.example/articles/page-turner-9", False),
        ("https://h.example/list?pages=2", False),
        ("https://h.example/p/12345/blue-widget", False),
        ("https://h.example/news/p/2", True),
        ("https://h.example/news?p=12", True),
        ("https://h.example/p/12345", False),  # a post id: no list runs to page 12,345 under the one-letter name
        ("https://h.example/?p=4711", False),
        ("https://h.example/archive/page/1500", True),  # the full word: any page number
    ],
)
def test_is_pagination(url: str, expected: bool) -> None:
    assert is_pagination(url) is expected


def test_a_post_id_under_p_is_an_item() -> None:
    classifier = LinkClassifier()
    assert classifier.classify("https://h.example/p/12345") is UrlKind.DETAIL
    assert classifier.classify("https://h.example/?p=4711") is UrlKind.DETAIL  # WordPress's plain permalink
    assert classifier.classify("https://h.example/?page_id=2") is UrlKind.DETAIL
    assert classifier.classify("https://h.example/?p=2") is UrlKind.DETAIL  # at the root a post (lists use ?paged=)
    assert classifier.classify("https://h.example/?paged=2") is UrlKind.LISTING
    assert classifier.classify("https://h.example/news?p=2") is UrlKind.LISTING  # elsewhere, a short p is a page
    assert classifier.classify("https://h.example/?cat=5") is UrlKind.LISTING  # a category archive
    assert classifier.classify("https://h.example/") is UrlKind.LISTING


def test_segment_shapes() -> None:
    assert segment_shape("my-great-post-123.html") == "a+-9.html"
    assert segment_shape("12345") == "9"
    assert segment_shape("about") == "a"
    assert segment_shape("a1b2c3") == "x"
    assert segment_shape("2026-05-31") == "9"


# --- classification ----------------------------------------------------------------------------------------


def _accuracy(classifier: LinkClassifier, truth: dict[str, list[str]]) -> tuple[float, list[tuple[str, object]]]:
    total = wrong = 0
    misses = []
    for key, kind in KIND.items():
        for url in truth[key]:
            total += 1
            got = classifier.classify(url)
            if got is not kind:
                wrong += 1
                misses.append((url, got))
    return 1 - wrong / total, misses


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_classifier_accuracy_on_samples_with_learned_details(name: str) -> None:
    classifier = LinkClassifier()
    classifier.learn_details(TRUTH[name]["known_details"])
    accuracy, misses = _accuracy(classifier, TRUTH[name])
    assert accuracy == 1.0, misses


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_classifier_without_any_examples_still_works_on_samples(name: str) -> None:
    accuracy, misses = _accuracy(LinkClassifier(), TRUTH[name])
    assert accuracy >= 0.9, misses


def test_learning_generalizes_shapes_the_generic_rules_miss() -> None:
    known = [
        f"https://food.example/recipes/{dish}"
        for dish in ("goulash", "risotto", "ramen", "paella", "moussaka", "bibimbap", "pierogi", "ceviche")
    ]
    unseen = "https://food.example/recipes/tagine"
    assert LinkClassifier().classify(unseen) is None  # control: one word, no id: undecided without examples
    classifier = LinkClassifier()
    classifier.learn_details(known)
    assert classifier.classify(unseen) is UrlKind.DETAIL
    assert classifier.classify("https://food.example/recipes/") is UrlKind.LISTING  # the section itself
    assert classifier.classify("https://food.example/about") is None
    assert classifier.classify("https://other.example/recipes/tagine") is None  # shapes are per host
    assert classifier.classify("https://other.example/recipes/") is None  # and so are their sections


def test_sections_are_per_host_and_per_depth_among_many_hosts() -> None:
    """A profile of many hosts shares one classifier: each host's sections come from its own shapes only."""
    classifier = LinkClassifier()
    for n in range(30):
        classifier.learn_details([f"https://h{n}.example/{'news' if n % 2 else 'shop'}/{dish}"
                                  for dish in ("goulash", "risotto", "ramen", "paella", "moussaka", "bibimbap")])
    assert classifier.classify("https://h3.example/news") is UrlKind.LISTING
    assert classifier.classify("https://h4.example/shop") is UrlKind.LISTING
    assert classifier.classify("https://h4.example/news") is None  # another host's section
    assert classifier.classify("https://h99.example/news") is None  # a host nothing was learned of
    assert classifier.classify("https://h3.example/news/goulash/more") is None  # deeper than any shape's head


def test_learned_shapes_ignore_tracking_parameters_and_www() -> None:
    classifier = LinkClassifier()
    classifier.learn_details([f"https://www.h.example/item.php?id={i}" for i in range(10)])
    assert classifier.classify("https://h.example/item.php?id=77&utm_source=x&sid=abc") is UrlKind.DETAIL
    assert classifier.classify("https://h.example/item.php?cat=77") is not UrlKind.DETAIL


def test_profile_patterns_override() -> None:
    profile = SiteProfile(
        seeds=("https://h.example/",), detail_patterns=(r"/about$",), listing_patterns=(r"/products/",)
    )
    classifier = LinkClassifier(profile)
    classifier.learn_details([f"https://h.example/products/thing-{i}" for i in range(10)])
    assert classifier.classify("https://h.example/about") is UrlKind.DETAIL
    assert classifier.classify("https://h.example/products/thing-99") is UrlKind.LISTING


def test_observe_page_learns_listing_shapes() -> None:
    classifier = LinkClassifier()
    classifier.learn_details([f"https://h.example/a/story-number-{i}" for i in range(20)])
    links = [f"https://h.example/a/story-number-{i}" for i in range(100, 110)]
    assert classifier.classify("https://h.example/hub/x1y2") is None
    assert classifier.observe_page("https://h.example/hub/x1y2", links) is UrlKind.LISTING
    assert classifier.classify("https://h.example/hub/z9w8") is UrlKind.LISTING
    # Control: a page with few detail links teaches nothing.
    assert classifier.observe_page("https://h.example/misc/q7r6", links[:2]) is None
    assert classifier.classify("https://h.example/misc/q5r4") is None


def test_feeds_and_sitemaps_are_recognized() -> None:
    classifier = LinkClassifier()
    assert classifier.classify("https://h.example/feed/") is UrlKind.FEED
    assert classifier.classify("https://h.example/feeds/atom.xml") is UrlKind.FEED
    assert classifier.classify("https://h.example/sitemap_index.xml") is UrlKind.SITEMAP
    assert classifier.classify("https://h.example/sitemaps/pages-1.xml.gz") is not UrlKind.DETAIL


# --- the test web ------------------------------------------------------------------------------------------


def test_test_web_details_classified_without_configuration(test_web) -> None:  # type: ignore[no-untyped-def]
    """Learn from the sitemap (as discovery does), then walk the listing pages breadth-first from the homepage,
    following only what the classifier calls a listing, and classify every link found on the way."""
    from collections import deque

    import httpx

    from harvester.discovery.sitemaps import parse_sitemap

    settings = Settings()
    urls = settings.urls
    with httpx.Client(timeout=30) as client:
        for name in test_web.truth:
            truth = test_web.truth[name]
            classifier = LinkClassifier()
            for doc_url in truth.sitemap_documents()[1:]:
                doc = parse_sitemap(client.get(doc_url).content, url=doc_url, settings=settings.discovery)
                classifier.learn_details(e.loc for e in doc.entries)
            details = set(truth.detail_urls())
            found_details: set[str] = set()
            wrong = []
            queue, seen = deque([truth.origin + "/"]), {truth.origin + "/"}
            while queue and len(seen) < 300:
                listing = queue.popleft()
                response = client.get(listing)
                if response.status_code != 200 or "html" not in response.headers.get("content-type", ""):
                    continue
                page = extract_links(response.content, base_url=listing, content_type=response.headers["content-type"])
                for link in page.links + page.next_pages:
                    canonical = canonicalize(link, settings=urls)
                    if canonical is None or not canonical.startswith(truth.origin + "/"):
                        continue
                    kind = classifier.classify(link)
                    if canonical in details:
                        found_details.add(canonical)
                        if kind is not UrlKind.DETAIL:
                            wrong.append((link, kind))
                    elif kind is UrlKind.DETAIL and "/hostile/" not in canonical:
                        wrong.append((link, kind))
                    if kind is UrlKind.LISTING and canonical not in seen and "/hostile/" not in canonical:
                        seen.add(canonical)
                        queue.append(canonical)
            assert set(truth.listed_urls()) <= found_details, (name, set(truth.listed_urls()) - found_details)
            assert not wrong, (name, wrong[:10])


def test_a_listing_link_spelled_with_dot_segments_is_judged_by_its_canonical_shape():
    """A listing page's "/p/./250" is the post "/p/250": judged raw, the learned "/p/{n}" detail shape missed it
    and the new post was dropped (found by bench/recrawl.py --seed 11)."""
    from datetime import UTC, datetime

    from harvester.discovery.listings import PageLinks
    from harvester.fetch.robots import RobotsRules
    from harvester.phases.discover_context import HostContext
    from harvester.phases.discover_feeds import FeedQueue
    from harvester.phases.discover_listings import ListingCrawl
    from harvester.records import ClaimedUrl, RobotsState
    from harvester.rules.admission import Site

    origin = "https://blog.example"
    settings = Settings.load()
    site = Site(settings, SiteProfile.build(seeds=(origin + "/",)))
    site.classifier.learn_details(f"{origin}/p/{n}" for n in range(100, 140))
    rules = RobotsRules(RobotsState(origin=origin, status=404, fetched_at=None, expires_at=None),
                        user_agent=settings.http.user_agent, settings=settings.robots)
    host = HostContext(None, settings, site, None, origin, run_id=None,  # type: ignore[arg-type]
                       run_started=datetime.now(UTC), refresh=False, robots=rules)
    discovery = ListingCrawl(host, FeedQueue(site))
    listing = ClaimedUrl(1, f"{origin}/topics/tech/", origin, UrlKind.LISTING, 1, 5.0, 0, datetime.now(UTC))
    links = [f"{origin}/p/./250", f"{origin}/p/251?utm_source=x", f"{origin}/p/252#comments", f"{origin}/p/253"]
    found = discovery.outlinks(listing, PageLinks(links=links), datetime.now(UTC))
    assert sorted(found) == [f"{origin}/p/{n}" for n in (250, 251, 252, 253)]
    assert {item.kind for item in found.values()} == {UrlKind.DETAIL}


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://x.example/news/", UrlKind.LISTING),
        ("https://x.example/sport/", UrlKind.LISTING),
        ("https://x.example/world-news/", UrlKind.LISTING),
        ("https://x.example/en/", UrlKind.LISTING),  # a language front
        ("https://x.example/about/", None),  # site furniture
        ("https://x.example/contact-us/", None),
        ("https://x.example/news", None),  # no trailing slash: as likely a page as a section
        ("https://x.example/news/?utm=1", None),
        ("https://x.example/x1/", None),
    ],
)
def test_a_one_word_directory_is_a_section_front(url: str, kind: UrlKind | None) -> None:
    assert LinkClassifier().classify(url) is kind


def test_the_section_front_guess_is_only_made_with_nothing_learned() -> None:
    # Once the site's detail shapes are known, its sections show as their parents; a bare word proves nothing.
    classifier = LinkClassifier()
    classifier.learn_details([f"https://x.example/articles/2026/some-long-story-{i}" for i in range(50)])
    assert classifier.classify("https://x.example/services/") is None
    assert classifier.classify("https://x.example/articles/") is UrlKind.LISTING  # a learned shape's section


async def test_a_site_without_sitemap_or_feed_is_read_through_its_section_fronts(sqlite_url, serve):
    """No sitemap, no feed: the home page links its sections by one word each (/news/, /sport/), and only the
    sections link the articles. Every article is discovered with no configuration; furniture is not crawled."""
    from aiohttp import web

    from harvester import phases
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile

    sections = {"news": 3, "sport": 3, "culture": 2}
    asked: list[str] = []

    def html(body: str) -> web.Response:
        return web.Response(content_type="text/html", text=f"<html><body>{body}</body></html>")

    async def handle(request: web.Request) -> web.Response:
        path = request.path
        asked.append(path)
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow:\n")
        if path == "/":
            return html("".join(f'<a href="/{s}/">{s}</a> ' for s in sections) + '<a href="/about/">About</a>')
        for section, count in sections.items():
            if path == f"/{section}/":
                return html("".join(f'<a href="/{section}/story-about-things-{i}">Story {i}</a>' for i in range(count)))
            if path.startswith(f"/{section}/story-"):
                return html(f"<main><h1>{path}</h1><p>Text.</p></main>")
        if path == "/about/":
            return html("<p>About us</p>")
        return web.Response(status=404)

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, SiteProfile.build(seeds=(origin + "/",)))
        states = store.url_states()
    articles = {f"{origin}/{s}/story-about-things-{i}" for s, n in sections.items() for i in range(n)}
    assert articles <= set(states), sorted(articles - set(states))
    assert "/about/" not in asked


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("https://shop.example/c/shoes", UrlKind.LISTING),
        ("https://shop.example/c/shoes/", UrlKind.LISTING),
        ("https://shop.example/product-category/tools/", UrlKind.LISTING),
        ("https://news.example/en/sport", UrlKind.LISTING),
        ("https://shop.example/about", None),  # furniture
        ("https://shop.example/help/shipping", None),  # furniture
        ("https://shop.example/c/shoes?sort=price", None),  # a query: a view, not a section
        ("https://shop.example/a/b/c", None),  # three levels: not navigation
        ("https://shop.example/item-42", None),  # an id
        ("https://blog.example/hello-world", None),  # a slug that could be a post
        ("https://blog.example/blog/hello-world", None),
    ],
)
def test_a_seed_pages_undecided_link_of_one_or_two_words_is_guessed_a_section(url, kind):
    assert LinkClassifier().guess_navigation(url) is kind


def test_no_section_is_guessed_once_the_sites_shapes_are_learned():
    classifier = LinkClassifier()
    assert classifier.guess_navigation("https://shop.example/c/shoes") is UrlKind.LISTING  # control
    classifier.learn_details(["https://www.shop.example/products/red-running-shoe-123"])
    assert classifier.guess_navigation("https://shop.example/c/shoes") is None
    assert classifier.guess_navigation("https://other.example/c/shoes") is UrlKind.LISTING  # per host


def test_a_paginated_lists_repeated_ids_are_its_items_and_nothing_else_is():
    """Ids under one directory, three or more side by side, are the list's items; the navigation, filters,
    languages, page numbers, footers, profiles and variants that repeat on real listing pages are not."""
    site = "https://news.example"
    items = [
        *(f"{site}/article/3-{k}" for k in range(1, 6)),
        *(f"{site}/product/{k}01" for k in range(1, 4)),
        *(f"{site}/thread/{k}2-a" for k in range(1, 4)),
    ]
    others = [
        f"{site}/about", f"{site}/contact", f"{site}/careers", f"{site}/our-story", f"{site}/book-now",
        f"{site}/about-us", f"{site}/privacy-policy", f"{site}/terms-of-use",
        *(f"{site}/pages/{name}" for name in ("shipping", "returns", "stockists", "size-guide", "gift-cards")),
        *(f"{site}/news/{name}" for name in ("world", "uk", "business")),
        *(f"{site}/sport/{name}" for name in ("football", "tennis", "golf")),
        *(f"{site}/recipes/{name}" for name in ("banana-bread", "apple-pie", "plum-cake")),
        *(f"{site}/shop/?filter_color={c}" for c in ("red", "blue", "green")),
        *(f"{site}/news/?lang={lang}" for lang in ("en", "de", "fr")),
        *(f"{site}/products/x?variant={n}" for n in (101, 102, 103)),
        *(f"{site}/viewforum.php?f={n}" for n in (1, 2, 3)),
        *(f"{site}/blog/{n}" for n in range(3, 6)),  # page numbers: the pager's next page is /blog/2
        *(f"{site}/print/{n}" for n in (123, 124, 125)),  # print versions
        f"{site}/u/alice", f"{site}/u/bob", f"{site}/u/carol",
        f"{site}/story/1-2", f"{site}/story/1-3",  # two of a kind
        f"{site}/category/sport", f"{site}/tag/a", f"{site}/list?page=2",  # listings already
        f"{site}/news/what-a-great-long-story-today",  # a detail already
        "https://elsewhere.example/article/1-1", "https://elsewhere.example/article/1-2",  # another host: two
    ]
    pager = {"page": f"{site}/blog/", "pager": [f"{site}/blog/2"]}
    assert LinkClassifier().repeated_items([*others, *items], **pager) == set(items)
    assert LinkClassifier().repeated_items(items[5:7], **pager) == set()  # fewer than three


def test_a_lists_items_are_its_items_whatever_the_length_of_their_ids():
    """Single-digit ids, short ids of letters and digits, ids in the query, and the one item of a last page: items;
    the list's own page numbers (by the page, or its next page) and its own filtered views are not."""
    site = "https://shop.example"
    classifier = LinkClassifier()
    first = [f"{site}/item/{n}" for n in range(1, 9)]
    assert classifier.repeated_items(first, page=f"{site}/shop/", pager=[f"{site}/shop/?page=2"]) == set(first)
    # The last page holds one item of a group taken for items before: it is one too.
    assert classifier.repeated_items([f"{site}/item/9"], page=f"{site}/shop/?page=2") == {f"{site}/item/9"}
    assert LinkClassifier().repeated_items([f"{site}/item/9"], page=f"{site}/shop/?page=2") == set()
    short = [f"{site}/p/{c}{n}" for c in "ab" for n in range(1, 3)]
    assert LinkClassifier().repeated_items(short, page=f"{site}/list/") == set(short)
    query = [f"{site}/product.php?id={n}" for n in range(1, 4)]
    keyed = [f"{site}/goods?product_id={n}&ref=list" for n in range(1, 4)]
    assert LinkClassifier().repeated_items([*query, *keyed], page=f"{site}/shop/") == {*query, *keyed}
    numbers = [f"{site}/shop/{n}" for n in range(1, 6)]  # /shop/3 shows pages 1 to 5; its next page is /shop/4
    assert LinkClassifier().repeated_items(numbers, page=f"{site}/shop/3", pager=[f"{site}/shop/4"]) == set()
    views = [f"{site}/shop/?color={n}" for n in range(1, 5)]  # the list itself, filtered
    assert LinkClassifier().repeated_items(views, page=f"{site}/shop/?page=2") == set()


_HREF_PARTS = ["/", "//", ".", "..", "?", "#", ";", "[", "]", ":", "@", "%2e", "a", "b", "h", "x=1", "&", " ", "\t",
               "\n", "\\", "\x7f", "\x00", "é", "http://", "https://", "HTTP://", "http:", "mailto:", "//h:80"]
_BASES = ["http://h", "https://u@h:8080/a/b?q=1#f", "HTTP://H/x/", "http://h/a/../b", "ftp://h/x", "http:///p",
          "http://[::1]:8/x", "http://[bad/x", "https://h?q", "h/x", ""]


@hypothesis_settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_HREF_PARTS), min_size=1, max_size=8).map("".join), st.sampled_from(_BASES))
def test_the_link_join_fast_path_gives_what_urljoin_gives(href, base):
    """``absolute_http`` joins plain hrefs by concatenation; for every href it must equal the general path."""
    stripped = href.strip(" \t\n\f\r")
    assert absolute_http(href, base) == (joined_http(stripped, base) if stripped else None)


def test_next_anchors_are_read_by_their_whole_text_with_or_without_child_elements() -> None:
    html = (b'<html><body><a href="/l/a">Next</a> <a href="/l/b"><span>Next</span> <b>page</b></a>'
            b'<a href="/l/c"> next <!-- c --> &raquo; </a><a href="/l/d">Next<i>ly</i></a>'
            b'<a href="/l/e">About</a></body></html>')
    page = extract_links(html, base_url="https://x.example/")
    assert page.next_pages == ["https://x.example/l/a", "https://x.example/l/b", "https://x.example/l/c"]


_URL_PARTS = ["/", "page", "/page/", "2", "12", "1234", "?", "#", "&", "page=", "p=", "p/", "start=", "x", "www.",
              "http://", "HTTP://", "@", ":", "\t", "\n", " ", "é", "-", "seite", "/p", "offset=3", "?page=2", "#p=2"]


@hypothesis_settings(max_examples=3000, deadline=None)
@given(st.sampled_from(["http://h", "https://", "HTTPS://h", "", "h"]),
       st.lists(st.sampled_from(_URL_PARTS), max_size=8).map("".join))
def test_pagination_fast_split_gives_what_urlsplit_gives(start, rest):
    url = start + rest
    try:
        expected = is_pagination_split(url)
    except ValueError:
        return  # urlsplit refuses it (brackets): no URL a page gives the classifier
    assert is_pagination(url) == expected


def test_a_remembered_kind_is_forgotten_when_anything_is_learned(monkeypatch) -> None:
    """classify() remembers answers per URL; each must still be what the rules give after new learning."""
    import harvester.rules.classify as classify_module

    classifier = LinkClassifier()
    unseen = "https://food.example/recipes/tagine"
    assert classifier.classify(unseen) is None
    classifier.learn_details(f"https://food.example/recipes/{dish}" for dish in ("goulash", "risotto", "ramen",
                                                                                  "paella", "moussaka", "bibimbap"))
    assert classifier.classify(unseen) is UrlKind.DETAIL
    assert classifier.classify("https://food.example/best-of") is None
    classifier.learn_listing("https://food.example/best-of")
    assert classifier.classify("https://food.example/best-of") is UrlKind.LISTING
    monkeypatch.setattr(classify_module, "MAX_REMEMBERED_KINDS", 3)
    urls = [f"https://food.example/recipes/dish-{n}" for n in range(10)]
    assert [classifier.classify(url) for url in urls] == [classifier.classify(url) for url in urls]
    assert len(classifier._known) <= 3


@pytest.mark.parametrize("path", sorted((DATA).glob("*.html")) + sorted((DATA.parent / "pages").glob("*.html")),
                         ids=lambda p: p.name)
def test_feeds_found_in_the_link_walk_are_feed_links_ins(path: Path) -> None:
    """links_of finds feeds in its one walk of the page; they must be what feed_links_in finds in its own."""
    from harvester.discovery._html import parse_html
    from harvester.discovery.feeds import feed_links_in
    from harvester.discovery.listings import links_of

    root = parse_html(path.read_bytes())
    base = "https://news.example.net/world/x"
    page = links_of(root, base_url=base)
    assert page.feeds == feed_links_in(root, page.base)


def test_feed_links_of_every_kind_in_document_order() -> None:
    html = (b'<html><head><link rel="alternate" type="application/rss+xml" href="/rss.xml">'
            b'<link rel="alternate" type="application/json" href="/data.json">'
            b'<link rel="alternate" type="application/json" href="/feed.json"><link rel="feed" href="/f">'
            b'<link rel="stylesheet" href="/feed.css"></head><body><a href="/atom.xml">Atom</a>'
            b'<a href="javascript:feed()">x</a><a href="mailto:feed@x.example">m</a><area href="/rss">'
            b'<a href="/rss.xml">again</a><a href="/story">story</a></body></html>')
    page = extract_links(html, base_url="https://x.example/")
    assert page.feeds == ["https://x.example/rss.xml", "https://x.example/feed.json", "https://x.example/f",
                          "https://x.example/atom.xml"]


def test_teaching_the_same_details_again_learns_nothing_and_classifies_the_same() -> None:
    """Extraction teaches the frontier's newest details again each time discovery hands hosts over: the repeats
    grew the examples through the whole run (issue 22: memory with the number of hosts) and weighed a section's
    words as if they were more URLs. A URL is now one example, however often it is taught."""
    words = ("news", "sport", "culture", "travel", "food", "cars")
    details = [f"https://h.test/{words[i % 6]}/story-{i}" for i in range(30)]
    links = ["https://h.test/news/", "https://h.test/news/another-story-99", "https://h.test/about/team",
             "https://h.test/food/x", "https://h.test/weather/today"]
    once, again = LinkClassifier(), LinkClassifier()
    once.learn_details(details)
    for _ in range(20):
        again.learn_details(details)
    assert again.learned == once.learned == 30
    assert [again.classify(link) for link in links] == [once.classify(link) for link in links]
