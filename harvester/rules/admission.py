"""One site's URL pipeline: canonicalize → scope, traps and budget → robots.txt → classify → score.

Every URL that discovery or extraction finds passes through ``Site.admit`` once, so the rules live in one
place and every refusal is counted by class in the host's discovery report. Never fetches, never speaks SQL.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from harvester.records import DiscoveredUrl, Source, UrlKind, origin_of, provenance
from harvester.rules import scoring
from harvester.rules.classify import ROOT_ITEM, LinkClassifier
from harvester.rules.facets import FacetLearner
from harvester.rules.report import DiscoveryReport, UnkeptReport
from harvester.rules.scope import UrlFilter
from harvester.rules.urls import CANONICAL_VERSION, canonicalizer_for
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

__all__ = ["CANONICAL_VERSION", "Site"]

Allowed = Callable[[str], bool]
"""robots.txt's verdict for a canonical URL of the host being discovered."""


class Site:
    """Per-site state shared by all hosts of one run: the filter's counters and the learned URL shapes."""

    def __init__(self, settings: Settings, profile: SiteProfile, *, keep_reports: bool = True) -> None:
        """``keep_reports`` False: admissions count nothing per host (``UnkeptReport``), for a phase that never
        reads ``reports`` (extraction admits every outlink of every page: a report per host it ever served, with a
        key per URL, was kept for nothing)."""
        self.settings = settings
        self._unkept = None if keep_reports else UnkeptReport(host="")
        self.profile = profile
        self.canonicalize = canonicalizer_for(settings.urls)
        self.fetch_form = self.canonicalize.fetch_form
        self.filter = UrlFilter(settings, profile)
        self.classifier, self.facets = self._learners()
        self.reports: dict[str, DiscoveryReport] = {}
        self.truthfulness: dict[str, float | None] = {}
        origins: dict[str, None] = {}
        for seed in profile.seeds:
            canonical = self.canonicalize(seed)
            if canonical is not None:
                origins[origin_of(canonical)] = None
        self.origins = list(origins)
        self.moved: dict[str, str] = {}
        """Seed origin -> the origin its homepage redirects to (in scope like a seed host; persisted by the store
        as ``hosts.moved_to`` and loaded by every phase)."""

    def _learners(self) -> tuple[LinkClassifier, FacetLearner]:
        urls = self.settings.urls
        return LinkClassifier(self.profile), FacetLearner(
            urls.facet_params, urls.listing_presentation_params,
            useless_after=self.settings.discovery.facet_useless_after,
        )

    def forget_learned(self) -> None:
        """The phase that admitted through this site has ended; only its scope is still asked (a cycle's shared
        client checks redirect hops against every phase's site until the cycle ends). What admissions learned (URL
        shapes per host, facet statistics) goes: discovery's, kept through all of extraction, was a few KB per
        host (issue 22: memory with the number of hosts)."""
        self.classifier, self.facets = self._learners()

    def add_moved(self, moved: dict[str, str]) -> None:
        """Seed hosts that moved (``FrontierStore.moved_hosts``): their new origins join the scope."""
        for origin, target in moved.items():
            if origin in self.origins:
                self.moved[origin] = target
                self.filter.add_host(target)

    def report(self, origin: str) -> DiscoveryReport:
        if self._unkept is not None:
            return self._unkept
        report = self.reports.get(origin)
        if report is None:
            report = self.reports[origin] = DiscoveryReport(host=origin)
        return report

    def in_scope(self, url: str) -> bool:
        """For redirect hops and documents: scope only, no budget or trap counting."""
        canonical = self.canonicalize(url)
        return canonical is not None and self.filter.in_scope(canonical)

    def owns(self, origin: str) -> bool:
        """Whether a frontier host is this profile's (its seeds', those they moved to, those its scope takes in):
        the one rule a run extracts by and its artifacts (progress, status, Frontier by state) count by, so that a
        frontier several sites share never mixes their hosts."""
        return self.in_scope(origin + "/")

    def seeds_of(self, origin: str) -> list[str]:
        """The profile's seed URLs on ``origin``, canonical."""
        found = []
        for seed in self.profile.seeds:
            canonical = self.canonicalize(seed)
            if canonical is not None and origin_of(canonical) == origin:
                found.append(canonical)
        return found

    def admit(
        self,
        raw: str,
        *,
        base: str | None,
        source: Source,
        where: str,
        depth: int,
        now: datetime,
        allowed: Allowed | None = None,
        kind: UrlKind | None = None,
        lastmod: datetime | None = None,
        lastmod_until: datetime | None = None,
        published: datetime | None = None,
        changefreq: str | None = None,
        priority: float | None = None,
        meta: dict[str, Any] | None = None,
        trusted: bool = False,
        fetched_at: datetime | None = None,
        report_to: str | None = None,
        canonical: str | None = None,
    ) -> DiscoveredUrl | None:
        """The frontier record for ``raw``, or None when it is refused (the reason counted in the report).

        ``kind`` None: a published entry (``trusted``) is a detail unless plainly a listing (``published_kind``);
        a link is classified by the learned shapes. ``allowed`` is robots.txt of the host being discovered;
        URLs of other hosts are checked against their own robots.txt by the fetch engine before any request.
        ``trusted`` marks finite published lists (sitemaps, feeds), which the calendar and facet trap counters
        do not apply to. ``lastmod`` is a modification date (stored, and compared with our copy to predict
        changes); ``published`` a publication date, which only scores recency when no lastmod is given.
        ``canonical``: ``canonicalize(raw, base)``, when the caller has it already (a page's outlinks).
        """
        label = provenance(source, where)
        url = canonical if canonical is not None else self.canonicalize(raw, base)
        host = report_to or (origin_of(url) if url else origin_of(base or raw))
        report = self.report(host)
        if url is None:
            report.add_entry(label, raw, "invalid")
            return None
        fetch = self._written(raw, base, url)
        verdict: str | None = self.filter.check(url, trusted=trusted)
        if verdict is None and allowed is not None and origin_of(url) == host and not allowed(fetch or url):
            verdict = "disallowed"
            report.add_refused(label, {url: fetch})
        report.add_entry(
            label, url, verdict, lastmod=lastmod, fetched_at=fetched_at,
            has_lastmod_field=lastmod is not None if source in (Source.SITEMAP, Source.FEED) else None,
        )
        if verdict is not None:
            return None
        if kind is None:
            kind = self._published_kind(url) if trusted else (self.classifier.classify(url) or UrlKind.DETAIL)
        value = scoring.score(
            url, kind=kind, source=source, depth=depth, priority=priority, lastmod=lastmod or published, now=now,
            profile=self.profile, truthfulness=self.truthfulness.get(origin_of(url)),
        )
        return DiscoveredUrl(
            url=url, kind=kind, source=label, depth=depth, score=value, lastmod=lastmod, changefreq=changefreq,
            priority=priority, meta=meta, fetch_url=fetch,
            lastmod_until=lastmod_until if lastmod is not None else None,
        )

    def _written(self, raw: str, base: str | None, url: str) -> str | None:
        """The site's spelling of ``url`` when it differs from the key (``Canonicalizer.fetch_form``), else None.
        Only a query of two or more parameters can differ, so most URLs cost one ``in`` test here."""
        if "&" not in url.partition("?")[2]:
            return None
        fetch = self.fetch_form(raw, base)
        return fetch if fetch != url else None

    def admit_published(
        self,
        entries: Iterable[Any],
        *,
        where: str,
        origin: str,
        now: datetime,
        fetched_at: datetime,
        allowed: Allowed | None,
        source: Source = Source.SITEMAP,
        depth: int = 1,
    ) -> list[DiscoveredUrl]:
        """``admit`` for a run of entries one sitemap (or feed) of ``origin`` publishes: the same verdicts, counts
        and records, in one pass.

        Sitemaps list up to 50,000 URLs per file, so per-URL call layers dominate ingestion: here the report is
        fed once per batch, lastmods are digested once per distinct value (sites repeat a few dates), and the
        kind and score are worked out inline. Entries need ``loc``, ``lastmod``, ``changefreq``, ``priority``
        and optionally ``news`` and ``images`` (``SitemapEntry``). ``tests/rules/test_admission.py`` proves it agrees
        with ``admit`` entry by entry.
        """
        label = provenance(source, where)
        report = self.report(origin)
        canonicalize, check = self.canonicalize, self.filter.check
        same_host = origin + "/"
        verdicts: Counter[str] = Counter()
        tracked: list[str] = []
        lastmods: list[datetime | None] = []
        admitted: list[tuple[str, Any, str | None]] = []
        refused: dict[str, str | None] = {}
        for entry in entries:
            url = canonicalize(entry.loc, where)
            if url is None:
                verdicts["invalid"] += 1
                tracked.append(entry.loc)
                lastmods.append(None)  # as ``admit``: counted as an entry without a readable lastmod
                continue
            fetch = self._written(entry.loc, where, url) if "?" in url else None
            verdict: str | None = check(url, trusted=True)
            if verdict is None and allowed is not None and url.startswith(same_host) and not allowed(fetch or url):
                verdict = "disallowed"
                refused[url] = fetch
            tracked.append(url)
            if entry.lastmod is not None:
                lastmods.append(entry.lastmod)
            if verdict is not None:
                verdicts[verdict] += 1
            else:
                admitted.append((url, entry, fetch))
        report.add_entries(label, tracked, verdicts, len(admitted), lastmods=lastmods, fetched_at=fetched_at)
        if refused:
            report.add_refused(label, refused)
        return self._published_records(admitted, label, origin, source, depth, now)

    def _published_records(
        self, admitted: list[tuple[str, Any, str | None]], label: str, origin: str, source: Source, depth: int,
        now: datetime,
    ) -> list[DiscoveredUrl]:
        """The frontier records of admitted published entries: ``scoring.score`` split so its date part is
        computed once per distinct lastmod and its URL part (profile rules) only when the profile has rules."""
        profile = self.profile
        plain = not (profile.listing_patterns or profile.detail_patterns)
        rules = bool(profile.score_rules)
        bonuses: dict[tuple[str, datetime], float] = {}
        bases: dict[tuple[UrlKind, float | None], float] = {}  # a sitemap repeats a few priorities
        records: list[DiscoveredUrl] = []
        same_host = origin + "/"
        for url, entry, fetch in admitted:
            kind = UrlKind.DETAIL if plain and _plainly_detail(url) else self._published_kind(url)
            lastmod, priority = entry.lastmod, entry.priority
            value = bases.get((kind, priority))
            if value is None:
                value = bases[(kind, priority)] = scoring.base_score(kind, source, depth, priority)
            if lastmod is not None:
                host = origin if url.startswith(same_host) else origin_of(url)
                bonus = bonuses.get((host, lastmod))
                if bonus is None:
                    bonus = scoring.recency_bonus(lastmod, now, self.truthfulness.get(host))
                    bonuses[(host, lastmod)] = bonus
                value += bonus
            if rules:
                value = scoring.with_rules(value, url, profile)
            news, images = getattr(entry, "news", None), getattr(entry, "images", None)
            meta = {"news": news, "images": list(images or ())[:50]} if news or images else None
            records.append(
                DiscoveredUrl(
                    url=url, kind=kind, source=label, depth=depth, score=value, lastmod=lastmod,
                    changefreq=entry.changefreq, priority=priority, meta=meta, fetch_url=fetch,
                    lastmod_until=getattr(entry, "lastmod_until", None) if lastmod is not None else None,
                )
            )
        return records

    def published_kind(self, url: str) -> UrlKind:
        """Kind of a URL a site lists in a sitemap or feed: a detail unless it is plainly a listing page.

        Sitemaps also list homepages and ``?page=N`` archives; everything else they publish is content, even
        where its path looks like pagination (``/p/12`` is a post on many blogs) or is the root with an item's
        query (``/?p=123``, WordPress's default permalink). Profile patterns override.
        """
        return self._published_kind(self.canonicalize(url) or url)

    def _published_kind(self, canonical: str) -> UrlKind:
        parts = urlsplit(canonical)
        root = (parts.path or "/") == "/"
        if (root and not ROOT_ITEM.search(parts.query)) or (parts.query and _PAGE_QUERY.search(parts.query)):
            return UrlKind.LISTING
        if self.profile.listing_patterns or self.profile.detail_patterns:
            return self.classifier.classify(canonical) or UrlKind.DETAIL
        return UrlKind.DETAIL


_PAGE_QUERY = re.compile(r"(?:^|&)(?:page|pg|paged|offset|start)=\d+(?:&|$)", re.IGNORECASE)
"""A published URL's query that pages a list. Not ``p=``: WordPress's default permalink is ``/?p=123``, a post."""



def _plainly_detail(canonical: str) -> bool:
    """A canonical URL with a path beyond "/" or an item's query at the root, and no pagination query: what
    ``_published_kind`` calls a detail without a profile, by string scan (no ``urlsplit``)."""
    slash = canonical.find("/", canonical.find("://") + 3)
    if slash < 0:
        return False
    path, _, query = canonical[slash:].partition("?")
    return (path != "/" or bool(ROOT_ITEM.search(query))) and not (query and _PAGE_QUERY.search(query))
