"""The URLs robots.txt refuses, per host and per document naming them: counted once per URL, kept while robots.txt
refuses them and a document still names them.

Discovery neither stores nor fetches such a URL, so no URL state counts it; this table is where ``harvester status``
counts them, true on a re-crawl whose sitemaps answer 304 (nothing parsed, the rows of their last read kept).
Discovery writes a document's refusals as it finds them (``name_refused``, a sitemap's a batch at a time), before
the document's own record: a kill repeats the document and its refusals together, and no host holds them all.
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Connection, distinct, exists, func, or_, select, update

from harvester.frontier.base import Database, Part
from harvester.frontier.keys import Keys
from harvester.frontier.models import Document, Host, RobotsRefusal, Source, Url
from harvester.records import OWN_REFUSAL, UrlState, http_origin
from harvester.runtime import aware, utcnow

REJUDGE_BATCH = 2_000
"""A host's URLs read per transaction when robots.txt's rules changed (``rejudge_urls``): a million-URL host is
judged a batch at a time along its ``(host_id, path)`` key, no long transaction and no host held in memory."""

UNKNOWN_SOURCE = 0
"""``source_id`` of the rows kept from before 0019, which did not record the document that named them."""

_HOP_REFUSED = re.compile(r"redirect to (\S+) refused \(")


class Rejudged(NamedTuple):
    """What judging a host's stored URLs again did (``Refusals.rejudge_urls``)."""

    due: int
    """DISALLOWED URLs the rules allow now, due in this run: what robots.txt refused of each (``refused_at``)."""
    refused: int
    """DONE URLs the rules refuse now, out of the snapshot without a request."""
    reread: list[str]
    """Documents to read in full: they named a URL refused then, never stored, that the rules allow now."""
    released: int
    """Duplicates of the URLs refused now, due in this run: one of them holds the content in the snapshot."""


def refused_at(origin: str, own: str, final_url: str | None, last_error: str | None) -> tuple[str, ...] | None:
    """What robots.txt refused of a DISALLOWED URL of ``origin`` requested as ``own`` (its fetch path): its own
    address, or its own address and its redirect's target when the refusal was at the target (its ``final_url``,
    or the ``last_error`` of a row stored before the target was kept). None when the rules of ``origin`` cannot lift
    it: a target on another host, or one not kept. Judging such a URL by its own path alone lifted it at any change
    of robots.txt, to be asked for the same refusal and counted allowed again."""
    if last_error is None or not last_error.startswith("redirect to "):
        return (origin + own,)
    found = _HOP_REFUSED.match(last_error)
    target = final_url or (found.group(1) if found else None)
    if target is None or http_origin(target) != origin:
        return None
    return origin + own, target


