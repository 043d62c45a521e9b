"""parse_feed (RSS 2.0, RSS 1.0, Atom, JSON Feed) and find_feed_links, over real-world shaped samples."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from harvester.discovery.feeds import find_feed_links, numbered_successors, parse_feed
from harvester.errors import ContentRejected

DATA = Path(__file__).resolve().parent.parent / "data"
FEEDS = DATA / "feeds"


def test_wordpress_rss2() -> None:
    doc = parse_feed((FEEDS / "wordpress_rss2.xml").read_bytes(), url="https://blog.example.org/feed/")
    assert doc.kind == "rss"
    assert doc.title == "Example Engineering Blog"
    links = [entry.link for entry in doc.entries]
    assert links == [
        "https://blog.example.org/2026/05/how-we-rebuilt-our-search/",
        "https://blog.example.org/2026/05/the-case-for-boring-technology/?utm_source=rss&utm_medium=rss",
        "https://blog.example.org/2026/04/a-year-of-postgres-in-production/",  # relative, resolved
        "https://blog.example.org/2026/04/debugging-a-memory-leak-in-python/",  # permalink guid
    ]
    first = doc.entries[0]
    assert first.published == datetime(2026, 5, 29, 15, 3, 10, tzinfo=UTC)
    assert first.updated is None  # RSS has no updated date: not invented from pubDate
    assert first.lastmod == first.published
    assert first.title == "How we rebuilt our search"
    assert doc.entries[2].published == datetime(2026, 4, 18, 6, tzinfo=UTC)
    assert doc.entries[3].published is None
    assert any("1 entries without" in problem for problem in doc.problems)


def test_atom_dates_and_dedupe() -> None:
    doc = parse_feed((FEEDS / "news_atom.xml").read_bytes(), url="https://news.example.net/world/atom.xml")
    assert doc.kind == "atom"
    assert [entry.link for entry in doc.entries] == [
        "https://news.example.net/world/2026/05/31/summit-ends-without-agreement-5512",
        "https://news.example.net/world/2026/05/31/floods-displace-thousands-in-the-delta-5509",
    ]
    summit = doc.entries[0]
    assert summit.published == datetime(2026, 5, 31, 18, 20, tzinfo=UTC)
    assert summit.updated == datetime(2026, 5, 31, 19, 0, tzinfo=UTC)
    assert summit.lastmod == summit.updated
    assert doc.entries[1].published is None


def test_json_feed() -> None:
    doc = parse_feed((FEEDS / "feed.json").read_bytes(), url="https://shop.example.com/feed.json")
    assert doc.kind == "json"
    assert doc.title == "Example Shop news"
    assert [entry.link for entry in doc.entries] == [
        "https://shop.example.com/blogs/news/summer-collection-2026",
        "https://shop.example.com/blogs/news/care-guide-cast-iron",
        "https://magazine.example/review-of-example-shop",
    ]
    assert doc.entries[0].published == datetime(2026, 5, 20, 8, tzinfo=UTC)
    assert doc.entries[0].updated == datetime(2026, 5, 21, 9, tzinfo=UTC)
    assert any("3 entries" in problem for problem in doc.problems)


def test_json_that_is_not_a_json_feed() -> None:
    doc = parse_feed(json.dumps({"version": "2.0", "items": []}).encode(), url="https://x.example/f.json")
    assert doc.kind == "unknown"
    assert doc.entries == []
    broken = parse_feed(b'{"version": "https://jsonfeed.org/version/1", "items": [', url="https://x.example/f.json")
    assert broken.kind == "unknown"
    assert broken.problems


def test_rss1_rdf() -> None:
    doc = parse_feed((FEEDS / "rdf_rss1.xml").read_bytes(), url="https://old.example.org/rss")
    assert [entry.link for entry in doc.entries] == ["https://old.example.org/notes/first-note-1"]
    assert doc.entries[0].lastmod == datetime(2009, 1, 1, 10, tzinfo=UTC)


def test_rss091_public_doctype_is_accepted() -> None:
    doc = parse_feed((FEEDS / "rss091_doctype.xml").read_bytes(), url="http://legacy.example.com/rss")
    assert [entry.link for entry in doc.entries] == ["http://legacy.example.com/news/old-news-1.html"]


@pytest.mark.parametrize("name", ["billion_laughs.xml", "xxe.xml"])
def test_entity_declarations_refused(name: str) -> None:
    with pytest.raises(ContentRejected):
        parse_feed((DATA / "hostile" / name).read_bytes(), url="https://x.example/feed")


def test_max_entries_bounds_a_huge_feed() -> None:
    items = "".join(f"<item><link>https://x.example/p{i}</link></item>" for i in range(500))
    body = f'<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>{items}</channel></rss>'.encode()
    doc = parse_feed(body, url="https://x.example/feed", max_entries=100)
    assert len(doc.entries) == 100
    assert doc.over_limit
    assert len(parse_feed(body, url="https://x.example/feed").entries) == 500  # control


def test_html_is_not_a_feed() -> None:
    doc = parse_feed((DATA / "html" / "blog_home.html").read_bytes(), url="https://blog.example.org/")
    assert doc.entries == []
    assert doc.kind == "unknown"


def test_find_feed_links_on_samples() -> None:
    truth = json.loads((DATA / "html" / "truth.json").read_text())
    for name, expected in truth.items():
        found = find_feed_links((DATA / "html" / name).read_bytes(), base_url=expected["base_url"])
        assert found == expected["feeds"], name


def test_find_feed_links_ignores_non_feed_alternates_and_generic_xml() -> None:
    html = b"""<html><head>
    <link rel="alternate" hreflang="de" href="/de/">
    <link rel="alternate" type="application/json+oembed" href="/oembed?x=1">
    <link rel="alternate" type="text/xml" href="/export/data.xml">
    <link rel="alternate" type="application/xml" href="/rss.xml">
    <link rel="alternate" type="application/rss+xml" href="feed.rss">
    <link rel="feed" href="/all-posts">
    </head><body><a href="/feed">RSS</a><a href="/feedback">Feedback</a><a href="/atom.xml?x=1">Atom</a>
    </body></html>"""
    assert find_feed_links(html, base_url="https://h.example/blog/post") == [
        "https://h.example/rss.xml",
        "https://h.example/blog/feed.rss",
        "https://h.example/all-posts",
        "https://h.example/feed",
        "https://h.example/atom.xml?x=1",
    ]


def test_find_feed_links_on_garbage() -> None:
    assert find_feed_links(b"", base_url="https://h.example/") == []
    assert find_feed_links(b"\x00\xff\xfe garbage <<<", base_url="https://h.example/") == []


def test_rfc5005_links_of_rss_atom_and_json_feed() -> None:
    rss = b"""<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>
    <title>t</title><link>https://h.example/</link>
    <atom:link rel="self" href="https://h.example/feed/"/>
    <atom:link rel="next" href="/feed/?paged=2"/>
    <item><link>https://h.example/a</link></item></channel></rss>"""
    doc = parse_feed(rss, url="https://h.example/feed/")
    assert (doc.next_page, doc.prev_archive) == ("https://h.example/feed/?paged=2", None)
    atom = b"""<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
    <link rel="current" href="https://h.example/atom"/><link rel="prev-archive" href="archive/2025-12"/>
    <entry><link href="https://h.example/b"/></entry></feed>"""
    doc = parse_feed(atom, url="https://h.example/atom")
    assert (doc.next_page, doc.prev_archive) == (None, "https://h.example/archive/2025-12")
    feed = {"version": "https://jsonfeed.org/version/1.1", "title": "t", "next_url": "https://h.example/f.json?p=2",
            "items": [{"id": "1", "url": "https://h.example/c"}]}
    doc = parse_feed(json.dumps(feed).encode(), url="https://h.example/f.json")
    assert doc.next_page == "https://h.example/f.json?p=2"


