"""score(): ordering properties (kind, source, priority, recency, depth, truthfulness, profile rules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from harvester.records import Source, UrlKind
from harvester.rules.scoring import recency, score
from harvester.site_profile import ScoreRule, SiteProfile

NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
URL = "https://h.org/articles/x-1"

_kinds = st.sampled_from(list(UrlKind))
_sources = st.sampled_from(list(Source))
_depths = st.integers(min_value=0, max_value=50)
_priorities = st.one_of(st.none(), st.floats(min_value=0, max_value=1))
_ages = st.floats(min_value=0, max_value=20 * 365)
_truth = st.one_of(st.none(), st.floats(min_value=0, max_value=1))


def s(**overrides: object) -> float:
    args: dict[str, object] = {
        "kind": UrlKind.DETAIL,
        "source": Source.SITEMAP,
        "depth": 0,
        "priority": None,
        "lastmod": None,
        "now": NOW,
        "profile": None,
    }
    args.update(overrides)
    return score(URL, **args)  # type: ignore[arg-type]


@given(_sources, _depths, _priorities, _ages, _truth)
def test_detail_outranks_listing_at_equal_inputs(
    source: Source, depth: int, prio: float | None, age: float, truth: float | None
) -> None:
    common = {
        "source": source,
        "depth": depth,
        "priority": prio,
        "lastmod": NOW - timedelta(days=age),
        "truthfulness": truth,
    }
    assert s(kind=UrlKind.DETAIL, **common) > s(kind=UrlKind.LISTING, **common)


@given(_kinds, _depths, _priorities)
def test_sitemap_and_feed_sources_outrank_plain_links(kind: UrlKind, depth: int, prio: float | None) -> None:
    for published in (Source.SITEMAP, Source.FEED):
        assert s(kind=kind, source=published, depth=depth, priority=prio) > s(
            kind=kind, source=Source.LINK, depth=depth, priority=prio
        )
        assert s(kind=kind, source=published, depth=depth) > s(kind=kind, source=Source.LISTING, depth=depth)


@given(_kinds, _sources, _depths, st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1))
def test_monotone_in_priority(kind: UrlKind, source: Source, depth: int, p1: float, p2: float) -> None:
    low, high = sorted((p1, p2))
    assert s(kind=kind, source=source, depth=depth, priority=high) >= s(
        kind=kind, source=source, depth=depth, priority=low
    )


@given(_kinds, _sources, _ages, _ages, _truth)
def test_monotone_in_recency(kind: UrlKind, source: Source, a1: float, a2: float, truth: float | None) -> None:
    newer, older = sorted((a1, a2))
    kwargs = {"kind": kind, "source": source, "truthfulness": truth}
    assert s(lastmod=NOW - timedelta(days=newer), **kwargs) >= s(lastmod=NOW - timedelta(days=older), **kwargs)


def test_recency_is_strict_where_it_matters() -> None:
    days = [0, 1, 7, 30, 365, 5 * 365]
    values = [s(lastmod=NOW - timedelta(days=d)) for d in days]
    assert values == sorted(values, reverse=True)
    assert len(set(values)) == len(values)
    assert s(lastmod=NOW - timedelta(days=1)) > s(lastmod=None)


@given(_kinds, _sources, _depths, _depths)
def test_depth_penalty(kind: UrlKind, source: Source, d1: int, d2: int) -> None:
    shallow, deep = sorted((d1, d2))
    assert s(kind=kind, source=source, depth=shallow) >= s(kind=kind, source=source, depth=deep)
    if deep > shallow:
        assert s(kind=kind, source=source, depth=shallow) > s(kind=kind, source=source, depth=deep)


def test_truthfulness_weights_recency() -> None:
    fresh = NOW - timedelta(hours=1)
    believed, doubted, ignored = (s(lastmod=fresh, truthfulness=t) for t in (1.0, 0.5, 0.0))
    assert believed > doubted > ignored
    assert ignored == s(lastmod=None)
    assert s(lastmod=fresh, truthfulness=None) == believed  # unknown: taken at face value


def test_future_lastmod_is_not_rewarded_beyond_now() -> None:
    assert s(lastmod=NOW + timedelta(days=300)) == s(lastmod=NOW)
    assert recency(NOW, NOW) == 1.0
    assert recency(None, NOW) == 0.0


def test_naive_datetimes_are_taken_as_utc() -> None:
    naive = datetime(2026, 5, 1)
    assert s(lastmod=naive) == s(lastmod=naive.replace(tzinfo=UTC))


def test_profile_score_rules_add_boosts() -> None:
    profile = SiteProfile(
        seeds=("https://h.org/",),
        score_rules=(ScoreRule(pattern=r"/articles/", boost=5), ScoreRule(pattern=r"-1$", boost=-1.5)),
    )
    assert s(profile=profile) - s(profile=None) == 3.5
    other = SiteProfile(seeds=("https://h.org/",), score_rules=(ScoreRule(pattern=r"/nomatch/", boost=50),))
    assert s(profile=other) == s(profile=None)


def test_out_of_range_priority_is_clamped() -> None:
    assert s(priority=7.0) == s(priority=1.0)
    assert s(priority=-1.0) == s(priority=0.0)
    assert s(priority=0.5) == s(priority=None)
