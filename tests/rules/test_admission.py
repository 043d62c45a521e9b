"""``Site.admit_published`` (batch admission of sitemap entries) against ``Site.admit`` entry by entry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.discovery.sitemap_model import SitemapEntry
from harvester.records import Source, UrlKind
from harvester.rules.admission import Site
from harvester.settings import Settings
from harvester.site_profile import ScoreRule, SiteProfile

ORIGIN = "https://news.example"
SITEMAP = ORIGIN + "/sitemap.xml"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

_locs = st.sampled_from(
    [
        ORIGIN + "/a/story-1",
        ORIGIN + "/a/story-1",  # duplicates are counted twice, queued once (as admit does)
        ORIGIN + "/a/story-2?utm_source=x&b=2&a=1",
        "https://NEWS.example:443/a/story-3",
        "https://news.example:8443/a/other-port",
        "https://www.news.example/b/story",
        ORIGIN + "/",
        ORIGIN + "/archive?page=3",
        ORIGIN + "/?p=42",
        ORIGIN + "/p/12",
        ORIGIN + "/private/secret",
        ORIGIN + "/x;jsessionid=ABC",
        ORIGIN + "/a/a/a/a/loop",
        ORIGIN + "/" + "/".join("s" * 3 for _ in range(20)),
        ORIGIN + "/long/" + "x" * 3000,
        ORIGIN + "/calendar/2026/11",
        "https://elsewhere.example/out-of-scope",
        "ftp://news.example/file",
        "https://news.example/%7Euser/caf%c3%a9",
        "https://news.example/a/./b/../c",
    ]
)
_dates = st.sampled_from(
    [None, NOW - timedelta(days=2), NOW - timedelta(days=400), NOW + timedelta(days=9), NOW - timedelta(minutes=5),
     datetime(2026, 11, 1), datetime(2026, 11, 1, tzinfo=UTC)]
)
_entries = st.builds(
    SitemapEntry,
    loc=_locs,
    lastmod=_dates,
    changefreq=st.sampled_from([None, "daily", "always"]),
    priority=st.sampled_from([None, 0.0, 0.5, 0.9, 1.0]),
    news=st.sampled_from([None, {"title": "t", "publish_date": NOW}]),
    images=st.sampled_from([[], ["https://news.example/i.png"], [f"https://news.example/{i}.png" for i in range(60)]]),
)
_profiles = st.sampled_from(
    [
        {},
        {"max_pages_per_host": 5},
        {"listing_patterns": (r"/p/\d+$",)},
        {"score_rules": (ScoreRule(pattern="/a/", boost=2.5),)},
        {"scope": {"deny_patterns": ("/b/",)}},
    ]
)


def _disallow_private(url: str) -> bool:
    return "/private/" not in url


def _sites(profile_fields: dict[str, Any]) -> tuple[Site, Site]:
    base = Settings.load()
    profile = SiteProfile.build(seeds=(ORIGIN + "/",), **profile_fields)
    return Site(base, profile), Site(base, profile)


def _one_by_one(site: Site, entries: list[SitemapEntry]) -> list[Any]:
    out = []
    for entry in entries:
        images = list(entry.images)[:50]
        item = site.admit(
            entry.loc, base=SITEMAP, source=Source.SITEMAP, where=SITEMAP, depth=1, now=NOW,
            allowed=_disallow_private, lastmod=entry.lastmod, lastmod_until=entry.lastmod_until,
            changefreq=entry.changefreq, priority=entry.priority,
            meta={"news": entry.news, "images": images} if entry.news or images else None, trusted=True,
            fetched_at=NOW, report_to=ORIGIN,
        )
        if item is not None:
            out.append(item)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_entries, max_size=40), _profiles, st.sampled_from([None, 0.0, 0.4]))
def test_batch_admission_agrees_with_admit(
    entries: list[SitemapEntry], profile_fields: dict[str, Any], truthfulness: float | None
) -> None:
    single, batch = _sites(profile_fields)
    for site in (single, batch):
        site.truthfulness[ORIGIN] = truthfulness
    expected = _one_by_one(single, entries)
    got = batch.admit_published(
        entries, where=SITEMAP, origin=ORIGIN, now=NOW, fetched_at=NOW, allowed=_disallow_private
    )
    assert got == expected
    assert [item.meta for item in got] == [item.meta for item in expected]
    assert batch.report(ORIGIN).to_dict() == single.report(ORIGIN).to_dict()
    assert batch.report(ORIGIN).lastmod_truthfulness() == single.report(ORIGIN).lastmod_truthfulness()
    assert batch.filter.counts == single.filter.counts


def test_batch_admission_refuses_what_admit_refuses() -> None:
    site, _ = _sites({})
    entries = [
        SitemapEntry(loc=ORIGIN + "/ok"),
        SitemapEntry(loc=ORIGIN + "/private/no"),
        SitemapEntry(loc="https://elsewhere.example/x"),
        SitemapEntry(loc="mailto:someone@news.example"),
    ]
    got = site.admit_published(entries, where=SITEMAP, origin=ORIGIN, now=NOW, fetched_at=NOW,
                               allowed=_disallow_private)
    assert [item.url for item in got] == [ORIGIN + "/ok"]
    report = site.report(ORIGIN).to_dict()
    assert report["urls_found_by_source"] == {"sitemap": 4}
    assert report["urls_queued_by_source"] == {"sitemap": 1}
    assert report["rejected"] == {"disallowed": 1, "out_of_scope": 1, "invalid": 1}


@pytest.mark.parametrize("url", [ORIGIN + "/", ORIGIN + "/?page=2", ORIGIN + "/?paged=3", ORIGIN + "/list?x=1&page=4",
                                 ORIGIN + "/?cat=5", ORIGIN + "/?m=202401"])
def test_published_listing_shapes_stay_listings(url: str) -> None:
    site, _ = _sites({})
    got = site.admit_published([SitemapEntry(loc=url)], where=SITEMAP, origin=ORIGIN, now=NOW, fetched_at=NOW,
                               allowed=None)
    assert [item.kind.value for item in got] == ["listing"]


@pytest.mark.parametrize("url", [ORIGIN + "/?p=123", ORIGIN + "/?page_id=7", ORIGIN + "/?attachment_id=9",
                                 ORIGIN + "/p/12", ORIGIN + "/a?p=2"])
def test_published_content_at_the_root_or_behind_p_is_detail(url: str) -> None:
    """WordPress's default permalinks (``/?p=123`` posts, ``/?page_id=7`` pages) are content the site publishes,
    not its homepage or an archive page: fetched and stored in extraction, not read as a listing."""
    site, _ = _sites({})
    got = site.admit_published([SitemapEntry(loc=url)], where=SITEMAP, origin=ORIGIN, now=NOW, fetched_at=NOW,
                               allowed=None)
    assert [item.kind.value for item in got] == ["detail"]
    assert site.published_kind(url) is UrlKind.DETAIL


def test_a_site_that_keeps_no_reports_admits_the_same_and_holds_nothing_per_host() -> None:
    """Extraction admits every outlink of every page and never reads the reports: ``keep_reports=False`` must
    decide exactly as a reporting site does, and keep no report (nor a key per URL) for any host (issue 22)."""
    base = Settings.load()
    profile = SiteProfile.build(seeds=(ORIGIN + "/",))
    kept, unkept = Site(base, profile), Site(base, profile, keep_reports=False)
    entries = [SitemapEntry(loc=ORIGIN + f"/a/story-{i}") for i in range(5)] + [
        SitemapEntry(loc=ORIGIN + "/private/no"), SitemapEntry(loc="https://elsewhere.example/x")]
    for site in (kept, unkept):
        site.admit_published(entries, where=SITEMAP, origin=ORIGIN, now=NOW, fetched_at=NOW,
                             allowed=_disallow_private)
    links = [ORIGIN + "/a/story-9", ORIGIN + "/private/link", "https://elsewhere.example/y", "mailto:x@y"]
    verdicts = [
        [site.admit(link, base=ORIGIN + "/", source=Source.LINK, where=ORIGIN + "/", depth=1, now=NOW,
                    allowed=_disallow_private) for link in links]
        for site in (kept, unkept)
    ]
    assert verdicts[0] == verdicts[1]
    assert [item is not None for item in verdicts[1]] == [True, False, False, False]
    assert kept.reports and kept.report(ORIGIN).to_dict()["rejected"]
    assert unkept.reports == {}
    assert unkept.report(ORIGIN).to_dict()["urls_found_by_source"] == {}


def test_a_site_that_forgets_what_it_learned_keeps_its_scope() -> None:
    """Discovery's site stays in the cycle's shared client for scope checks until the cycle ends; what its
    admissions learned (URL shapes per host) goes when discovery ends (issue 22), its scope stays."""
    site = Site(Settings.load(), SiteProfile.build(seeds=(ORIGIN + "/",)))
    site.classifier.learn_details([ORIGIN + f"/a/story-{i}" for i in range(5)])  # what discovery teaches it
    assert site.classifier.learned == 5
    scope = [site.in_scope(url) for url in (ORIGIN + "/a/story-9", "https://elsewhere.example/y")]
    site.forget_learned()
    assert site.classifier.learned == 0
    assert [site.in_scope(url) for url in (ORIGIN + "/a/story-9", "https://elsewhere.example/y")] == scope
    assert scope == [True, False]