def test_a_feed_linking_to_itself_or_nowhere_has_no_older_documents() -> None:
    atom = b"""<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
    <link rel="next" href="https://h.example/atom"/><link rel="prev-archive" href="javascript:void(0)"/>
    <entry><link href="https://h.example/b"/></entry></feed>"""
    doc = parse_feed(atom, url="https://h.example/atom")
    assert (doc.next_page, doc.prev_archive) == (None, None)
    plain = (FEEDS / "wordpress_rss2.xml").read_bytes()  # control: a feed without history links
    assert parse_feed(plain, url="https://blog.example.org/feed/").next_page is None


@pytest.mark.parametrize(("previous", "current", "expected"), [
    ("https://h.example/feed?page=2", "https://h.example/feed?page=3",
     ["https://h.example/feed?page=4", "https://h.example/feed?page=5"]),
    ("https://h.example/blog/page/20/", "https://h.example/blog/page/40/",
     ["https://h.example/blog/page/60/", "https://h.example/blog/page/80/"]),
    ("https://h.example/2024/feed?paged=9", "https://h.example/2024/feed?paged=10",
     ["https://h.example/2024/feed?paged=11", "https://h.example/2024/feed?paged=12"]),
    ("https://h.example/feed?p=008", "https://h.example/feed?p=009",
     ["https://h.example/feed?p=010", "https://h.example/feed?p=011"]),
    ("https://h.example/feed", "https://h.example/feed?page=2", []),  # the head: no step to repeat yet
    ("https://h.example/feed?page=2&t=100", "https://h.example/feed?page=3&t=161", []),  # two numbers moved
    ("https://h.example/feed?page=3", "https://h.example/feed?page=2", []),  # backwards
    ("https://h.example/feed?after=a1", "https://h.example/feed?after=b7", []),  # a cursor
    ("https://h.example/feed?p=9", "https://h.example/feed?p=010", []),  # the padding changed
])
def test_numbered_successors_repeat_one_step_only(previous: str, current: str, expected: list[str]) -> None:
    assert numbered_successors(previous, current, 2) == expected
    assert numbered_successors(previous, current, 0) == []
