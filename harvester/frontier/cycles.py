"""Crawl cycles and their counts: one cycle from its first attempt's start to its last attempt's end, and the one
function every report reads (``cycle_counts``: the CLI summary, ``harvester status``, artifacts, events).

Counts are read back from what each answer was labelled when it was written (``fetches.change`` and
``fetches.outcome``, joined to the cycle through its runs), never from timestamps: a resumed attempt's fetches
belong to the cycle like the first attempt's, and a URL found but never fetched is in none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, and_, case, exists, func, insert, or_, select, update
from sqlalchemy.orm import aliased

from harvester.errors import InvalidRecord
from harvester.frontier.base import FULL_URL, Part
from harvester.frontier.models import Cycle, Fetch, Host, QueueEntry, Run, Url
from harvester.records import ChangeKind, ErrorClass, UrlKind, UrlState
from harvester.rules.revisit import PERMANENT_REDIRECTS, RETRYABLE
from harvester.runtime import aware, utcnow
from harvester.store_results import Changes

logger = logging.getLogger(__name__)

_RANK = {ChangeKind.GONE: 6, ChangeKind.NEW: 5, ChangeKind.CHANGED: 4, ChangeKind.RESTYLED: 3,
         ChangeKind.MISSING: 2, ChangeKind.SAME: 1}
"""A URL answered twice in one cycle (a failure retried, a resumed attempt) counts once, under its strongest
label: gone over everything (never also changed), a first version over a later change in the same cycle."""

EXAMPLES = 50
"""URLs a cycle's counts name per kind of change (``cycle_counts``; what a finished cycle keeps)."""

_COUNTED = (ChangeKind.NEW, ChangeKind.CHANGED, ChangeKind.RESTYLED, ChangeKind.GONE, ChangeKind.MISSING)


