"""The per-host discovery report: what each source found, how they overlap, what was refused and why.

Pure accumulation (the lead's phase feeds it as it goes) and a JSON-able ``to_dict``; never fetches, never
touches SQL. Memory is bounded: overlap and lastmod statistics stop growing after fixed caps and say so.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from harvester.records import Source
from harvester.runtime import aware

MAX_TRACKED_URLS = 200_000
"""URLs whose source set is tracked for the overlap table; beyond it overlap is computed on the first ones."""

MAX_LASTMOD_VALUES = 10_000
"""Distinct lastmod values counted; beyond it the distinct count is a lower bound."""

MAX_PROBLEMS = 200


STAMPED_NOW_S = 3600.0
"""A lastmod within this of the sitemap fetch time was most likely stamped at request time, not by an edit."""


def _source_kind(source: Source | str) -> str:
    """``sitemap:https://h/s.xml`` → ``sitemap``; a Source member → its value."""
    text = source.value if isinstance(source, Source) else str(source)
    return text.split(":", 1)[0]


@dataclass(slots=True)
class SitemapFileReport:
    url: str
    kind: str
    entries: int = 0
    over_limit: bool = False
    problems: list[str] = field(default_factory=list)
    not_modified: bool = False


@dataclass(slots=True)
class DiscoveryReport:
    """One host's discovery, as counts. ``verdict`` strings come from ``UrlFilter`` ("out_of_scope",
    "trap:calendar", ...) or from the phase ("disallowed" for robots.txt, "invalid" for URLs that
    did not canonicalize); None means the URL was queued."""

    host: str
    found: Counter[str] = field(default_factory=Counter)
    queued: Counter[str] = field(default_factory=Counter)
    rejected: Counter[str] = field(default_factory=Counter)
    rejected_by_source: dict[str, Counter[str]] = field(default_factory=dict)
    sitemaps: list[SitemapFileReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    lastmod_entries: int = 0
    lastmod_missing: int = 0
    lastmod_future: int = 0
    lastmod_stamped_now: int = 0
    refused: dict[str, dict[str, str | None]] = field(default_factory=dict, repr=False)
    """The URLs of this host robots.txt refused and not written yet, by the provenance label of the document naming
    them (canonical -> the spelling it judged, None: the same): the step reading that document takes them
    (``take_refused``) and writes them with it, a sitemap's a batch at a time, so none is held for long."""
    _sources_of: dict[int, int] = field(default_factory=dict, repr=False)
    _source_bits: dict[str, int] = field(default_factory=dict, repr=False)
    _lastmods: Counter[datetime] = field(default_factory=Counter, repr=False)
    _overlap_truncated: bool = False
    _lastmod_truncated: bool = False

    # -- accumulation

    def add_entry(
        self,
        source: Source | str,
        url: str,
        verdict: str | None,
        *,
        lastmod: datetime | None = None,
        fetched_at: datetime | None = None,
        has_lastmod_field: bool | None = None,
    ) -> None:
        """One URL found by ``source`` and what became of it. ``lastmod`` only for sitemap/feed entries.

        ``fetched_at`` (when the document carrying it was fetched) lets request-time stamped lastmods be spotted.
        """
        kind = _source_kind(source)
        self.found[kind] += 1
        if verdict is None:
            self.queued[kind] += 1
        else:
            self.rejected[str(verdict)] += 1
            self.rejected_by_source.setdefault(kind, Counter())[str(verdict)] += 1
        self._track_source(url, kind)
        if kind in ("sitemap", "feed") and has_lastmod_field is not False:
            self._track_lastmod(lastmod, fetched_at)

    def add_refused(self, label: str, refused: dict[str, str | None]) -> None:
        """URLs robots.txt refused (canonical -> the spelling it judged, or None) that the document of provenance
        ``label`` names, kept until taken (``take_refused``)."""
        self.refused.setdefault(label, {}).update(refused)

    def take_refused(self, label: str) -> dict[str, str | None]:
        """The refused URLs ``label`` named since the last call, no longer kept here."""
        return self.refused.pop(label, {})

    def add_unfetched(self, source: Source | str, verdict: str) -> None:
        """A queued URL of ``source`` completed without a request for ``verdict`` (a facet variant whose parameter
        turned out to add nothing while it waited): a refusal, though it was counted as found and queued."""
        kind = _source_kind(source)
        self.rejected[verdict] += 1
        self.rejected_by_source.setdefault(kind, Counter())[verdict] += 1

    def add_entries(
        self,
        source: Source | str,
        urls: list[str],
        rejected: Counter[str],
        queued: int,
        *,
        lastmods: list[datetime | None],
        fetched_at: datetime | None,
    ) -> None:
        """``add_entry`` for a batch from one source: ``urls`` all found, ``rejected`` counted by verdict, the
        rest (``queued``) queued; ``lastmods`` are the values to track (None for a missing one)."""
        if not urls:
            return
        kind = _source_kind(source)
        self.found[kind] += len(urls)
        if queued:
            self.queued[kind] += queued
        if rejected:
            self.rejected.update(rejected)
            self.rejected_by_source.setdefault(kind, Counter()).update(rejected)
        bit = self._source_bits.get(kind)
        if bit is None:
            bit = self._source_bits[kind] = 1 << len(self._source_bits)
        sources_of = self._sources_of
        for url in urls:
            key = hash(url)
            current = sources_of.get(key)
            if current is not None:
                sources_of[key] = current | bit
            elif len(sources_of) < MAX_TRACKED_URLS:
                sources_of[key] = bit
            else:
                self._overlap_truncated = True
        if kind in ("sitemap", "feed"):
            for lastmod, count in Counter(lastmods).items():
                self._track_lastmod(lastmod, fetched_at, count)

    def add_sitemap(
        self,
        url: str,
        kind: str,
        *,
        entries: int = 0,
        over_limit: bool = False,
        problems: list[str] | None = None,
        not_modified: bool = False,
    ) -> None:
        """One sitemap file read (or answered 304: ``not_modified``)."""
        self.sitemaps.append(
            SitemapFileReport(
                url=url,
                kind=kind,
                entries=entries,
                over_limit=over_limit,
                problems=list(problems or [])[:20],
                not_modified=not_modified,
            )
        )

    def add_problem(self, message: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(message)

    def add_rejections(self, counts: dict[str, int], *, source: str = "link") -> None:
        """Merge counts kept elsewhere (``UrlFilter.counts``) without per-URL calls; "ok" is skipped."""
        for verdict, count in counts.items():
            if verdict != "ok" and count:
                self.rejected[verdict] += count
                self.rejected_by_source.setdefault(source, Counter())[verdict] += count

    def _track_source(self, url: str, kind: str) -> None:
        bit = self._source_bits.get(kind)
        if bit is None:
            bit = 1 << len(self._source_bits)
            self._source_bits[kind] = bit
        key = hash(url)
        current = self._sources_of.get(key)
        if current is None:
            if len(self._sources_of) >= MAX_TRACKED_URLS:
                self._overlap_truncated = True
                return
            self._sources_of[key] = bit
        else:
            self._sources_of[key] = current | bit

    def _track_lastmod(self, lastmod: datetime | None, fetched_at: datetime | None, count: int = 1) -> None:
        self.lastmod_entries += count
        if lastmod is None:
            self.lastmod_missing += count
            return
        lastmod = aware(lastmod)
        if fetched_at is not None:
            fetched_at = aware(fetched_at)
            if lastmod > fetched_at + timedelta(days=1):
                self.lastmod_future += count
            elif abs((fetched_at - lastmod).total_seconds()) <= STAMPED_NOW_S:
                self.lastmod_stamped_now += count
        if lastmod in self._lastmods or len(self._lastmods) < MAX_LASTMOD_VALUES:
            self._lastmods[lastmod] += count
        else:
            self._lastmod_truncated = True

    # -- derived figures

    @property
    def unique_urls(self) -> int:
        return len(self._sources_of)

    def overlap(self) -> dict[str, int]:
        """URLs per combination of sources, e.g. {"sitemap": 80, "feed+sitemap": 15, "listing": 5}."""
        names = sorted(self._source_bits, key=lambda name: self._source_bits[name])
        combos: Counter[int] = Counter(self._sources_of.values())
        out: dict[str, int] = {}
        for mask, count in combos.items():
            label = "+".join(sorted(name for name in names if mask & self._source_bits[name]))
            out[label] = count
        return dict(sorted(out.items()))

    def only_in(self, kind: str) -> int:
        """URLs found by ``kind`` and no other source."""
        bit = self._source_bits.get(kind)
        return 0 if bit is None else sum(1 for mask in self._sources_of.values() if mask == bit)

    def lastmod_truthfulness(self) -> float | None:
        """How far this host's lastmod values can be believed, in [0, 1]; None with too few to judge.

        0 when every entry shares one value or all were stamped at request time (a generator, not an edit
        history); reduced by the share of future and request-time stamps, and by low diversity of values.
        """
        dated = self.lastmod_entries - self.lastmod_missing
        if dated < 5:
            return None
        distinct = len(self._lastmods)
        if distinct <= 1:
            return 0.0
        top_share = self._lastmods.most_common(1)[0][1] / dated
        suspicious = (self.lastmod_future + self.lastmod_stamped_now) / dated
        diversity = min(1.0, distinct / max(1.0, dated * 0.05))
        return max(0.0, min(1.0, (1.0 - top_share) * 0.5 + 0.5 * diversity) * (1.0 - suspicious))

    def lastmod_summary(self) -> dict[str, Any]:
        dated = self.lastmod_entries - self.lastmod_missing
        top = self._lastmods.most_common(1)
        return {
            "entries": self.lastmod_entries,
            "missing": self.lastmod_missing,
            "distinct": len(self._lastmods),
            "distinct_is_lower_bound": self._lastmod_truncated,
            "most_common": top[0][0].isoformat() if top else None,
            "most_common_share": round(top[0][1] / dated, 4) if top and dated else None,
            "identical": bool(dated >= 2 and len(self._lastmods) == 1),
            "future": self.lastmod_future,
            "stamped_at_fetch": self.lastmod_stamped_now,
            "truthfulness": self.lastmod_truthfulness(),
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (what the flows publish as an artifact and ``harvester status`` shows)."""
        traps = {verdict: count for verdict, count in self.rejected.items() if verdict.startswith("trap:")}
        sitemap_rejections = self.rejected_by_source.get("sitemap", Counter())
        return {
            "host": self.host,
            "urls_found_by_source": dict(self.found),
            "urls_queued_by_source": dict(self.queued),
            "unique_urls": self.unique_urls,
            "overlap": self.overlap(),
            "overlap_truncated": self._overlap_truncated,
            "rejected": dict(self.rejected),
            "traps_rejected": traps,
            "sitemap_entries_out_of_scope": sitemap_rejections.get("out_of_scope", 0),
            "sitemap_entries_disallowed": sitemap_rejections.get("disallowed", 0),
            "rejected_by_source": {source: dict(counts) for source, counts in self.rejected_by_source.items()},
            "lastmod": self.lastmod_summary(),
            "sitemaps": [
                {
                    "url": s.url,
                    "kind": s.kind,
                    "entries": s.entries,
                    "over_limit": s.over_limit,
                    "not_modified": s.not_modified,
                    "problems": s.problems,
                }
                for s in self.sitemaps
            ],
            "sitemaps_over_limit": [s.url for s in self.sitemaps if s.over_limit],
            "problems": list(self.problems),
        }


class UnkeptReport(DiscoveryReport):
    """A report that keeps nothing: what ``Site(keep_reports=False)`` hands every admission, for a phase whose
    reports nobody reads (memory per host and per URL admitted, for nothing, otherwise)."""

    __slots__ = ()

    def add_entry(self, source: Source | str, url: str, verdict: str | None, *, lastmod: datetime | None = None,
                  fetched_at: datetime | None = None, has_lastmod_field: bool | None = None) -> None:
        return None

    def add_unfetched(self, source: Source | str, verdict: str) -> None:
        return None

    def add_refused(self, label: str, refused: dict[str, str | None]) -> None:
        return None

    def add_entries(self, source: Source | str, urls: list[str], rejected: Counter[str], queued: int, *,
                    lastmods: list[datetime | None], fetched_at: datetime | None) -> None:
        return None

    def add_sitemap(self, url: str, kind: str, *, entries: int = 0, over_limit: bool = False,
                    problems: list[str] | None = None, not_modified: bool = False) -> None:
        return None

    def add_problem(self, message: str) -> None:
        return None

    def add_rejections(self, counts: dict[str, int], *, source: str = "link") -> None:
        return None
