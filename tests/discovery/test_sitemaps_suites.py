"""crawler-commons' SiteMapParserTest as data (tests/data/sitemaps/crawler_commons_cases.json, its source named):
each case's expectation restated in the harvester's terms and checked through ``parse_sitemap``."""

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
    assert all(c["differs"] in SUITE["reasons"] and c["crawler_commons"] != c["expect"] for c in differing)