class Cycles(Part):
    """Cycles (``cycles``) and the counts of one."""

    def begin_cycle(self, kind: str, *, profile: dict[str, Any] | None) -> tuple[int, bool]:
        """(cycle id, resumed): the newest unfinished cycle of ``kind`` with this profile (a killed or failed
        attempt, resumed: its counts go on), else a new one. An unfinished cycle of the profile of another kind is
        closed as ``abandoned`` first: a re-crawl after a killed harvest is a cycle of its own."""
        now = utcnow()
        with self._tx() as tx:
            self._d.lock_cycles(tx.conn)
            rows = tx.conn.execute(
                select(Cycle.id, Cycle.kind, Cycle.profile).where(Cycle.status == "running")
                .order_by(Cycle.id.desc())  # every one: at most one runs per profile, so as many as sites
            ).all()
            for cycle_id, stored_kind, stored in rows:
                if stored != profile:
                    continue
                if stored_kind == kind:
                    return int(cycle_id), True
                tx.conn.execute(update(Cycle).where(Cycle.id == cycle_id)
                                .values(status="abandoned", finished_at=now))
            row = tx.conn.execute(
                insert(Cycle).values(kind=kind, started_at=now, status="running", profile=profile)
                .returning(Cycle.id)
            ).one()
        return int(row[0]), False

    def open_cycle(self, conn: Connection, profile: dict[str, Any] | None) -> int | None:
        """The unfinished cycle of ``profile`` a phase run starting now belongs to (None: a phase on its own)."""
        for cycle_id, stored in conn.execute(
            select(Cycle.id, Cycle.profile).where(Cycle.status == "running").order_by(Cycle.id.desc())
        ):
            if stored == profile:
                return int(cycle_id)
        return None

    def finish_cycle(self, cycle_id: int, *, origins: Sequence[str] = (), status: str = "completed") -> None:
        """Close the cycle, keeping what it left due as its ``deferred`` (due-ness moves on): on ``origins`` (the
        profile's seed hosts) and every host the cycle fetched from (those they moved to)."""
        with self._tx() as tx:
            deferred = _due_details(tx.conn, cycle_id, _cycle_hosts(tx.conn, cycle_id, origins), utcnow())
            changed = tx.conn.execute(
                update(Cycle).where(Cycle.id == cycle_id)
                .values(finished_at=utcnow(), status=status, deferred=deferred, counts=None)
            ).rowcount
        if not changed:
            raise InvalidRecord(f"cycle {cycle_id} does not exist")
        # Its counts are final now: kept, so that reading them again (every ``harvester status``) reads one row
        # instead of every fetch of the cycle (6.5 s of CPU after a cycle of 1,000,000 pages).
        counts = self.cycle_counts(cycle_id)
        with self._tx() as tx:
            tx.conn.execute(update(Cycle).where(Cycle.id == cycle_id).values(counts=dict(counts)))

    def cycle_started_at(self, cycle_id: int) -> datetime | None:
        with self._tx(write=False) as tx:
            value = tx.conn.execute(select(Cycle.started_at).where(Cycle.id == cycle_id)).scalar_one_or_none()
        return aware(value) if isinstance(value, datetime) else None

    def last_cycle(self) -> dict[str, Any] | None:
        """The newest cycle (id, kind, started_at, finished_at, status), finished or not: what ``status`` reports."""
        with self._tx(write=False) as tx:
            row = tx.conn.execute(
                select(Cycle.id, Cycle.kind, Cycle.started_at, Cycle.finished_at, Cycle.status, Cycle.profile)
                .order_by(Cycle.id.desc()).limit(1)
            ).mappings().first()
        return None if row is None else dict(row)

    def cycle_counts(
        self, cycle_id: int, *, origins: Sequence[str] | None = None, examples: int = EXAMPLES
    ) -> Changes:
        """Every count of one cycle over all its attempts (docs/operations.md, "What the counts mean"), on
        ``origins`` (None: every host). The only source of the numbers a cycle reports, wherever they are shown.

        Page changes are counted per detail URL under its strongest label (``_RANK``); requests (``fetched``,
        ``not_modified``, ``failed``, per host) over every page fetch of the cycle's runs, listing pages too, and
        never a completion that sent no request (``outcome`` ``unsent``). ``hook_failed`` counts URLs (each once)
        whose page was fetched and stored but the extractor hook failed on it: a good request, not a failure."""
        with self._tx(write=False, snapshot=True) as tx:
            conn = tx.conn
            cycle = conn.execute(select(Cycle.deferred, Cycle.profile, Cycle.finished_at, Cycle.status, Cycle.counts)
                                 .where(Cycle.id == cycle_id)).first()
            if cycle is None:
                raise InvalidRecord(f"cycle {cycle_id} does not exist")
            if cycle.counts is not None and cycle.status != "running" and origins is None and examples == EXAMPLES:
                # Kept by finish_cycle: final (a cycle closed before moved and restored were counted: none of them).
                return cast("Changes", {"moved": 0, "restored": 0, "moved_urls": [], "restored_urls": [],
                                        "failed_url_count": 0, "failed_urls": [], **cycle.counts})
            runs = select(Run.id).where(Run.cycle_id == cycle_id).scalar_subquery()
            mine = [Fetch.run_id.in_(runs)]
            if origins is not None:
                mine.append(Host.origin.in_(list(origins)))
            hosts, totals = _requests(conn, mine)
            rank = case(*((Fetch.change == kind.value, value) for kind, value in _RANK.items()), else_=0)
            per_url = (
                select(Fetch.url_id.label("url_id"), func.max(rank).label("rank"))
                .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
                # Detail pages; a 404/410 of any page (a seed without a home page too): its request is in
                # ``fetched``, and ``status`` shows it gone or missing.
                .where(*mine, Fetch.change.is_not(None),
                       or_(Url.kind == UrlKind.DETAIL.value,
                           Fetch.change.in_((ChangeKind.GONE.value, ChangeKind.MISSING.value))))
                .group_by(Fetch.url_id).subquery()
            )
            by_rank = {int(r): int(n) for r, n in conn.execute(
                select(per_url.c.rank, func.count()).group_by(per_url.c.rank))}
            urls: dict[ChangeKind, list[str]] = {}
            for kind in _COUNTED:
                urls[kind] = list(conn.execute(
                    select(FULL_URL).select_from(per_url).join(Url, Url.id == per_url.c.url_id)
                    .join(Host, Host.id == Url.host_id).where(per_url.c.rank == _RANK[kind])
                    .order_by(Url.id).limit(examples)
                ).scalars()) if by_rank.get(_RANK[kind]) else []
            moved, restored = _moved_and_restored(conn, mine, examples)
            failed_urls, failed_examples = _failed_urls(conn, mine, examples)
            # Left behind when the cycle closed (``finish_cycle``); while it runs nothing is left behind yet: 0. What
            # was due now on the hosts asked so far jumped 0 -> 282 as the hosts were first asked, 300 queued.
            deferred = cycle.deferred or 0
        counts = {kind: by_rank.get(_RANK[kind], 0) for kind in _COUNTED}
        return {
            "cycle": cycle_id, "new": counts[ChangeKind.NEW], "changed": counts[ChangeKind.CHANGED],
            "restyled": counts[ChangeKind.RESTYLED], "gone": counts[ChangeKind.GONE],
            "missing": counts[ChangeKind.MISSING], "moved": moved[0], "restored": restored[0],
            "deferred": int(deferred),
            "fetched": totals.get("fetched", 0), "not_modified": totals.get("not_modified", 0),
            "failed": totals.get("failed", 0),
            "failures": {key[6:]: n for key, n in sorted(totals.items()) if key.startswith("error:")},
            "hook_failed": totals.get("hook_failed", 0),
            "new_urls": urls[ChangeKind.NEW], "changed_urls": urls[ChangeKind.CHANGED],
            "restyled_urls": urls[ChangeKind.RESTYLED], "gone_urls": urls[ChangeKind.GONE],
            "moved_urls": moved[1], "restored_urls": restored[1], "hosts": hosts,
            "failed_url_count": failed_urls, "failed_urls": failed_examples,
        }

    def run_fetch_counts(self, run_id: int) -> dict[str, dict[str, int]]:
        """Per host for one phase run: requests it sent (``fetched``), 304s, gone, failed and failures by
        ``error:<class>``, and ``bytes``, the body bytes its answers carried as received (before content decoding;
        HTTP headers and chunk framing not counted); what ``status`` shows per host for the last extraction (its
        own requests only)."""
        with self._tx(write=False) as tx:
            hosts, _ = _requests(tx.conn, [Fetch.run_id == run_id])
            # ``bytes``: the bodies of those answers as they came off the wire (``fetches.bytes``), so the figure
            # counts what ``fetched`` counts; the polite client's own tally also held discovery's documents.
            for origin, n in tx.conn.execute(
                select(Host.origin, func.coalesce(func.sum(Fetch.bytes), 0))
                .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
                .where(Fetch.run_id == run_id, Fetch.outcome != "unsent").group_by(Host.origin)
            ):
                if origin in hosts:
                    hosts[origin]["bytes"] = int(n)
        return hosts


