"""Per-host state that outlives a run: robots.txt, politeness learned, moves, lastmod truthfulness."""


from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Mapped

from harvester.errors import InvalidRecord
from harvester.frontier.base import Database, Part
from harvester.frontier.keys import Keys
from harvester.frontier.models import (
    Host,
)
from harvester.frontier.rows import ORIGIN
from harvester.records import (
    ErrorClass,
    HostPolicy,
    RobotsState,
)
from harvester.runtime import aware

logger = logging.getLogger(__name__)

Reasked = tuple[int, int, "datetime | None"]
"""A host's contradicting 304s of one batch: (re-asks decided, re-asks that found a change, when the last was
decided: ``hosts.reasks_tested_at``)."""


def write_reasks(conn: Connection, reasks: Mapping[str, Reasked]) -> None:
    """Add each host's re-asks and their findings to its record, in the caller's transaction: the one writing the
    completions that carry those decisions (``Outcomes.complete_many``), so a kill -9 keeps both or neither."""
    for origin, (asked, changed, tested) in reasks.items():
        values: dict[Any, Any] = {Host.lastmod_reasks: Host.lastmod_reasks + asked,
                                  Host.lastmod_reasks_changed: Host.lastmod_reasks_changed + changed}
        if tested is not None:
            values[Host.reasks_tested_at] = tested
        conn.execute(update(Host).where(Host.origin == origin).values(values))


