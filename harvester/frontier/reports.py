"""Read-only views for status, exports and tests: counts, pages and fetches in order, URL states, changes."""


from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, and_, case, exists, func, or_, select
from sqlalchemy.orm import aliased

from harvester.frontier.base import FULL_URL, Database, Part, url_id_of
from harvester.frontier.check import Check, Damage
from harvester.frontier.models import (
    MISSING_ROWS,
    MOVED_ROWS,
    Body,
    Document,
    Fetch,
    Host,
    Lease,
    Page,
    Run,
    Url,
)
from harvester.frontier.rows import stored_page
from harvester.records import UrlKind, UrlState
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.runtime import aware
from harvester.store_results import StoredFetch, StoredPage, StoreStats

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class UrlInfo:
    """Every column of one URL row, times as aware datetimes, and its lease: what ``url_info`` answers, typed so a
    misspelt column fails at the type check rather than as a ``KeyError`` in a test or a seed's redirect check.
    ``state`` is ``leased`` while a worker holds the URL (its row still says ``queued``)."""

    url: str
    id: int
    path: str
    canonical_version: int
    host_id: int
    source_id: int | None
    kind: str
    state: str
    score: float
    depth: int
    first_seen: datetime
    last_seen: datetime
    lastmod: datetime | None
    changefreq: str | None
    priority: float | None
    next_fetch_at: datetime | None
    revisit_s: float | None
    attempts: int
    last_error_class: str | None
    last_error: str | None
    etag: str | None
    last_modified: str | None
    content_hash: str | None
    last_status: int | None
    last_fetched_at: datetime | None
    changed_at: datetime | None
    gone_at: datetime | None
    final_url: str | None
    duplicate_of: int | None
    fetch_path: str | None
    lease_owner: str | None = None
    lease_until: datetime | None = None


_URL_INFO_COLUMNS = frozenset(f.name for f in fields(UrlInfo)) - {"url", "lease_owner", "lease_until"}

_NOT_CURRENT = tuple(s.value for s in (UrlState.GONE, UrlState.DUPLICATE, UrlState.DISALLOWED, UrlState.SKIPPED))
"""URL states whose stored pages a snapshot (``iter_pages(latest=True)``) leaves out."""


_MOVED = "moved"
"""The state an export gives a URL whose last answer was a permanent redirect: its page lives at the target's
address (the frontier keeps such a URL ``done``, its ``last_status`` saying 301/308)."""


_MISSING = "missing"
"""How ``status`` shows a gone URL that was never stored (``MISSING_ROWS``): a broken link, not a deletion."""


def _state_now() -> Any:
    """The URL's state as the exports tell it, by the rule ``iter_pages(latest=True)`` leaves URLs out with: a URL
    whose last answer was a permanent redirect is ``moved``, one whose last answer was 404/410 (queued for a recheck,
    docs/operations.md §4b) is ``gone``; the final states (gone, duplicate, disallowed, skipped) are kept."""
    live = Url.state.not_in(_NOT_CURRENT)
    return case(
        (and_(live, Url.last_status.in_(sorted(PERMANENT_REDIRECTS))), _MOVED),
        (and_(live, Url.last_status.in_((404, 410))), UrlState.GONE.value),
        else_=Url.state,
    )


def _pages_query() -> Select[Any]:
    # The latest answer that served the version (ix_fetches_page_id): its validators are the ones last received
    # with these bytes, where a 200 repeating them brought new ones (``StoredPage.served``).
    served = aliased(Fetch)
    latest = (select(func.max(Fetch.id)).where(Fetch.page_id == Page.id).correlate(Page).scalar_subquery())
    return (
        select(Page.__table__, FULL_URL, _state_now().label("url_state"), Url.kind.label("url_kind"),
               Body.digest, Body.body.label("stored_body"), served.id.label("served_id"),
               served.etag.label("served_etag"), served.last_modified.label("served_last_modified"),
               served.validators_logged.label("served_logged"))
        .join(Url, Url.id == Page.url_id).join(Host, Host.id == Url.host_id).join(Body, Body.id == Page.body_id)
        .outerjoin(served, served.id == latest)
    )


