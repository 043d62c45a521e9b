"""The one place the crawl's priorities live: a float score per discovered URL, higher fetched first.

Pure arithmetic over what discovery knows (kind, source, depth, sitemap priority, lastmod, profile rules);
never fetches, never touches SQL. Ties are broken by the store (by id), not here.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from harvester.records import Source, UrlKind
from harvester.runtime import aware
from harvester.site_profile import ScoreRule, SiteProfile

KIND_WEIGHT: dict[UrlKind, float] = {
    UrlKind.DETAIL: 10.0,  # the harvest itself
    UrlKind.FEED: 6.0,  # cheap, and each one names many fresh details
    UrlKind.SITEMAP: 6.0,
    UrlKind.LISTING: 4.0,  # only a way to reach details
}
"""Base score per kind: at equal source, depth, priority and lastmod, a detail ranks above a listing."""

SOURCE_WEIGHT: dict[Source, float] = {
    Source.SEED: 4.0,  # the operator named it
    Source.FEED: 3.5,  # feeds list what is new
    Source.SITEMAP: 3.0,  # the site says it exists
    Source.ROBOTS: 3.0,
    Source.REDIRECT: 1.5,
    Source.LISTING: 1.0,
    Source.PAGINATION: 0.5,  # below the page that links to it, so a list is claimed from its first page on
    Source.LINK: 0.0,
}
"""Sitemap and feed sources above plain links: the site published them on purpose."""

PRIORITY_WEIGHT = 4.0
"""Score per unit of sitemap ``<priority>`` away from the protocol default 0.5: ±2 at the extremes."""

RECENCY_WEIGHT = 3.0
"""Score of a URL modified just now (with fully truthful lastmod values)."""

RECENCY_HALF_LIFE_DAYS = 14.0
"""Half the short-term recency bonus is gone after this many days; a slow year-scale term keeps ordering."""

DEPTH_PENALTY = 0.5
"""Score lost per hop from a seed."""

DEFAULT_TRUTHFULNESS = 1.0
"""Weight of lastmod recency when the host's lastmod truthfulness is unknown."""


def recency(lastmod: datetime | None, now: datetime) -> float:
    """A value in [0, 1]: 1 for modified now (or in the future: clock skew), falling monotonically with age."""
    if lastmod is None:
        return 0.0
    age_days = max(0.0, (aware(now) - aware(lastmod)).total_seconds() / 86_400.0)
    # Two scales: days (a news cycle) and years (so a 2019 page still ranks above a 2015 one).
    return (2.0 * math.pow(2.0, -age_days / RECENCY_HALF_LIFE_DAYS) + 1.0 / (1.0 + age_days / 365.0)) / 3.0


def base_score(kind: UrlKind, source: Source, depth: int, priority: float | None) -> float:
    """The part of ``score`` that needs neither the URL nor the date: batch admission reuses it as is."""
    value = KIND_WEIGHT.get(kind, 0.0) + SOURCE_WEIGHT.get(source, 0.0) - DEPTH_PENALTY * max(0, depth)
    if priority is not None:
        value += PRIORITY_WEIGHT * (min(1.0, max(0.0, priority)) - 0.5)
    return value


def recency_bonus(lastmod: datetime, now: datetime, truthfulness: float | None) -> float:
    """The score a lastmod adds, weighted by how far the host's lastmods can be believed (one value per date:
    a sitemap repeats a few dates over thousands of URLs, so batch admission computes it once per date)."""
    weight = DEFAULT_TRUTHFULNESS if truthfulness is None else min(1.0, max(0.0, truthfulness))
    return RECENCY_WEIGHT * weight * recency(lastmod, now)


_compiled_rules: dict[tuple[ScoreRule, ...], list[tuple[re.Pattern[str], float]]] = {}


def _rules(profile: SiteProfile | None) -> list[tuple[re.Pattern[str], float]]:
    if profile is None or not profile.score_rules:
        return []
    rules = profile.score_rules
    compiled = _compiled_rules.get(rules)
    if compiled is None:
        if len(_compiled_rules) > 256:
            _compiled_rules.clear()
        compiled = [(re.compile(rule.pattern), rule.boost) for rule in rules]
        _compiled_rules[rules] = compiled
    return compiled


def score(
    url: str,
    *,
    kind: UrlKind,
    source: Source,
    depth: int,
    priority: float | None,
    lastmod: datetime | None,
    now: datetime,
    profile: SiteProfile | None,
    truthfulness: float | None = None,
) -> float:
    """Higher is fetched first. Monotone: newer lastmod and higher priority never lower it; depth never raises it.

    ``truthfulness`` in [0, 1] is how far this host's lastmod values can be believed (see
    ``DiscoveryReport.lastmod_truthfulness``); 0 ignores lastmod entirely. Profile ``score_rules`` whose
    pattern is found in the URL add their boost.
    """
    value = base_score(kind, source, depth, priority)
    if lastmod is not None:
        value += recency_bonus(lastmod, now, truthfulness)
    return with_rules(value, url, profile)


def with_rules(value: float, url: str, profile: SiteProfile | None) -> float:
    """``value`` plus the boost of every profile rule whose pattern is found in ``url``."""
    for pattern, boost in _rules(profile):
        if pattern.search(url) is not None:
            value += boost
    return value
