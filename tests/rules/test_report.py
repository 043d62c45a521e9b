"""DiscoveryReport: per-source counts, overlap, rejections, lastmod truthfulness, JSON output, bounded memory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from harvester.records import Source, provenance
from harvester.rules import report as report_module
from harvester.rules.report import DiscoveryReport
from harvester.rules.scope import UrlFilter
from harvester.settings import Settings

NOW = datetime(2026, 6, 1, tzinfo=UTC)
HOST = "https://h.example"


def test_sources_overlap_and_rejections() -> None:
    report = DiscoveryReport(host=HOST)
    for i in range(10):
        report.add_entry(
            provenance(Source.SITEMAP, f"{HOST}/s.xml"),
            f"{HOST}/p{i}",
            None,
            lastmod=NOW - timedelta(days=i),
            fetched_at=NOW,
        )
    for i in range(5, 12):
        report.add_entry(Source.FEED, f"{HOST}/p{i}", None, lastmod=NOW - timedelta(days=i), fetched_at=NOW)
    report.add_entry(Source.LISTING, f"{HOST}/p11", None)
    report.add_entry(Source.LISTING, f"{HOST}/p99", None)
    report.add_entry("sitemap:https://h.example/s.xml", "https://other.example/x", "out_of_scope")
    report.add_entry("sitemap:https://h.example/s.xml", f"{HOST}/private/x", "disallowed")
    report.add_entry(Source.LINK, f"{HOST}/calendar/2099/01", "trap:calendar")
    assert report.found == {"sitemap": 12, "feed": 7, "listing": 2, "link": 1}
    assert report.queued == {"sitemap": 10, "feed": 7, "listing": 2}
    assert report.overlap() == {
        "sitemap": 7,  # p0-p4 and the two rejected sitemap entries
        "feed+sitemap": 5,  # p5-p9
        "feed": 1,  # p10
        "feed+listing": 1,  # p11
        "listing": 1,  # p99
        "link": 1,
    }
    assert report.only_in("listing") == 1
    data = report.to_dict()
    json.dumps(data)
    assert data["sitemap_entries_out_of_scope"] == 1
    assert data["sitemap_entries_disallowed"] == 1
    assert data["traps_rejected"] == {"trap:calendar": 1}
    assert data["unique_urls"] == 16


def test_identical_lastmod_is_untrustworthy() -> None:
    same = DiscoveryReport(host=HOST)
    for i in range(100):
        same.add_entry(Source.SITEMAP, f"{HOST}/p{i}", None, lastmod=datetime(2026, 1, 1, tzinfo=UTC), fetched_at=NOW)
    assert same.lastmod_truthfulness() == 0.0
    assert same.lastmod_summary()["identical"] is True
    varied = DiscoveryReport(host=HOST)
    for i in range(100):
        varied.add_entry(Source.SITEMAP, f"{HOST}/p{i}", None, lastmod=NOW - timedelta(days=i + 2), fetched_at=NOW)
    truth = varied.lastmod_truthfulness()
    assert truth is not None
    assert truth > 0.9
    assert varied.lastmod_summary()["identical"] is False


def test_lastmod_stamped_at_fetch_time_or_in_the_future_lowers_truthfulness() -> None:
    stamped = DiscoveryReport(host=HOST)
    for i in range(100):
        stamped.add_entry(Source.SITEMAP, f"{HOST}/p{i}", None, lastmod=NOW - timedelta(seconds=i), fetched_at=NOW)
    assert stamped.lastmod_truthfulness() == 0.0
    assert stamped.lastmod_summary()["stamped_at_fetch"] == 100
    future = DiscoveryReport(host=HOST)
    for i in range(100):
        lastmod = NOW + timedelta(days=30 + i) if i % 2 else NOW - timedelta(days=i + 2)
        future.add_entry(Source.SITEMAP, f"{HOST}/p{i}", None, lastmod=lastmod, fetched_at=NOW)
    truth = future.lastmod_truthfulness()
    assert truth is not None
    assert truth <= 0.5
    assert future.lastmod_future == 50


def test_too_few_lastmods_to_judge() -> None:
    report = DiscoveryReport(host=HOST)
    report.add_entry(Source.SITEMAP, f"{HOST}/a", None, lastmod=NOW)
    assert report.lastmod_truthfulness() is None
    report.add_entry(Source.SITEMAP, f"{HOST}/b", None, lastmod=None)
    assert report.lastmod_summary()["missing"] == 1


def test_sitemaps_and_problems() -> None:
    report = DiscoveryReport(host=HOST)
    report.add_sitemap(f"{HOST}/big.xml", "urlset", entries=50_000, over_limit=True, problems=["more than 50000"])
    report.add_sitemap(f"{HOST}/same.xml", "urlset", not_modified=True)
    for i in range(500):
        report.add_problem(f"p{i}")
    data = report.to_dict()
    assert data["sitemaps_over_limit"] == [f"{HOST}/big.xml"]
    assert data["sitemaps"][1]["not_modified"] is True
    assert len(data["problems"]) == report_module.MAX_PROBLEMS


def test_add_rejections_merges_filter_counts() -> None:
    flt = UrlFilter(Settings(), None, [HOST + "/"])
    for month in range(1, 13):
        for year in range(2020, 2030):
            flt.check(f"{HOST}/calendar/{year}/{month:02d}")
    report = DiscoveryReport(host=HOST)
    report.add_rejections(dict(flt.counts), source="link")
    assert report.rejected["trap:calendar"] == 100
    assert "ok" not in report.rejected


def test_overlap_tracking_is_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(report_module, "MAX_TRACKED_URLS", 100)
    report = DiscoveryReport(host=HOST)
    for i in range(1000):
        report.add_entry(Source.SITEMAP, f"{HOST}/p{i}", None)
    assert report.unique_urls == 100
    assert report.found["sitemap"] == 1000
    assert report.to_dict()["overlap_truncated"] is True