class Reports(Part):
    """What the CLI, the flows' artifacts, the exports and the tests read; a read of every row goes around a
    damaged part of the file through ``check``."""

    def __init__(self, db: Database, check: Check) -> None:
        super().__init__(db)
        self._check = check

    def answered_since(self, since: datetime, origins: Sequence[str]) -> tuple[set[str], set[str]]:
        """(hosts of ``origins`` that answered anything at or after ``since``, hosts asked anything then): their
        robots.txt, a discovery document or a page. A host asked but silent is down, or is not a web site at all
        (an unedited placeholder seed)."""
        since = aware(since) or since
        with self._tx(write=False) as tx:
            hosts = tx.conn.execute(
                select(Host.id, Host.origin, Host.robots_status, Host.robots_fetched_at)
                .where(Host.origin.in_(list(origins)))
            ).all()
            asked = {origin for _, origin, _, at in hosts if at is not None and aware(at) >= since}
            answered = {origin for _, origin, status, at in hosts
                        if status is not None and at is not None and aware(at) >= since}
            for host_id, origin, _, _ in hosts:
                if origin in answered:
                    continue
                page = tx.conn.execute(
                    select(Fetch.status).join(Url, Url.id == Fetch.url_id)
                    .where(Url.host_id == host_id, Fetch.fetched_at >= since)
                    .order_by(Fetch.status.is_(None)).limit(1)
                ).first()
                document = tx.conn.execute(
                    select(Document.status).where(
                        Document.url.startswith(origin + "/", autoescape=True), Document.fetched_at >= since)
                    .order_by(Document.status.is_(None)).limit(1)
                ).first()
                for row in (page, document):
                    if row is not None:
                        asked.add(origin)
                        if row[0] is not None:
                            answered.add(origin)
        return answered, asked

    def state_counts(self) -> dict[str, int]:
        """URLs by state, a leased one as LEASED: the ``by_state`` of ``stats`` without the rest of it.

        For the CLI's progress line, read every half second through a whole run: ``stats`` also counts every page
        and fetch and reads every host."""
        with self._tx(write=False, snapshot=True) as tx:
            counts = _url_counts(tx.conn)
        by_state: dict[str, int] = {}
        for (_, _, state), n in counts.items():
            by_state[state] = by_state.get(state, 0) + n
        return by_state

    def stats(self) -> StoreStats:
        """Counts by state and kind, and per host by state with its parked/blocked/lease state."""
        with self._tx(write=False, snapshot=True) as tx:
            conn = tx.conn
            counts = _url_counts(conn)
            hosts = conn.execute(
                select(Host.id, Host.origin, Host.parked_reason, Host.blocked_until, Host.lease_owner,
                       Host.lease_until, Host.failures)
            ).all()
            pages = int(conn.exec_driver_sql("SELECT count(*) FROM pages").scalar_one())
            fetches = int(conn.exec_driver_sql("SELECT count(*) FROM fetches").scalar_one())
        info: dict[int, dict[str, Any]] = {}
        for host_id, origin, parked, blocked, lease_owner, lease_until, failures in hosts:
            info[host_id] = {
                "origin": origin, "states": {}, "total": 0, "parked_reason": parked,
                "blocked_until": blocked.isoformat() if blocked else None, "lease_owner": lease_owner,
                "lease_until": lease_until.isoformat() if lease_until else None, "failures": failures,
            }
        by_state: dict[str, int] = {}
        by_kind: dict[str, int] = {}
        for (host_id, kind, state), n in counts.items():
            entry = info[host_id]
            entry["states"][state] = entry["states"].get(state, 0) + n
            entry["total"] += n
            by_state[state] = by_state.get(state, 0) + n
            by_kind[kind] = by_kind.get(kind, 0) + n
        return StoreStats(
            total=sum(by_state.values()), by_state=by_state, by_kind=by_kind,
            hosts={entry.pop("origin"): entry for entry in info.values()}, pages=pages, fetches=fetches,
        )

    def iter_pages(
        self, *, since: datetime | None = None, latest: bool = False, batch: int = 500,
        kinds: Sequence[str] | None = (UrlKind.DETAIL.value,), damage: Damage | None = None,
    ) -> Iterator[StoredPage]:
        """Stored versions in fetch order, decompressed, ``batch`` rows per query (keyset pagination, so memory is
        bounded and no connection or snapshot is held between batches). ``latest``: only the newest version of
        each URL, and none of a URL that is gone, a duplicate, disallowed, skipped or moved since (a snapshot of the
        site as last seen). ``kinds``: of URLs of these kinds (detail pages by default; None: listing pages'
        versions too). ``damage``: go around the rows a damaged file cannot give, recording them there."""
        newer = aliased(Page)

        def read(conn: Connection, after: int, upto: int | None, limit: int | None,
                 ids: Sequence[int] | None) -> list[Any]:
            query = _pages_query().where(Page.id > after if ids is None else Page.id.in_(ids)).order_by(Page.id)
            if upto is not None:
                query = query.where(Page.id <= upto)
            if limit is not None:
                query = query.limit(limit)
            if since is not None:
                query = query.where(Page.fetched_at >= since)
            if kinds is not None:
                query = query.where(Url.kind.in_(list(kinds)))
            if latest:
                query = query.where(
                    Url.state.not_in(_NOT_CURRENT),
                    # A URL that answers with a permanent redirect now: its page lives at the target's address;
                    # one whose last answer was 404/410 (queued for a recheck, docs/operations.md §4b) is gone.
                    or_(Url.last_status.is_(None), Url.last_status.not_in((*sorted(PERMANENT_REDIRECTS), 404, 410))),
                    ~exists().where(newer.url_id == Page.url_id, newer.id > Page.id),  # ix_pages_url_id
                )
            return list(conn.execute(query).all())

        whole = since is None and not latest and kinds is None  # a filter leaves gaps that are not damage
        for rows in self._check.rows_around_damage("pages", read, batch=batch, damage=damage, expect_all=whole):
            for row in rows:
                yield stored_page(row)

    def iter_fetches(
        self, *, since: datetime | None = None, batch: int = 500, damage: Damage | None = None
    ) -> Iterator[StoredFetch]:
        """Completed fetches in order, each with its URL and, when it stored a body, its page (for WARC); a 304
        with the version it confirmed (the URL's newest page stored at or before it), so a WARC of a window that
        holds no earlier response still names that version by URL, date and digest. ``damage`` as for
        ``iter_pages``."""
        pages: dict[int, StoredPage] = {}
        # The version a 304 confirmed: through ix_pages_url_id, for 304s only.
        confirmed = (
            select(func.max(Page.id)).where(Page.url_id == Fetch.url_id, Page.fetched_at <= Fetch.fetched_at)
            .correlate(Fetch).scalar_subquery()
        )
        page_of = case((and_(Fetch.status == 304, Fetch.page_id.is_(None)), confirmed),
                       else_=Fetch.page_id).label("version_id")
        # In a window, the version before a new one (its validators made the request conditional): the WARC's
        # request record must say so, and the window holds no earlier response to take them from.
        prior_of = (
            select(func.max(Page.id)).where(Page.url_id == Fetch.url_id, Page.id < Fetch.page_id)
            .correlate(Fetch).scalar_subquery().label("prior_id")
        )
        priors: dict[int, tuple[str | None, str | None]] = {}

        def read(conn: Connection, after: int, upto: int | None, limit: int | None,
                 ids: Sequence[int] | None) -> list[Any]:
            query = (
                select(Fetch.__table__, FULL_URL, page_of, Run.user_agent.label("sent_user_agent"))
                .join(Url, Url.id == Fetch.url_id).join(Host, Host.id == Url.host_id)
                .outerjoin(Run, Run.id == Fetch.run_id)
                .where(Fetch.id > after if ids is None else Fetch.id.in_(ids)).order_by(Fetch.id)
            )
            if upto is not None:
                query = query.where(Fetch.id <= upto)
            if limit is not None:
                query = query.limit(limit)
            if since is not None:
                query = query.where(Fetch.fetched_at >= since).add_columns(prior_of)
            rows = list(conn.execute(query).all())
            page_ids = [r.version_id for r in rows if r.version_id is not None]
            prior_ids = [r.prior_id for r in rows if since is not None and r.prior_id is not None]
            if prior_ids:
                priors.update((pid, (etag, last_modified)) for pid, etag, last_modified in conn.execute(
                    select(Page.id, Page.etag, Page.last_modified).where(Page.id.in_(prior_ids))))
            if page_ids:
                for prow in conn.execute(_pages_query().where(Page.id.in_(page_ids))):
                    pages[prow.id] = stored_page(prow)
                if damage is not None and self._d.is_sqlite:  # a fetch's page that a damaged file cannot give
                    for page_id in page_ids:
                        if page_id not in pages:
                            damage.add("pages", page_id)
            return rows

        for rows in self._check.rows_around_damage("fetches", read, batch=batch, damage=damage,
                                                   expect_all=since is None):
            for r in rows:
                yield StoredFetch(
                    fetch_id=r.id, url_id=r.url_id, url=r.url, fetched_at=r.fetched_at, status=r.status,
                    outcome=r.outcome, bytes=r.bytes, error_class=r.error_class, run_id=r.run_id,
                    page=pages.get(r.version_id) if r.version_id is not None else None, change=r.change,
                    prior=(priors.get(r.prior_id) if since is not None and r.prior_id is not None
                           and r.change != "same" and r.status != 304 else None),  # a 304 stored nothing new
                    sent=(r.if_none_match, r.if_modified_since) if r.conditional is not None else None,
                    # Logged before 0023: the answer is taken to have carried its version's (``served`` None).
                    served=(r.etag, r.last_modified) if r.page_id is not None and r.validators_logged else None,
                    user_agent=r.sent_user_agent,
                )
            pages.clear()
            priors.clear()

    def request_user_agents(self, *, since: datetime | None = None) -> set[str | None]:
        """The User-Agents that requests answered 2xx or 304 (at or after ``since``) carried: their runs'
        (``runs.user_agent``), None for a run that recorded none (started before migration 0013) or a fetch logged
        outside any run. What a WARC's warcinfo says was sent, before its records are written: per run (few rows),
        one index probe of its fetches each, never a pass over the fetch log."""
        answered = [or_(Fetch.status.between(200, 299), Fetch.status == 304)]
        runs = []
        if since is not None:
            answered.append(Fetch.fetched_at >= since)
            runs.append(or_(Run.finished_at.is_(None), Run.finished_at >= since))  # no probe of older runs' rows
        with self._tx(write=False) as tx:
            agents: set[str | None] = set(tx.conn.execute(
                select(Run.user_agent).where(*runs, exists().where(Fetch.run_id == Run.id, *answered)).distinct()
            ).scalars())
            if tx.conn.execute(select(exists().where(Fetch.run_id.is_(None), *answered))).scalar():
                agents.add(None)
        return agents

    def url_states(self) -> dict[str, tuple[str, str | None]]:
        """url -> (state, content_hash) for every URL: for tests and crash checks, not for big frontiers."""
        with self._tx(write=False) as tx:
            rows = tx.conn.exec_driver_sql(
                "SELECT h.origin, u.path, CASE WHEN l.url_id IS NULL THEN u.state ELSE 'leased' END, u.content_hash"
                " FROM urls u JOIN hosts h ON h.id = u.host_id LEFT JOIN leases l ON l.url_id = u.id"
            )
            return {origin + path: (state, content_hash) for origin, path, state, content_hash in rows}

    def url_info(self, url: str) -> UrlInfo | None:
        """One URL row and its lease, for diagnostics, tests and the seed's redirect check; None if not stored."""
        with self._tx(write=False) as tx:
            url_id = url_id_of(tx.conn, self._d, url)
            if url_id is None:
                return None
            row = tx.conn.execute(select(Url.__table__).where(Url.id == url_id)).mappings().one()
            lease = tx.conn.execute(select(Lease.owner, Lease.lease_until).where(Lease.url_id == url_id)).first()
        columns = {key: value for key, value in row.items() if key in _URL_INFO_COLUMNS}
        if lease is None:
            return UrlInfo(url=url, **columns)
        return UrlInfo(url=url, **{**columns, "state": UrlState.LEASED.value}, lease_owner=lease[0],
                       lease_until=aware(lease[1]))