class Refusals(Part):
    """``robots_refusals``: what each document of a host named that robots.txt refuses, less what robots.txt allows
    again."""

    def __init__(self, db: Database, keys: Keys) -> None:
        super().__init__(db)
        self._keys = keys

    def name_refused(self, origin: str, found: Mapping[str, Mapping[str, str | None]], *, replace: bool,
                     now: datetime | None = None) -> None:
        """Record what each document of ``found`` (its provenance label -> canonical URL of ``origin`` -> the
        spelling robots.txt judged, None: the same) named that robots.txt refuses. ``replace``: the first part of
        a new full read of those documents, whose earlier rows go (what they named then and not now is no longer
        counted)."""
        d = self._d
        now = now or utcnow()
        start = len(origin)
        with self._tx() as tx:
            host_id = self._keys.host_ids(tx, [origin])[origin]
            sources = self._keys.source_ids(tx, list(found))
            if replace:
                where, params = d.any_of("source_id", list(sources.values()))
                tx.conn.exec_driver_sql(f"DELETE FROM robots_refusals WHERE host_id = {d.p} AND {where}",
                                        (host_id, *params))
            rows = [(host_id, url[start:], sources[label], judged, d.ts(now)) for label, urls in found.items()
                    for url, judged in urls.items() if url.startswith(origin + "/")]
            for begin in range(0, len(rows), self._chunk):
                tx.conn.exec_driver_sql(
                    d.insert_ignore("robots_refusals", ("host_id", "path", "source_id", "judged", "found_at"),
                                    ("host_id", "path", "source_id")),
                    rows[begin : begin + self._chunk],
                )

    def keep_refused(self, origin: str, allowed: Callable[[str], bool]) -> int:
        """Drop the host's recorded URLs that ``allowed`` (robots.txt's verdict now) lets through: a robots.txt that
        changed counts as it rules now, whether or not the documents naming them were read again. The rows kept
        from before 0019 (no document recorded) go once no document of the host read before it is left unread.
        Returns how many URLs of the host are refused now."""
        d = self._d
        with self._tx() as tx:
            host_id = self._keys.host_ids(tx, [origin])[origin]
            unread = tx.conn.execute(
                select(Document.id).where(
                    Document.url.startswith(origin + "/", autoescape=True), Document.content_hash.is_not(None),
                    or_(Document.refusals_read.is_(None), Document.refusals_read.is_(False)),
                ).limit(1)
            ).first()
            if unread is None:
                tx.conn.exec_driver_sql(f"DELETE FROM robots_refusals WHERE host_id = {d.p} AND source_id = {d.p}",
                                        (host_id, UNKNOWN_SOURCE))
            kept = tx.conn.execute(
                select(RobotsRefusal.path, func.min(RobotsRefusal.judged)).where(RobotsRefusal.host_id == host_id)
                .group_by(RobotsRefusal.path)
            ).all()
            lifted = [path for path, judged in kept if allowed(judged or origin + path)]
            for begin in range(0, len(lifted), self._chunk):
                where, params = d.any_of("path", lifted[begin : begin + self._chunk])
                tx.conn.exec_driver_sql(f"DELETE FROM robots_refusals WHERE host_id = {d.p} AND {where}",
                                        (host_id, *params))
        return len(kept) - len(lifted)

    def rejudge_urls(self, origin: str, allowed: Callable[[str], bool], fingerprint: str, *, refuse: bool = True,
                     now: datetime | None = None) -> Rejudged | None:
        """Judge the host's stored URLs by robots.txt's rules as read now, when they differ from the rules they
        were last judged by (``hosts.robots_judged``, ``fingerprint`` theirs); None when they do not (the common
        run: one indexed read). A DISALLOWED URL the rules allow becomes due now (queued: this run asks it, with
        the validators it kept); a DONE one they refuse becomes DISALLOWED without a request (out of the snapshot,
        counted as refused), unless ``refuse`` is False (robots.txt unavailable: everything refused for now is no
        verdict on a page), and its duplicates are due now, asked in full: each may hold the content in the
        snapshot in its place. Each URL is judged as it is requested (its fetch form), and one refused at its
        redirect's target by what robots.txt refused there (``refused_at``). Batched along the host's
        ``(host_id, path)`` key, each batch its own transaction; the fingerprint is recorded after the last, so a
        kill in between judges again. Also returns the documents to read in full: the sitemaps and feeds that named
        a URL refused then (never stored, ``robots_refusals``) that the rules allow now, whose 304 would name it no
        more."""
        d = self._d
        now = aware(now) or utcnow()
        with self._tx(write=False) as tx:
            row = tx.conn.execute(select(Host.id, Host.robots_judged).where(Host.origin == origin)).first()
        if row is None or row[1] == fingerprint:
            return None
        host_id, after, due, refused, released = int(row[0]), "", 0, 0, 0
        while True:
            with self._tx() as tx:
                rows = tx.conn.exec_driver_sql(
                    f"SELECT id, path, fetch_path, state, final_url, last_error FROM urls WHERE host_id = {d.p}"
                    f" AND path > {d.p} ORDER BY path LIMIT {REJUDGE_BATCH}", (host_id, after)).all()
                if not rows:
                    break
                after = rows[-1][1]
                lifted = [int(i) for i, path, fetch_path, state, final_url, error in rows
                          if state == UrlState.DISALLOWED.value
                          and (judged := refused_at(origin, fetch_path or path, final_url, error)) is not None
                          and all(allowed(url) for url in judged)]
                barred = [int(i) for i, path, fetch_path, state, _, _ in rows
                          if refuse and state == UrlState.DONE.value and not allowed(origin + (fetch_path or path))]
                if lifted:
                    where, params = d.any_of("id", lifted)
                    made = tx.conn.exec_driver_sql(
                        f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p} WHERE {where}"
                        " AND state = 'disallowed' RETURNING host_id, kind, -score, id, next_fetch_at",
                        (d.ts(now), *params)).all()
                    if made:
                        tx.conn.exec_driver_sql(d.enqueue_sql, [tuple(r) for r in made])
                    due += len(made)
                if barred:
                    where, params = d.any_of("id", barred)
                    held = [int(r[0]) for r in tx.conn.exec_driver_sql(
                        f"UPDATE urls SET state = 'disallowed', last_error_class = 'robots_disallowed',"
                        f" last_error = '{OWN_REFUSAL}' WHERE {where} AND state = 'done' RETURNING id",
                        tuple(params)).all()]
                    refused += len(held)
                    released += self._release_copies(tx.conn, held, now)
        with self._tx() as tx:
            named = tx.conn.execute(
                select(Source.label, RobotsRefusal.path, RobotsRefusal.judged)
                .join(Source, Source.id == RobotsRefusal.source_id).where(RobotsRefusal.host_id == host_id)
            ).all()
            tx.conn.execute(update(Host).where(Host.id == host_id).values(robots_judged=fingerprint))
        reread = sorted({str(label).partition(":")[2] for label, path, judged in named
                         if allowed(judged or origin + path)} - {""})
        return Rejudged(due, refused, reread, released)

    def _release_copies(self, conn: Connection, holders: Sequence[int], now: datetime) -> int:
        """The duplicates of ``holders`` (refused now, out of the snapshot with their content) are due now, without
        their validators (they keep no page of their own: a 304 would leave the content out): asked in this run,
        one of them holds the content again (no refused URL is a holder, ``holders.Holders``). Returns how many."""
        d = self._d
        released = 0
        for begin in range(0, len(holders), self._chunk):
            where, params = d.any_of("duplicate_of", list(holders[begin : begin + self._chunk]))
            made = conn.exec_driver_sql(
                f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p}, etag = NULL, last_modified = NULL"
                f" WHERE {where} AND state = 'duplicate' RETURNING host_id, kind, -score, id, next_fetch_at",
                (d.ts(now), *params)).all()
            if made:
                conn.exec_driver_sql(d.enqueue_sql, [tuple(r) for r in made])
            released += len(made)
            # Copies already due (their revisit, an extraction beside this discovery) are asked in full too.
            conn.exec_driver_sql(f"UPDATE urls SET etag = NULL, last_modified = NULL WHERE {where}"
                                 " AND state = 'queued'", tuple(params))
        return released

    def refused_counts(self) -> dict[str, int]:
        """Per host (origin), the URLs robots.txt keeps from us, each once: the stored ones in state DISALLOWED
        (refused at their address or at their redirect's target; the ``disallowed`` column of ``status``) and those
        discovery found but never stored (``robots_refusals`` rows naming no stored URL, however many documents name
        them); hosts with none are left out. A stored URL counts by its state alone: named again by a sitemap robots
        .txt refuses it in, it is counted once, whether or not that sitemap was read again; a stored URL robots.txt
        refuses now is counted once it is judged so (``rejudge_urls``, or refused when next asked)."""
        stored = (select(Host.origin, func.count(Url.id)).join(Url, Url.host_id == Host.id)
                  .where(Url.state == UrlState.DISALLOWED.value).group_by(Host.origin))
        unstored = (select(Host.origin, func.count(distinct(RobotsRefusal.path)))
                    .join(RobotsRefusal, RobotsRefusal.host_id == Host.id)
                    .where(~exists().where(Url.host_id == RobotsRefusal.host_id, Url.path == RobotsRefusal.path))
                    .group_by(Host.origin))
        counts: dict[str, int] = {}
        with self._tx(write=False) as tx:
            for query in (stored, unstored):
                for origin, n in tx.conn.execute(query):
                    counts[str(origin)] = counts.get(str(origin), 0) + int(n)
        return {origin: n for origin, n in counts.items() if n}
