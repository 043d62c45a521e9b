"""crawler-commons' SiteMapParserTest and SiteMapParserLimitsTest as data (tests/data/sitemaps/
crawler_commons_cases.json, sources named): each expectation restated in the harvester's terms, through
``parse_sitemap``."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harvester.discovery.sitemaps import parse_sitemap
from harvester.errors import ContentRejected, NotASitemap
from harvester.settings import DiscoverySettings

SUITE = json.loads((Path(__file__).resolve().parents[1] / "data" / "sitemaps" / "crawler_commons_cases.json")
                   .read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", SUITE["cases"], ids=[c["id"] for c in SUITE["cases"]])
def test_crawler_commons_sitemap_cases(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if expect.get("refused"):
        with pytest.raises((ContentRejected, NotASitemap)):
            parse_sitemap(case["body"].encode(), url=case["url"], settings=DiscoverySettings())
        return
    doc = parse_sitemap(case["body"].encode(), url=case["url"], settings=DiscoverySettings())
    entries = list(doc.entries)
    if "kind" in expect:
        assert doc.kind == expect["kind"]
    if "locs" in expect:
        assert [e.loc for e in entries] == expect["locs"]
        if not expect["locs"]:
            assert doc.problems or doc.truncated  # nothing kept is said, never silent
    if "entries" in expect:
        assert [e.loc for e in entries] == [x["loc"] for x in expect["entries"]]
        for entry, x in zip(entries, expect["entries"], strict=True):
            assert (entry.lastmod is not None) is x["has_lastmod"]
            assert entry.changefreq == x["changefreq"]
            assert entry.priority == (x["priority"] if x["priority"] is not None else 0.5)
    if "children" in expect:
        assert doc.children == expect["children"]
    for loc, when in expect.get("child_lastmod", {}).items():
        assert doc.child_lastmod[loc] == (datetime.fromisoformat(when) if when else None)
    if "truncated" in expect:
        assert doc.truncated is expect["truncated"]


def test_each_difference_from_crawler_commons_names_its_reason() -> None:
    differing = [c for c in SUITE["cases"] if "crawler_commons" in c]
    assert len(SUITE["cases"]) == 22 and len(differing) == 6
    limits = SUITE["limits"]["cases"]
    assert len(limits) == 27 and sum("crawler_commons" in c for c in limits) == 5
    assert all(c["differs"] in SUITE["reasons"] and c["crawler_commons"] != c["expect"]
               for c in differing + [c for c in limits if "crawler_commons" in c])


def generated(kind: str, items: int) -> bytes:
    """crawler-commons' SiteMapParserLimitsTest.generate(): ``items`` entries of http://www.example.com/pageN.html."""
    declaration = '<?xml version="1.0" encoding="UTF-8"?>\n'
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
    page = "http://www.example.com/page{}.html"
    shapes = {
        "xml": (f"{declaration}<urlset {ns}>\n", " <url><loc>" + page + "</loc></url>\n", "</urlset>"),
        "xml-padded": (f"{declaration}<urlset {ns}>\n", " <url><loc>" + page + "</loc></url>" + " " * 1024 + "\n",
                       "</urlset>"),
        "index": (f"{declaration}<sitemapindex {ns}>\n", " <sitemap><loc>http://www.example.com/sitemap{}.xml</loc>"
                  "</sitemap>\n", "</sitemapindex>"),
        "rss": (f'{declaration}<rss version="2.0">\n<channel>\n<title>Test</title>\n<link>http://www.example.com/</link>\n',
                " <item><link>" + page + "</link></item>\n", "</channel>\n</rss>"),
        "atom": (f'{declaration}<feed xmlns="http://www.w3.org/2005/Atom">\n<title>Test</title>\n',
                 ' <entry><link href="' + page + '"/></entry>\n', "</feed>"),
        "text": ("", page + "\n", ""),
        "broken-index": (f"{declaration}<sitemapindex {ns}>\n", " <sitemap><loc>http://www.example.com/sitemap{}.xml"
                         "</loc></sitemap>\n", ""),
    }
    head, item, tail = shapes[kind]
    if kind == "broken-index":  # two whole entries, then one cut inside a tag
        body = head + "".join(item.format(i) for i in range(1, items)) + item.format(items).replace("</sitemap>\n",
                                                                                                     "<broken")
        return body.encode()
    return (head + "".join(item.format(i) for i in range(items)) + tail).encode()


def _cap(spec: int | str, size: int) -> int:
    return spec if isinstance(spec, int) else {"len": size, "len-1": size - 1, "len/2": size // 2,
                                               "len/2+25": size // 2 + 25}[spec]


@pytest.mark.parametrize("case", SUITE["limits"]["cases"], ids=[c["id"] for c in SUITE["limits"]["cases"]])
def test_crawler_commons_limits(case: dict[str, Any]) -> None:
    import gzip

    body = generated(case["doc"], case["items"])
    settings = DiscoverySettings(**{k: case[k] for k in ("max_sitemap_urls",) if k in case},
                                 **({"max_sitemap_bytes": _cap(case["max_sitemap_bytes"], len(body))}
                                    if "max_sitemap_bytes" in case else {}))
    data = gzip.compress(body) if case["gzip"] else body
    expect = case["expect"]
    url = "http://www.example.com/sitemap" + (".xml.gz" if case["gzip"] else ".xml")
    if expect.get("refused"):
        with pytest.raises(ContentRejected):
            parse_sitemap(data, url=url, settings=settings)
        return
    doc = parse_sitemap(data, url=url, settings=settings)
    locs = [e.loc for e in doc.entries]
    if "count" in expect:
        assert len(locs) == expect["count"]
    if "last" in expect:
        assert locs[-1] == expect["last"]
    if "children" in expect:
        assert len(doc.children) == expect["children"]
    if "over_limit" in expect:
        assert doc.over_limit is expect["over_limit"]
    if "truncated" in expect:
        assert doc.truncated is expect["truncated"]
        if expect["truncated"]:
            assert any("cut" in p for p in doc.problems)
    if expect.get("partial"):
        assert 0 < len(locs) < case["items"]
    if expect.get("whole_urls"):
        assert all(loc.endswith(".html") for loc in locs)