def _url_counts(conn: Connection) -> dict[tuple[int, str, str], int]:
    """(host id, kind, state) -> URLs, a leased one as LEASED, without reading a URL row but those in flight.

    Finished URLs by an index-only walk of ``ix_urls_finished`` (queued ones are not in it); queued ones from
    ``queue_counts``, the number of ``queue`` entries (each queued URL nobody holds), and ``leases``, which holds
    the others. Grouping every
    ``urls`` row instead (three times, once per grouping) made ``harvester status`` take 5.8 s and 125 MB at
    1,000,000 URLs on SQLite (issue 32)."""
    counts: dict[tuple[int, str, str], int] = {}

    def add(key: tuple[int, str, str], n: int) -> None:
        counts[key] = counts.get(key, 0) + n
        if not counts[key]:
            del counts[key]

    for host_id, kind, state, n in conn.exec_driver_sql(
        "SELECT host_id, kind, state, count(*) FROM urls WHERE state <> 'queued' GROUP BY host_id, kind, state"
    ):
        add((int(host_id), str(kind), str(state)), int(n))
    # A done URL whose last answer was a permanent redirect is moved, as ``export`` says (its page lives at the
    # target's address; done means live): from the partial index of the few such URLs (0018), never a walk.
    for host_id, kind, n in conn.exec_driver_sql(
        f"SELECT host_id, kind, count(*) FROM urls WHERE {MOVED_ROWS} GROUP BY host_id, kind"  # noqa: S608 -- a constant
    ):
        add((int(host_id), str(kind), UrlState.DONE.value), -int(n))
        add((int(host_id), str(kind), _MOVED), int(n))
    # A gone URL never stored (no content hash: a seed without a home page, a broken link) is missing, as a cycle's
    # counts say: gone is a stored page that went away (docs/operations.md, "What the counts mean").
    for host_id, kind, n in conn.exec_driver_sql(
        f"SELECT host_id, kind, count(*) FROM urls WHERE {MISSING_ROWS} GROUP BY host_id, kind"  # noqa: S608
    ):
        add((int(host_id), str(kind), UrlState.GONE.value), -int(n))
        add((int(host_id), str(kind), _MISSING), int(n))
    # Queue entries per host and kind as the triggers on ``queue`` keep them (migration 0017): a few rows per host,
    # where counting the queue itself walked every entry (76 ms at 1,000,000 URLs).
    for host_id, kind, n in conn.exec_driver_sql(
        "SELECT host_id, kind, sum(n) FROM queue_counts GROUP BY host_id, kind"
    ):
        add((int(host_id), str(kind), UrlState.QUEUED.value), int(n))
    # A leased URL's row still says QUEUED: report it as LEASED. From the leases (a few thousand at most) to their
    # URLs: SQLite's planner took the join the other way, every URL by its (host, path) index and a lease looked
    # up for each (82 ms at 1,000,000 URLs), which CROSS JOIN forbids it (PostgreSQL plans it as any join).
    for host_id, kind, state, n in conn.exec_driver_sql(
        "SELECT u.host_id, u.kind, u.state, count(*) FROM leases l CROSS JOIN urls u WHERE u.id = l.url_id"
        " GROUP BY u.host_id, u.kind, u.state"
    ):
        if state != UrlState.QUEUED.value:
            add((int(host_id), str(kind), str(state)), -int(n))
        add((int(host_id), str(kind), UrlState.LEASED.value), int(n))
    return counts