class Hosts(Part):
    """Hosts' persisted robots.txt and politeness, moved seed hosts and lastmod tallies."""

    def __init__(self, db: Database, keys: Keys) -> None:
        super().__init__(db)
        self._keys = keys

    def ensure_hosts(self, origins: Sequence[str]) -> None:
        """Create host rows for ``origins`` (``scheme://host[:port]``) that do not exist yet."""
        for origin in origins:
            if not ORIGIN.fullmatch(origin):
                raise InvalidRecord(f"origin {origin!r} is not scheme://host[:port] (http or https)")
        with self._tx() as tx:
            self._keys.host_ids(tx, origins)


    def host_origins(self) -> list[str]:
        """Every host the frontier knows, by origin."""
        with self._tx(write=False) as tx:
            return [row[0] for row in tx.conn.execute(select(Host.origin))]

    def load_robots(self, origin: str) -> RobotsState | None:
        """The persisted robots.txt state of ``origin``, or None when it was never fetched."""
        with self._tx(write=False) as tx:
            host = self._host_row(tx.conn, origin)
        if host is None or (host["robots_fetched_at"] is None and host["robots_status"] is None):
            return None
        return RobotsState(
            origin=origin, status=host["robots_status"], fetched_at=host["robots_fetched_at"],
            expires_at=host["robots_expires_at"], body=host["robots_body"], url=host["robots_url"],
            # Saved before migration 0015: whose validators they are is not known, so none is sent.
            etag=host["robots_etag"] if host["robots_url"] else None,
            last_modified=host["robots_last_modified"] if host["robots_url"] else None,
            error_class=ErrorClass(host["robots_error"]) if host["robots_error"] else None,
        )

    def save_robots(self, state: RobotsState) -> None:
        values = {
            "robots_status": state.status, "robots_fetched_at": aware(state.fetched_at),
            "robots_expires_at": aware(state.expires_at), "robots_body": state.body, "robots_etag": state.etag,
            "robots_last_modified": state.last_modified, "robots_url": state.answered_by,
            "robots_error": state.error_class.value if state.error_class else None,
        }
        self._update_host(state.origin, values)

    def host_policy(self, origin: str) -> HostPolicy | None:
        return self.host_policies([origin]).get(origin)

    def host_policies(self, origins: Sequence[str]) -> dict[str, HostPolicy]:
        """origin -> its persisted politeness state, for those of ``origins`` the frontier has: one read for many
        (a run's start looks at every seed host's park), the policy's columns only (a host's row also holds its
        robots.txt body)."""
        out: dict[str, HostPolicy] = {}
        wanted = sorted(set(origins))
        with self._tx(write=False) as tx:
            for start in range(0, len(wanted), self._chunk):
                rows = tx.conn.execute(select(
                    Host.origin, Host.crawl_delay_s, Host.request_rate_s, Host.concurrency_limit, Host.blocked_until,
                    Host.parked_reason, Host.failures, Host.next_allowed_at,
                ).where(Host.origin.in_(wanted[start:start + self._chunk])))
                for origin, delay, rate, limit, blocked, parked, failures, allowed in rows:
                    out[origin] = HostPolicy(
                        origin=origin, crawl_delay_s=delay, request_rate_s=rate, concurrency_limit=limit,
                        blocked_until=blocked, parked_reason=parked, failures=failures, next_allowed_at=allowed)
        return out

    def save_host_policy(self, policy: HostPolicy) -> None:
        values = {
            "crawl_delay_s": policy.crawl_delay_s, "request_rate_s": policy.request_rate_s,
            "concurrency_limit": policy.concurrency_limit, "blocked_until": aware(policy.blocked_until),
            "parked_reason": policy.parked_reason, "failures": policy.failures,
            "next_allowed_at": aware(policy.next_allowed_at),
        }
        self._update_host(policy.origin, values)

    def set_moved_to(self, origin: str, target: str) -> None:
        """Record that seed host ``origin`` redirects its homepage to ``target`` (an origin)."""
        if not ORIGIN.fullmatch(target):
            raise InvalidRecord(f"origin {target!r} is not scheme://host[:port] (http or https)")
        self._update_host(origin, {"moved_to": target})

    def moved_hosts(self) -> dict[str, str]:
        """Seed origin -> the origin it moved to, for every seed host found redirecting (``set_moved_to``)."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(select(Host.origin, Host.moved_to).where(Host.moved_to.is_not(None))).all()
        return {origin: target for origin, target in rows if target is not None}


    def record_lastmod_check(self, origin: str, *, predicted_change: bool, changed: bool) -> None:
        """Count one re-fetch whose lastmod made a prediction: a real change is a check, a hit when the lastmod
        announced it (``revisit.truthfulness``). Unchanged content says nothing about missed changes."""
        if changed:
            self.add_lastmod_checks({origin: (1, 1 if predicted_change else 0)})

    def add_lastmod_checks(self, tallies: dict[str, tuple[int, int]]) -> None:
        """Add (checks, hits) per host in one transaction: extraction tallies them per batch, not per URL."""
        self._add_pairs(tallies, Host.lastmod_checks, Host.lastmod_hits)

    def reask_tally(self, origin: str) -> tuple[int, int]:
        """(re-asks, changed) of ``origin`` so far (``write_reasks``): 304s that contradicted a newer lastmod, asked
        again in full (counted when decided), and full answers to such re-asks that brought a changed page
        (``revisit.reask_304``)."""
        return self._pair(origin, Host.lastmod_reasks, Host.lastmod_reasks_changed)

    def reasks_tested_at(self, origin: str) -> datetime | None:
        """When a re-ask or probe of ``origin``'s record was last decided (``Outcomes.complete_many``'s ``reasks``),
        None: never."""
        with self._tx(write=False) as tx:
            value = tx.conn.execute(select(Host.reasks_tested_at).where(Host.origin == origin)).scalar_one_or_none()
        return aware(value) if isinstance(value, datetime) else None

    def lastmod_truthfulness(self, origin: str) -> tuple[int, int]:
        """(checks, hits): how often this host's newer lastmod came with a real content change."""
        return self._pair(origin, Host.lastmod_checks, Host.lastmod_hits)

    def _add_pairs(self, tallies: dict[str, tuple[int, int]], first: Mapped[int], second: Mapped[int]) -> None:
        """Add each host's pair of counts to its two tally columns, in one transaction; a pair of zeros writes
        nothing."""
        tallies = {origin: pair for origin, pair in tallies.items() if any(pair)}
        if not tallies:
            return
        with self._tx() as tx:
            host_ids = self._keys.host_ids(tx, list(tallies))
            for origin, (one, two) in tallies.items():
                tx.conn.execute(
                    update(Host).where(Host.id == host_ids[origin]).values({first: first + one, second: second + two})
                )

    def _pair(self, origin: str, first: Mapped[int], second: Mapped[int]) -> tuple[int, int]:
        """A host's two tally columns; (0, 0) for a host the frontier does not know."""
        with self._tx(write=False) as tx:
            row = tx.conn.execute(select(first, second).where(Host.origin == origin)).first()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def _host_row(self, conn: Connection, origin: str) -> Any:
        return conn.execute(select(Host.__table__).where(Host.origin == origin)).mappings().first()

    def _update_host(self, origin: str, values: dict[str, Any]) -> None:
        if not ORIGIN.fullmatch(origin):
            raise InvalidRecord(f"origin {origin!r} is not scheme://host[:port] (http or https)")
        known = self._keys.known_host_id(origin)
        if known is not None:  # one statement (a claimed host's politeness state at its turn's end)
            with self._tx(one_statement=True) as tx:
                tx.conn.execute(update(Host).where(Host.id == known).values(**values))
            return
        with self._tx() as tx:
            host_id = self._keys.host_ids(tx, [origin])[origin]
            tx.conn.execute(update(Host).where(Host.id == host_id).values(**values))