def _requests(conn: Connection, where: list[Any]) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Per host and in total: requests sent (``fetched``), 304s to conditional requests, 404/410 (``gone``),
    failed requests and their failures by ``error:<class>`` (summing to ``failed``), over the fetch rows ``where``
    selects; and ``hook_failed``, the URLs whose fetched page the hook failed on (a fetch the hook failed on is no
    failed request)."""
    hosts: dict[str, dict[str, int]] = {}
    totals: dict[str, int] = {}
    query = (
        select(Host.origin, Fetch.outcome, Fetch.error_class, func.count())
        .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
        .where(*where, Fetch.outcome != "unsent").group_by(Host.origin, Fetch.outcome, Fetch.error_class)
    )
    for origin, outcome, error_class, n in conn.execute(query):
        counts = hosts.setdefault(origin, {"fetched": 0, "not_modified": 0, "gone": 0, "failed": 0})
        keys = ["fetched"]
        if outcome in ("not_modified", "gone", "failed"):
            keys.append(outcome)
        if error_class and outcome == "failed":
            # ``failures`` breaks ``failed`` down and adds up to it: an answer that carries a class without being a
            # failed request (a redirect left unfollowed as out_of_scope, a 404's http_4xx: ``gone``, a page the
            # hook failed on: ``hook_failed``) is no failure. It said {'out_of_scope': 1} beside failed: 0.
            keys.append(f"error:{error_class}")
        for key in keys:
            counts[key] = counts.get(key, 0) + int(n)
            totals[key] = totals.get(key, 0) + int(n)
    hooked = (
        select(Host.origin, func.count(func.distinct(Fetch.url_id)))
        .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
        .where(*where, Fetch.error_class == _HOOK_FAILED, Fetch.outcome != "failed").group_by(Host.origin)
    )
    for origin, n in conn.execute(hooked):
        hosts.setdefault(origin, {"fetched": 0, "not_modified": 0, "gone": 0, "failed": 0})["hook_failed"] = int(n)
        totals["hook_failed"] = totals.get("hook_failed", 0) + int(n)
    return hosts, totals


_HOOK_FAILED = ErrorClass.HOOK_FAILED.value
_GONE = (404, 410)


def _not_redirect(status: int | None) -> bool:
    return status is not None and status not in PERMANENT_REDIRECTS


def _was_gone(status: int | None) -> bool:
    return status in _GONE


def _moved_and_restored(conn: Connection, where: list[Any], examples: int) -> tuple[tuple[int, list[str]],
                                                                                    tuple[int, list[str]]]:
    """((moved, examples), (restored, examples)) over the detail URLs of the fetches ``where`` selects. Moved: a
    permanent redirect (301/308) whose URL's answer before it was another (a page that moved; a URL whose first
    answer redirects moved before we knew it); restored: a
    2xx or 304 whose URL's answer before it was a 404/410 (a gone page back; its version is counted new, changed
    or restyled like any answer's, or nothing for a 304 or the same bytes). From each such answer's fetch row and
    the one before it of its URL (``ix_fetches_url_id``): only the few redirects and answers after a 404 look."""
    earlier, gone = aliased(Fetch), aliased(Fetch)
    before = (
        select(earlier.status).where(earlier.url_id == Fetch.url_id, earlier.id < Fetch.id,
                                     earlier.outcome != "unsent", earlier.status.is_not(None))
        .order_by(earlier.id.desc()).limit(1).correlate(Fetch).scalar_subquery()
    )
    # The answer before is looked up only for the candidates (in the select list: for the rows the filters kept,
    # never in a filter, where it ran for every 2xx/304 of the cycle: 3-4 s of ``status`` at 200,000 URLs): the
    # few redirects, and the 2xx/304 of URLs that answered 404/410 once (a semi-join on those fetches).
    was_gone = Fetch.url_id.in_(select(gone.url_id).where(gone.status.in_(_GONE)))
    found = []
    for answered, was in (
        (Fetch.status.in_(sorted(PERMANENT_REDIRECTS)), _not_redirect),
        (and_(or_(Fetch.status.between(200, 299), Fetch.status == 304), was_gone), _was_gone),
    ):
        candidates = conn.execute(
            select(Fetch.url_id, before).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
            .where(*where, Url.kind == UrlKind.DETAIL.value, answered)
        ).all()
        ids = sorted({int(url_id) for url_id, status in candidates if was(status)})
        urls = list(conn.execute(
            select(FULL_URL).select_from(Url).join(Host, Host.id == Url.host_id)
            .where(Url.id.in_(ids[:examples])).order_by(Url.id)).scalars()) if ids else []
        found.append((len(ids), urls))
    return found[0], found[1]


def failure_reason(error_class: str | None, status: int | None) -> str:
    """How a failed request is named beside its URL: its error class, and the HTTP status when an answer came back
    (``http_5xx 503``, ``timeout``)."""
    return f"{error_class or 'failed'} {status}" if status else (error_class or "failed")


def _failed_urls(conn: Connection, where: list[Any], examples: int) -> tuple[int, list[dict[str, str]]]:
    """(how many, examples) of the URLs, detail or listing, whose last request of the fetches ``where`` selects
    failed, each with its reason (``failure_reason``): what is still failing when the cycle ends. A URL that failed
    and then answered on a retry is not one (its failed request is still counted in ``failed``, which counts
    requests: it can exceed the URLs named here)."""
    last = (
        select(func.max(Fetch.id).label("fetch_id"))
        .select_from(Fetch).join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
        .where(*where, Fetch.outcome != "unsent").group_by(Fetch.url_id).subquery()
    )
    failed = and_(Fetch.id.in_(select(last.c.fetch_id)), Fetch.outcome == "failed")
    count = int(conn.execute(select(func.count()).select_from(Fetch).where(failed)).scalar_one())
    if not count:
        return 0, []
    rows = conn.execute(
        select(FULL_URL, Fetch.error_class, Fetch.status).select_from(Fetch).join(Url, Url.id == Fetch.url_id)
        .join(Host, Host.id == Url.host_id).where(failed).order_by(Url.id).limit(examples)
    ).all()
    return count, [{"url": str(url), "reason": failure_reason(error_class, status)}
                   for url, error_class, status in rows]


def _cycle_hosts(conn: Connection, cycle_id: int, origins: Sequence[str]) -> list[str]:
    """``origins`` and every host a run of the cycle fetched from."""
    runs = select(Run.id).where(Run.cycle_id == cycle_id).scalar_subquery()
    fetched = conn.execute(
        select(Host.origin).distinct().select_from(Fetch).join(Url, Url.id == Fetch.url_id)
        .join(Host, Host.id == Url.host_id).where(Fetch.run_id.in_(runs))
    ).scalars()
    return sorted({*origins, *(str(origin) for origin in fetched)})


def _due_details(conn: Connection, cycle_id: int, origins: Sequence[str], now: datetime) -> int:
    """Detail URLs of ``origins`` the cycle leaves to the next one: queued and due at ``now``, revisits due, and the
    queued ones the cycle itself took and put back for later (a retry backed off, a parked host's or a budget's
    claims handed back: due a few seconds or a park later, yet due in this cycle and not done in it). Counting
    only what was due at the closing instant said ``deferred: 0`` of a parked host's 30 queued pages (stranger 44);
    a page failed every attempt of the run is counted ``failed``, not deferred: one failed ``max_attempts`` times is no
    longer queued, and one refused for good in this run (a failure no retry mends: a 4xx, a media type not kept,
    too large) stays queued but is due only at a later run (``revisit.classify_outcome``), so it is no taken one."""
    if not origins:
        return 0
    host_ids = list(conn.execute(select(Host.id).where(Host.origin.in_(list(origins)))).scalars())
    if not host_ids:
        return 0
    runs = select(Run.id).where(Run.cycle_id == cycle_id).scalar_subquery()
    refused = exists().where(Fetch.url_id == QueueEntry.url_id, Fetch.run_id.in_(runs), Fetch.outcome == "failed",
                             Fetch.error_class.not_in([error.value for error in RETRYABLE]))
    taken = and_(exists().where(Fetch.url_id == QueueEntry.url_id, Fetch.run_id.in_(runs)), ~refused)
    queued = conn.execute(
        select(func.count()).select_from(QueueEntry).where(
            QueueEntry.host_id.in_(host_ids), QueueEntry.kind == UrlKind.DETAIL.value,
            or_(QueueEntry.due_at.is_(None), QueueEntry.due_at <= now, taken))
    ).scalar_one()
    revisits = conn.execute(
        select(func.count()).select_from(Url).where(
            Url.host_id.in_(host_ids), Url.kind == UrlKind.DETAIL.value, Url.state == UrlState.DONE.value,
            Url.next_fetch_at <= now)
    ).scalar_one()
    return int(queued) + int(revisits)
