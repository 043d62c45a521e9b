"""The queue and its leases: hosts and URLs handed to workers, given back, expired, made due; what is due."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, exists, func, or_, select, update

from harvester.frontier.base import Database, Part
from harvester.frontier.keys import Keys
from harvester.frontier.models import (
    Document,
    Host,
    Lease,
    QueueEntry,
    Source,
    Url,
    from_epoch_us,
)
from harvester.owners import owner_process
from harvester.records import (
    ClaimedUrl,
    UrlKind,
    UrlState,
)
from harvester.runtime import aware, utcnow

logger = logging.getLogger(__name__)

_KIND_OF = {kind.value: kind for kind in UrlKind}
"""Stored kind -> UrlKind without Enum's (slow) value lookup."""


SOURCE_KINDS_CACHED = 100_000
"""Source kinds a store remembers (one per sitemap, feed or listing page) before it starts again."""


class Queue(Part):
    """Claims (host leases, then URL leases, never one URL to two claimers), releases and due counts."""

    def __init__(self, db: Database, keys: Keys) -> None:
        super().__init__(db)
        self._keys = keys
        self._source_kinds: dict[int, str] = {}
        """Source id -> kind of the claimed URLs' first sources (``_learn_sources``)."""

    def claim_hosts(
        self, owner: str, *, limit: int, lease_s: float, now: datetime | None = None,
        hosts: Sequence[str] | None = None, kinds: Sequence[UrlKind] | None = None,
    ) -> list[str]:
        """Lease up to ``limit`` hosts with due work (of ``kinds``, default any) that no other owner holds
        and that are neither blocked nor parked. ``hosts`` restricts to a partition. Returns their origins."""
        if limit <= 0 or (hosts is not None and not hosts):
            return []
        now = aware(now) or utcnow()
        d = self._d
        kind_values = None if kinds is None else [str(k) for k in kinds]
        sql = d.claim_hosts_sql(None if hosts is None else len(hosts), None if kinds is None else len(kinds))
        params = [owner, d.ts(now + timedelta(seconds=lease_s))]
        params += d.claim_hosts_params(owner, now, hosts, kind_values, limit)
        with self._tx() as tx:
            origins = [row[0] for row in tx.conn.exec_driver_sql(sql, tuple(params))]
            d.fold_queue_counts(tx.conn)  # once per few host turns: keeps ``status``'s count of the queue short
        return sorted(origins)

    def renew_hosts(
        self, owner: str, origins: Sequence[str], *, lease_s: float, now: datetime | None = None
    ) -> list[str]:
        """Extend this owner's leases on ``origins`` (and on the URLs it holds there); returns those still ours."""
        if not origins:
            return []
        now = aware(now) or utcnow()
        until = now + timedelta(seconds=lease_s)
        with self._tx() as tx:
            kept = tx.conn.execute(
                update(Host).where(Host.origin.in_(origins), Host.lease_owner == owner)
                .values(lease_until=until).returning(Host.origin, Host.id)
            ).all()
            ids = [row[1] for row in kept]
            if ids:
                d = self._d
                where, params = d.any_of("leases.host_id", ids)
                # A lease row locked by another transaction is skipped, not waited for: its holder is this owner's
                # completion writer, about to delete it (a renewal waited 12-20 s behind such writes under load,
                # issue 32); one it keeps is renewed next time, two thirds of its lease still ahead.
                skip = "" if d.is_sqlite else " FOR UPDATE SKIP LOCKED"
                tx.conn.exec_driver_sql(
                    f"UPDATE leases SET lease_until = {d.p} WHERE leases.url_id IN (SELECT leases.url_id FROM leases"
                    f" WHERE leases.owner = {d.p} AND {where}{skip})",
                    (d.ts(until), owner, *params),
                )
        return sorted(row[0] for row in kept)

    def release_hosts(self, owner: str, origins: Sequence[str], *, now: datetime | None = None) -> None:
        """Give up this owner's host leases; ``lease_until`` stays as 'last served' for fair ordering."""
        if not origins:
            return
        now = aware(now) or utcnow()
        with self._tx(one_statement=True) as tx:  # a host's turn ends with it: no BEGIN and COMMIT round trips
            tx.conn.execute(
                update(Host).where(Host.origin.in_(origins), Host.lease_owner == owner)
                .values(lease_owner=None, lease_until=now)
            )

    def claim(
        self, owner: str, *, hosts: Sequence[str], per_host: int, lease_s: float,
        kinds: Sequence[UrlKind] = (UrlKind.DETAIL,), now: datetime | None = None, beside: Sequence[str] = (),
    ) -> list[ClaimedUrl]:
        """Lease the best-ranked due URLs, at most ``per_host`` per host, in one indexed statement.

        Due: QUEUED with no ``next_fetch_at`` or one in the past, or DONE whose revisit time has come. Returned
        by host origin, then in the queue's order, the same on both databases: best rank first (``-score``,
        offset for revisits: announced ones first, routine ones after URLs never fetched), then id (stable).
        Hosts leased by another owner are skipped, bar the owners in ``beside`` (whose requests go through the
        claimer's own politeness gate). Two concurrent claimers never receive the same URL.
        """
        if per_host <= 0 or not hosts or not kinds:
            return []
        now = aware(now) or utcnow()
        until = now + timedelta(seconds=lease_s)
        d = self._d
        kind_values = [str(k) for k in kinds]
        with self._tx() as tx:
            origin_of, rows, kinds_read = d.claim_urls(
                tx.conn, sorted(set(hosts)), kind_values, per_host, now, owner, until, beside)
            if kinds_read is None:
                self._learn_sources(tx.conn, {row[-1] for row in rows})
            else:
                self._remember_sources(kinds_read)
        self._keys.learn_hosts(origin_of)  # hosts are never deleted: the ids a claim read stay true
        return self._claimed(rows, origin_of, until)

    def _remember_sources(self, kinds: dict[int, str]) -> None:
        if len(self._source_kinds) > SOURCE_KINDS_CACHED:
            self._source_kinds.clear()
        self._source_kinds.update(kinds)

    def _learn_sources(self, conn: Connection, ids: set[int | None]) -> None:
        """Source id → kind for the claimed URLs' first sources (a few per host: cached, bounded). A full cache is
        emptied before the claim's ids are looked up, not after: emptied after, the ids it already held would read
        as unknown, and a URL of unknown source counts as listed (``revisit.listed``), so a feed-only page could be
        skipped on its feed date."""
        if len(self._source_kinds) > SOURCE_KINDS_CACHED:
            self._source_kinds.clear()
        unknown = [i for i in ids if i is not None and i not in self._source_kinds]
        if not unknown:
            return
        for start in range(0, len(unknown), 500):
            chunk = unknown[start:start + 500]
            rows = conn.execute(select(Source.id, Source.kind).where(Source.id.in_(chunk)))
            self._source_kinds.update({int(i): str(k) for i, k in rows})

    def _claimed(self, rows: list[Any], origin_of: dict[int, str], until: datetime) -> list[ClaimedUrl]:
        """Claimed rows as records, in one tight loop (a claim builds a thousand of them)."""
        dt = from_epoch_us if self._d.is_sqlite else self._d.dt  # SQLite: models.UtcDateTime's microseconds
        kind_of = _KIND_OF
        out = []
        source_kind = self._source_kinds.get
        for (url_id, path, host_id, kind, depth, score, attempts, etag, last_modified, content_hash,
             lastmod, last_fetched_at, changefreq, revisit_s, fetch_path, lastmod_until, source_id) in rows:
            origin = origin_of[host_id]
            out.append(ClaimedUrl(
                url_id, origin + path, origin, kind_of[kind], depth, score, attempts, until, etag, last_modified,
                content_hash, None if lastmod is None else dt(lastmod),
                None if last_fetched_at is None else dt(last_fetched_at), changefreq, revisit_s,
                source_kind(source_id), None if fetch_path is None else origin + fetch_path,
                None if lastmod_until is None else dt(lastmod_until),
            ))
        return out

    def release(self, owner: str, url_ids: Sequence[int]) -> int:
        """Unfetched claims back to the queue (attempts unchanged); returns how many were still ours."""
        if not url_ids:
            return 0
        d = self._d
        where, params = d.any_of("leases.url_id", list(url_ids))
        with self._tx() as tx:
            return d.release_leases(tx.conn, f"{where} AND leases.owner = {d.p}", (*params, owner))

    def requeue_expired(self, *, now: datetime | None = None) -> int:
        """Leases that outlived their holder return to the queue (the crash-resume path); returns URLs requeued.
        Expired host leases are cleared too."""
        now = aware(now) or utcnow()
        d = self._d
        with self._tx() as tx:
            count = d.release_leases(tx.conn, f"leases.lease_until < {d.p}", (d.ts(now),))
            tx.conn.execute(
                update(Host).where(Host.lease_owner.is_not(None), Host.lease_until < now).values(lease_owner=None)
            )
        if count:
            logger.info("requeued %d URLs whose lease expired", count)
        return count

    def lease_owners(self) -> list[str]:
        """Every owner holding a URL or host lease now: a rerun asks which of them are dead."""
        with self._tx(write=False) as tx:
            owners = {o for o in tx.conn.execute(select(Lease.owner).distinct()).scalars() if o}
            owners |= {o for o in tx.conn.execute(select(Host.lease_owner).distinct()).scalars() if o}
        return sorted(owners)

    def leased_per_owner(self) -> dict[str, int]:
        """URLs leased now, per owner: ``harvester status`` names those whose holder has ended."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(select(Lease.owner, func.count()).group_by(Lease.owner)).all()
        return {owner: int(n) for owner, n in rows if owner}

    def host_holders(self, owner: str, *, hosts: Sequence[str]) -> list[str]:
        """The other owners holding a host lease on one of ``hosts``, live or lapsed: a worker looking for hosts
        asks which of them are dead processes on its machine (``release_owner`` then), so their hosts are taken
        at once, not when the round ends or the lease runs out."""
        if not hosts:
            return []
        with self._tx(write=False) as tx:
            return sorted(o for o in tx.conn.execute(
                select(Host.lease_owner).distinct().where(
                    Host.origin.in_(list(hosts)), Host.lease_owner.is_not(None), Host.lease_owner != owner)
            ).scalars() if o)

    def release_owner(self, owner: str) -> int:
        """Every lease ``owner`` holds goes back (its process is known dead); returns URLs requeued. The verdict is
        asked again in this transaction (``Liveness.still_dead``): on PostgreSQL a holder whose session came back
        since (and which may have renewed) keeps its leases."""
        d = self._d
        with self._tx() as tx:
            if not self.db.liveness.still_dead(tx.conn, owner):
                return 0
            count = d.release_leases(tx.conn, f"leases.owner = {d.p}", (owner,))
            tx.conn.execute(update(Host).where(Host.lease_owner == owner).values(lease_owner=None, lease_until=None))
        return count

    def make_due(self, origins: Sequence[str], *, now: datetime | None = None) -> int:
        """Finished URLs (failed ones and duplicates too: ``requeue_rechecks`` queues them when the extraction begins),
        gone ones (404/410: queued, still conditional where they kept validators), queued ones waiting for a later
        time (a gone URL's recheck, a retry's back-off) and discovery documents of ``origins`` become due now (an
        off-schedule re-crawl: "is the snapshot equal to the site now", a page a site restored included). URLs
        refused for good (robots.txt, scope: disallowed, skipped) stay refused. Returns the URLs made due."""
        now = aware(now) or utcnow()
        d = self._d
        with self._tx() as tx:
            host_ids = select(Host.id).where(Host.origin.in_(list(origins))).scalar_subquery()
            result = tx.conn.execute(
                update(Url).where(Url.host_id.in_(host_ids), Url.state.in_(
                    [UrlState.DONE.value, UrlState.FAILED.value, UrlState.DUPLICATE.value]))
                .values(next_fetch_at=now)
            )
            made_due = int(result.rowcount)
            where, params = d.any_of("h.origin", list(origins))
            gone = tx.conn.exec_driver_sql(
                f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p} WHERE state = 'gone' AND host_id IN"
                f" (SELECT h.id FROM hosts h WHERE {where}) RETURNING host_id, kind, -score, id, next_fetch_at",
                (d.ts(now), *params),
            ).all()
            if gone:
                tx.conn.exec_driver_sql(d.enqueue_sql, [tuple(row) for row in gone])
            waiting = tx.conn.execute(
                update(QueueEntry).where(QueueEntry.host_id.in_(host_ids), QueueEntry.due_at > now)
                .values(due_at=now)
            )
            tx.conn.execute(
                update(Url).where(Url.host_id.in_(host_ids), Url.state == UrlState.QUEUED.value,
                                  Url.next_fetch_at > now).values(next_fetch_at=now)
            )
            made_due += len(gone) + int(waiting.rowcount)
            for origin in origins:
                tx.conn.execute(
                    update(Document).where(Document.url.startswith(origin + "/", autoescape=True))
                    .values(next_fetch_at=now)
                )
        return made_due

    def url_high_water(self) -> int:
        """The largest URL id: it grows exactly when URLs are added (ids are never reused)."""
        with self._tx(write=False) as tx:
            return self._d.max_url_id(tx.conn)

    def due_count(
        self, *, kinds: Sequence[str] = ("detail",), now: datetime | None = None, hosts: Sequence[str] | None = None,
    ) -> int:
        """URLs an extraction would fetch now (not counting those leased): what its progress has still to do.
        ``hosts``: only those origins' (a site's, on a frontier several sites share); None: every host's."""
        now = aware(now) or utcnow()
        queued_where = [QueueEntry.kind.in_(list(kinds)), QueueEntry.due_at.is_(None) | (QueueEntry.due_at <= now)]
        revisit_where = [Url.kind.in_(list(kinds)), Url.state == UrlState.DONE.value, Url.next_fetch_at <= now]
        if hosts is not None:
            if not hosts:
                return 0
            host_ids = select(Host.id).where(Host.origin.in_(list(hosts))).scalar_subquery()
            queued_where.append(QueueEntry.host_id.in_(host_ids))
            revisit_where.append(Url.host_id.in_(host_ids))
        with self._tx(write=False) as tx:
            queued = tx.conn.execute(select(func.count()).select_from(QueueEntry).where(*queued_where)).scalar_one()
            revisits = tx.conn.execute(select(func.count()).select_from(Url).where(*revisit_where)).scalar_one()
        return int(queued) + int(revisits)

    def next_due_at(self, *, kinds: Sequence[str] = ("detail",), now: datetime | None = None) -> datetime | None:
        """When queued work next becomes claimable on a host that is not parked: a backed-off retry coming due,
        or the end of a host's back-off (``blocked_until``) with URLs due before it. A retry due on a host that is
        still backing off then is not claimable: waking for it would find nothing to do."""
        now = aware(now) or utcnow()
        kind_values = list(kinds)
        with self._tx(write=False) as tx:
            retry = tx.conn.execute(
                select(func.min(QueueEntry.due_at)).select_from(QueueEntry)
                .join(Host, Host.id == QueueEntry.host_id).where(
                    QueueEntry.kind.in_(kind_values), QueueEntry.due_at > now, Host.parked_reason.is_(None),
                    or_(Host.blocked_until.is_(None), Host.blocked_until <= QueueEntry.due_at),
                )
            ).scalar_one_or_none()
            waiting = exists().where(
                QueueEntry.host_id == Host.id, QueueEntry.kind.in_(kind_values),
                or_(QueueEntry.due_at.is_(None), QueueEntry.due_at <= Host.blocked_until),
            )
            unblocked = tx.conn.execute(
                select(func.min(Host.blocked_until)).where(
                    Host.blocked_until > now, Host.parked_reason.is_(None), waiting)
            ).scalar_one_or_none()
        moments = [aware(value) for value in (retry, unblocked) if isinstance(value, datetime)]
        return min((m for m in moments if m is not None), default=None)


    def unfinished(
        self, owner: str, *, hosts: Sequence[str], kinds: Sequence[str] = ("detail",), now: datetime | None = None
    ) -> tuple[list[str], list[str]]:
        """What keeps a worker that found nothing more to do in its round from ending its run: (claimable, held).

        Claimable: hosts of ``hosts`` with work due that ``claim_hosts`` would lease to ``owner`` now (no live lease
        of another owner, not backing off, not parked), or with URL leases that ran out (``requeue_expired`` brings
        them back). Held: hosts with work due that another owner's live host lease holds, or with URLs another owner
        holds in flight. One snapshot, so a host is always in one of them while its work is unfinished: read in two
        looks, a dead holder's hosts released between them (by this worker's own ``release_owner``, or a lease
        running out) were in neither, and the worker ended its run with their URLs queued (issue 32)."""
        if not hosts:
            return [], []
        now = aware(now) or utcnow()
        kind_values = list(kinds)
        due = or_(
            exists().where(QueueEntry.host_id == Host.id, QueueEntry.kind.in_(kind_values),
                           or_(QueueEntry.due_at.is_(None), QueueEntry.due_at <= now)),
            exists().where(Url.host_id == Host.id, Url.kind.in_(kind_values), Url.state == UrlState.DONE.value,
                           Url.next_fetch_at <= now),
        )
        free = or_(Host.lease_owner.is_(None), Host.lease_owner == owner, Host.lease_until < now)
        open_ = and_(or_(Host.blocked_until.is_(None), Host.blocked_until <= now),
                     or_(Host.parked_reason.is_(None), Host.blocked_until.is_not(None)))
        lapsed = exists().where(Lease.host_id == Host.id, Lease.lease_until < now)
        in_flight = exists().where(Lease.host_id == Host.id, Lease.owner != owner, Lease.lease_until >= now)
        held_host = and_(Host.lease_owner.is_not(None), Host.lease_owner != owner, Host.lease_until >= now, due)
        claimable = or_(and_(free, open_, due), lapsed)
        mine = Host.origin.in_(list(hosts))
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Host.origin, claimable, or_(held_host, in_flight)).where(mine)
            ).all()
        return sorted(o for o, c, h in rows if c and not h), sorted(o for o, _, h in rows if h)

    def sharing(self, owner: str, *, hosts: Sequence[str], site: str = "", kinds: Sequence[str] = ("detail",),
                now: datetime | None = None) -> tuple[int, int]:
        """(hosts of ``hosts`` with work due or in flight, other workers): what a worker splits with the others,
        so that one worker does not take every host of a small site. Other workers: the other owners holding a live
        lease on one of ``hosts``, or the other extraction processes on the frontier (idle ones included, where
        the database can tell: ``Dialect.extraction_processes``) of the same ``site``, whichever is more: workers of
        another site on the frontier never take these hosts, so counting them left hosts unshared."""
        if not hosts:
            return 0, 0
        now = aware(now) or utcnow()
        kind_values = list(kinds)
        work = or_(
            exists().where(QueueEntry.host_id == Host.id, QueueEntry.kind.in_(kind_values),
                           or_(QueueEntry.due_at.is_(None), QueueEntry.due_at <= now)),
            exists().where(Url.host_id == Host.id, Url.kind.in_(kind_values), Url.state == UrlState.DONE.value,
                           Url.next_fetch_at <= now),
            exists().where(Lease.host_id == Host.id),
        )
        mine = Host.origin.in_(list(hosts))
        with self._tx(write=False) as tx:
            with_work = tx.conn.execute(select(func.count()).select_from(Host).where(mine, work)).scalar_one()
            others = tx.conn.execute(
                select(func.count(func.distinct(Host.lease_owner))).where(
                    mine, Host.lease_owner.is_not(None), Host.lease_owner != owner, Host.lease_until >= now)
            ).scalar_one()
            latest: list[tuple[str | None, datetime | None]] = [(row[0], row[1]) for row in tx.conn.execute(
                select(Host.lease_owner, func.max(Host.lease_until)).where(
                    mine, Host.lease_owner.is_not(None), Host.lease_owner != owner).group_by(Host.lease_owner)
            ).all()]
            # Its URL leases too: once the survivors have taken its hosts, a frozen process still holds the URLs
            # it claimed there (lapsed), and counted again it made them hand hosts back to nobody (review).
            latest += [(row[0], row[1]) for row in tx.conn.execute(
                select(Lease.owner, func.max(Lease.lease_until)).join(Host, Host.id == Lease.host_id)
                .where(mine, Lease.owner != owner).group_by(Lease.owner)
            ).all()]
            processes = self._d.extraction_processes(tx.conn, site, stalled=stalled_processes(latest, now))
        return int(with_work), max(int(others), processes - 1)

    def fetched_since(self, origin: str, since: datetime, *, kinds: Sequence[str] = ("detail",)) -> int:
        """URLs of ``origin`` the site answered since ``since``: what a run has spent of the host's page budget.

        Counted from the URLs themselves, not from a counter, so a resumed run (a crash, a Prefect retry, a second
        worker taking the host over) sees exactly what earlier attempts of the same run spent."""
        with self._tx(write=False) as tx:
            return int(tx.conn.execute(
                select(func.count()).select_from(Url).join(Host, Host.id == Url.host_id).where(
                    Host.origin == origin, Url.kind.in_(list(kinds)), Url.last_fetched_at >= aware(since))
            ).scalar_one())

    def due_on(self, origin: str, *, kinds: Sequence[str] = ("detail",), now: datetime | None = None) -> int:
        """URLs of ``origin`` an extraction would fetch now: what a spent page budget defers to the next run."""
        now = aware(now) or utcnow()
        kind_values = list(kinds)
        with self._tx(write=False) as tx:
            host_id = tx.conn.execute(select(Host.id).where(Host.origin == origin)).scalar_one_or_none()
            if host_id is None:
                return 0
            queued = tx.conn.execute(
                select(func.count()).select_from(QueueEntry).where(
                    QueueEntry.host_id == host_id, QueueEntry.kind.in_(kind_values),
                    QueueEntry.due_at.is_(None) | (QueueEntry.due_at <= now))
            ).scalar_one()
            revisits = tx.conn.execute(
                select(func.count()).select_from(Url).where(
                    Url.host_id == host_id, Url.kind.in_(kind_values), Url.state == UrlState.DONE.value,
                    Url.next_fetch_at <= now)
            ).scalar_one()
        return int(queued) + int(revisits)


def stalled_processes(latest: Sequence[tuple[str | None, datetime | None]], now: datetime) -> set[tuple[str, int]]:
    """The processes (machine, PID) all of whose host leases have lapsed: frozen (SIGSTOP, a VM pause, a swap storm)
    or stuck, since a working holder renews a third of the way through. Their session still shows, so counted as a
    peer each survivor kept to its share and left the stalled one's hosts idle until it ran out of its own (6-13 s
    after the lapse, or never within a 12 s freeze: stranger 45). A process that holds no lease (just started, or
    waiting for hosts) is not judged here: it still counts."""
    live: set[tuple[str, int]] = set()
    lapsed: set[tuple[str, int]] = set()
    for holder, until in latest:
        where = owner_process(holder) if holder else None
        if where is None or until is None:
            continue
        (live if aware(until) >= now else lapsed).add(where)
    return lapsed - live
