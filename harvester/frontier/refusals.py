"""The URLs robots.txt refuses, per host: one row per URL whichever sources named it, kept while robots.txt refuses it.

Discovery neither stores nor fetches such a URL, so no URL state counts it; this table is where ``harvester status``
counts them, true on a re-crawl whose sitemaps answer 304 (nothing parsed, nothing refused again).
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from sqlalchemy import func, select

from harvester.frontier.base import Database, Part
from harvester.frontier.keys import Keys
from harvester.frontier.models import Host, RobotsRefusal
from harvester.runtime import utcnow


class Refusals(Part):
    """``robots_refusals``: what a host's discovery found refused, less what robots.txt allows again."""

    def __init__(self, db: Database, keys: Keys) -> None:
        super().__init__(db)
        self._keys = keys

    def keep_refused(self, origin: str, found: Mapping[str, str | None], allowed: Callable[[str], bool], *,
                     now: datetime | None = None) -> int:
        """Record ``found`` (canonical URL of ``origin`` -> the spelling robots.txt judged, None: the same) as
        refused, and drop the host's recorded URLs that ``allowed`` (robots.txt's verdict now) lets through: a
        robots.txt that changed counts as it rules now, whether or not the documents naming them were read again.
        Returns how many URLs of the host are refused now."""
        d = self._d
        now = now or utcnow()
        with self._tx() as tx:
            host_id = self._keys.host_ids(tx, [origin])[origin]
            start = len(origin)
            rows = [(host_id, url[start:], judged, d.ts(now)) for url, judged in found.items()
                    if url.startswith(origin + "/")]
            for begin in range(0, len(rows), self._chunk):
                tx.conn.exec_driver_sql(
                    d.insert_ignore("robots_refusals", ("host_id", "path", "judged", "found_at"), ("host_id", "path")),
                    rows[begin : begin + self._chunk],
                )
            kept = tx.conn.execute(
                select(RobotsRefusal.path, RobotsRefusal.judged).where(RobotsRefusal.host_id == host_id)
            ).all()
            lifted = [path for path, judged in kept if allowed(judged or origin + path)]
            for begin in range(0, len(lifted), self._chunk):
                where, params = d.any_of("path", lifted[begin : begin + self._chunk])
                tx.conn.exec_driver_sql(f"DELETE FROM robots_refusals WHERE host_id = {d.p} AND {where}",
                                        (host_id, *params))
        return len(kept) - len(lifted)

    def refused_counts(self) -> dict[str, int]:
        """Per host (origin), the URLs robots.txt refuses (``keep_refused``); hosts with none are left out."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Host.origin, func.count()).join(RobotsRefusal, RobotsRefusal.host_id == Host.id)
                .group_by(Host.origin)
            ).all()
        return {str(origin): int(n) for origin, n in rows}
