"""A test web's days on the harvester's clock, and how far a harvest's snapshot is from the site.

The test web changes each day between 00:00 and 06:00 of its own calendar (``BASE_EPOCH + day * DAY_S``); a
scheduled run starts later that day. ``run_at`` is the harvester clock's reading for such a run, and
``snapshot_gap`` compares what ``export --latest`` would write with what the site holds at that moment:
pages missing, pages deleted but still live, and pages held in an old version, split by whether the site
announced the change (a newer sitemap lastmod, or an entry in an Atom head ordered by ``updated``) or not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from harvester.frontier import FrontierStore
from harvester.testing.sites import BASE_EPOCH, DAY_S
from harvester.testing.web import TestWeb

_VERSION = re.compile(r'W/"p(\d+)v(\d+)(?:s\d+)?"')


def run_at(day: int, *, hour: float = 7.0, shift_s: float = 0.0) -> datetime:
    """The harvester clock at ``hour`` o'clock of the test web's ``day``, ``shift_s`` seconds either side."""
    return datetime.fromtimestamp(BASE_EPOCH + day * DAY_S, UTC) + timedelta(hours=hour, seconds=shift_s)


@dataclass
class SnapshotGap:
    """How the latest stored version of every page differs from the site now (URLs, per kind of difference)."""

    expected: int = 0
    missing: set[str] = field(default_factory=set)
    still_live: set[str] = field(default_factory=set)
    stale_announced: set[str] = field(default_factory=set)
    stale_unannounced: set[str] = field(default_factory=set)

    @property
    def equal(self) -> bool:
        """The snapshot equals the site, bar changes the site never announced (their staleness is bounded by
        the revisit schedule, measured apart)."""
        return not (self.missing or self.still_live or self.stale_announced)

    def summary(self) -> str:
        return (f"{self.expected} pages: missing {len(self.missing)}, deleted but live {len(self.still_live)}, "
                f"old version {len(self.stale_announced)} announced + {len(self.stale_unannounced)} unannounced")


def site_versions(web: TestWeb, *, user_agent: str | None = "harvester") -> dict[str, int]:
    """Every live detail page robots.txt lets ``user_agent`` fetch → its version now (the ETag the test web
    serves for it is ``W/"p<id>v<version>"``)."""
    out: dict[str, int] = {}
    for name in web.names:
        truth = web.truth[name]
        for page in truth.model.pages:
            url = truth.origin + page.path
            if page.live and truth.is_allowed(url, user_agent):
                out[url] = page.version
    return out


def snapshot_gap(store: FrontierStore, web: TestWeb, *, user_agent: str | None = "harvester") -> SnapshotGap:
    """Compare the stored snapshot (``iter_pages(latest=True)``: what ``export --latest`` writes) with the site.

    Expected: every live detail page robots.txt lets ``user_agent`` fetch. A page's version is read from the
    ETag the test web serves (``W/"p<id>v<version>"``), so no body needs decoding."""
    gap = SnapshotGap()
    announced = {url for name in web.names for url in web.truth[name].announced_urls()}
    site = {url: (version, url in announced) for url, version in site_versions(web, user_agent=user_agent).items()}
    gap.expected = len(site)
    held: dict[str, int] = {}
    for stored in store.iter_pages(latest=True):
        match = _VERSION.fullmatch(stored.etag or "")
        if match is not None:
            held[stored.url] = int(match.group(2))
    for url, (version, told) in site.items():
        if url not in held:
            gap.missing.add(url)
        elif held[url] != version:
            (gap.stale_announced if told else gap.stale_unannounced).add(url)
    gap.still_live = set(held) - set(site)
    return gap


__all__ = ["SnapshotGap", "run_at", "site_versions", "snapshot_gap"]
