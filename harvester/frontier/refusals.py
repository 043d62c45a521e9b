"""The URLs robots.txt refuses, per host and per document naming them: counted once per URL, kept while robots.txt
refuses them and a document still names them.

Discovery neither stores nor fetches such a URL, so no URL state counts it; this table is where ``harvester status``
counts them, true on a re-crawl whose sitemaps answer 304 (nothing parsed, the rows of their last read kept).
Discovery writes a document's refusals as it finds them (``name_refused``, a sitemap's a batch at a time), before
the document's own record: a kill repeats the document and its refusals together, and no host holds them all.
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from sqlalchemy import distinct, func, or_, select, update

from harvester.frontier.base import Database, Part
from harvester.frontier.keys import Keys
from harvester.frontier.models import Document, Host, RobotsRefusal, Source
from harvester.records import UrlState
from harvester.runtime import aware, utcnow

REJUDGE_BATCH = 2_000
"""A host's URLs read per transaction when robots.txt's rules changed (``rejudge_urls``): a million-URL host is
judged a batch at a time along its ``(host_id, path)`` key, no long transaction and no host held in memory."""

UNKNOWN_SOURCE = 0
"""``source_id`` of the rows kept from before 0019, which did not record the document that named them."""


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
                     now: datetime | None = None) -> tuple[int, int, list[str]] | None:
        """Judge the host's stored URLs by robots.txt's rules as read now, when they differ from the rules they
        were last judged by (``hosts.robots_judged``, ``fingerprint`` theirs); None when they do not (the common
        run: one indexed read). A DISALLOWED URL the rules allow becomes due now (queued: this run asks it, with
        the validators it kept); a DONE one they refuse becomes DISALLOWED without a request (out of the snapshot,
        counted as refused), unless ``refuse`` is False (robots.txt unavailable: everything refused for now is no
        verdict on a page). Each URL is judged as it is requested (its fetch form). Batched along the host's
        ``(host_id, path)`` key, each batch its own transaction; the fingerprint is recorded after the last, so a
        kill in between judges again. Returns (made due, refused, the documents to read in full): the sitemaps and
        feeds that named a URL refused then (never stored, ``robots_refusals``) that the rules allow now, whose
        304 would name it no more."""
        d = self._d
        now = aware(now) or utcnow()
        with self._tx(write=False) as tx:
            row = tx.conn.execute(select(Host.id, Host.robots_judged).where(Host.origin == origin)).first()
        if row is None or row[1] == fingerprint:
            return None
        host_id, after, due, refused = int(row[0]), "", 0, 0
        while True:
            with self._tx() as tx:
                rows = tx.conn.exec_driver_sql(
                    f"SELECT id, path, fetch_path, state FROM urls WHERE host_id = {d.p} AND path > {d.p}"
                    f" ORDER BY path LIMIT {REJUDGE_BATCH}", (host_id, after)).all()
                if not rows:
                    break
                after = rows[-1][1]
                lifted = [int(i) for i, path, fetch_path, state in rows
                          if state == UrlState.DISALLOWED.value and allowed(origin + (fetch_path or path))]
                barred = [int(i) for i, path, fetch_path, state in rows
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
                    refused += tx.conn.exec_driver_sql(
                        f"UPDATE urls SET state = 'disallowed', last_error_class = 'robots_disallowed',"
                        f" last_error = 'disallowed by robots.txt' WHERE {where} AND state = 'done'",
                        tuple(params)).rowcount
        with self._tx() as tx:
            named = tx.conn.execute(
                select(Source.label, RobotsRefusal.path, RobotsRefusal.judged)
                .join(Source, Source.id == RobotsRefusal.source_id).where(RobotsRefusal.host_id == host_id)
            ).all()
            tx.conn.execute(update(Host).where(Host.id == host_id).values(robots_judged=fingerprint))
        reread = sorted({str(label).partition(":")[2] for label, path, judged in named
                         if allowed(judged or origin + path)} - {""})
        return due, refused, reread

    def refused_counts(self) -> dict[str, int]:
        """Per host (origin), the URLs robots.txt refuses, each once however many documents name it; hosts with
        none are left out."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Host.origin, func.count(distinct(RobotsRefusal.path)))
                .join(RobotsRefusal, RobotsRefusal.host_id == Host.id).group_by(Host.origin)
            ).all()
        return {str(origin): int(n) for origin, n in rows}
