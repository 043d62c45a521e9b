"""Found URLs into the frontier: the bulk upsert (two strategies, one per dialect's writers); lookups by URL are
``url_lookups``."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from harvester.frontier.base import Database, Part, Transaction
from harvester.frontier.dialects import REVISIT_RANK_OFFSET
from harvester.frontier.keys import Keys
from harvester.frontier.relisted import PreviousReads
from harvester.frontier.rows import Merged, merge
from harvester.frontier.url_lookups import lookup_paths
from harvester.records import DiscoveredUrl
from harvester.rules.urls import CANONICAL_VERSION
from harvester.runtime import aware, utcnow
from harvester.store_results import AddResult

logger = logging.getLogger(__name__)

_Known = tuple[int, "int | None", str, float, str]
"""A stored URL as the upsert paths read it: (id, source_id, state, score, kind)."""

_LISTS = frozenset({"seed", "sitemap", "feed", "listing", "pagination"})
"""Source kinds that list a site's pages (re-read on a schedule), as against a link on a page or a redirect."""

_RELISTS = frozenset({"sitemap", "feed", "listing", "pagination"})
"""List kinds that can name a URL *again* after a full read that did not name it (``relisted.PreviousReads``)."""

_PUBLISHED = frozenset({"sitemap", "feed"})
"""Source kinds whose DETAIL entries outweigh a listing guess made from a link's shape (``_promote``)."""


class Discovered(Part):
    """URLs discovery and extraction found: bulk upserts keeping best score, least depth, every source."""

    def __init__(self, db: Database, keys: Keys) -> None:
        super().__init__(db)
        self._keys = keys
        self._canonical_version = CANONICAL_VERSION
        self._known_share: dict[int, float] = {}  # per host: share of the last chunk that was already stored

    def add_discovered(self, batch: Sequence[DiscoveredUrl], *, now: datetime | None = None) -> AddResult:
        """Bulk upsert of discovered URLs (one statement per chunk, never one per URL).

        New URLs are QUEUED and due now. A URL seen again keeps its best score and least depth, gains the new
        source in its provenance, and takes lastmod/changefreq/priority when given; a newer lastmod than both the
        stored one and the last fetch makes a DONE URL due now (``made_due``). A malformed record raises
        ``InvalidRecord`` naming it, and nothing of the batch is written.
        """
        merged = merge(batch)
        if not merged:
            return AddResult(0, 0, 0)
        with self._tx() as tx:
            return self.upsert(tx, merged, aware(now) or utcnow())


    def upsert(
        self, tx: Transaction, merged: list[Merged], now: datetime,
        previous_reads: Mapping[str, datetime | None] | None = None,
    ) -> AddResult:
        """``merged`` into the frontier in ``tx`` (``add_discovered``, and a completion's outlinks).
        ``previous_reads``: label -> previous full read of the listing pages naming them (``PreviousReads``)."""
        reads = PreviousReads(tx.conn, self._d, previous_reads)
        d, conn = self._d, tx.conn
        host_of = self._keys.host_ids(tx, list({m.origin for m in merged}))
        source_of = self._keys.source_ids(tx, list({s for m in merged for s in m.sources}))
        total = AddResult(0, 0, 0)
        for start in range(0, len(merged), self._chunk):
            chunk = merged[start : start + self._chunk]
            hids = [host_of[m.origin] for m in chunk]
            first_source = [source_of[m.sources[0]] for m in chunk]
            if d.serialized_writers and all(self._known_share.get(h, 0.0) < 0.5 for h in set(hids)):
                result, stored = self._insert_first(conn, hids, chunk, first_source, now, reads)
            else:
                result, stored = self._lookup_first(conn, hids, chunk, first_source, now, reads)
            share = result.updated / len(chunk)
            for host_id in set(hids):
                self._known_share[host_id] = share
            pairs: set[tuple[int, int]] = set()
            for h, m in zip(hids, chunk, strict=True):
                entry = stored.get((h, m.path))
                if entry is None:
                    continue
                url_id, row_source = entry
                for label in m.sources:
                    sid = source_of[label]
                    if sid != row_source:
                        pairs.add((url_id, sid))
            if pairs:
                conn.exec_driver_sql(
                    d.insert_ignore("url_sources", ("url_id", "source_id"), ("url_id", "source_id")), sorted(pairs)
                )
            total = total + result
        return total

    def _lookup_first(
        self, conn: Connection, hids: list[int], chunk: list[Merged], first_source: list[int], now: datetime,
        reads: PreviousReads,
    ) -> tuple[AddResult, dict[tuple[int, str], tuple[int, int | None]]]:
        """Look the chunk up, then upsert it: the cheaper order when most URLs are already known."""
        d = self._d
        known, made_due, revive, announced, period_due = self._known_rows(conn, hids, chunk, None, now, reads)
        before = d.max_url_id(conn) if d.serialized_writers else 0
        written = d.write_urls(conn, hids, chunk, first_source, self._canonical_version, now)
        self._due_in_period(conn, period_due, now)
        if written is not None:
            self._stored_meanwhile(conn, known, written)
        self._announce(conn, announced)
        self._rerank(conn, hids, chunk, known)
        self._revive(conn, revive)
        self._promote(conn, hids, chunk, known, now)
        stored = {key: (row[0], row[1]) for key, row in known.items()}
        if written is None:
            # SQLite reports no rows: the new ones are exactly those above ``before`` (serialized writers).
            d.enqueue_above(conn, before)
            inserted = d.max_url_id(conn) - before
            # Known rows came from the lookup; new URLs that arrived with several sources need their ids, for
            # their extra sources go to url_sources.
            multi: dict[int, list[str]] = {}
            for h, m in zip(hids, chunk, strict=True):
                if len(m.sources) > 1 and (h, m.path) not in known:
                    multi.setdefault(h, []).append(m.path)
            for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id"):
                stored[(host_id, path)] = (url_id, source_id)
        else:  # the database queued the rows it inserted, and says which they were
            inserted = sum(1 for row in written.values() if row[2])
            stored = {key: (row[0], row[1]) for key, row in written.items()}
        return AddResult(inserted, len(chunk) - inserted, made_due), stored

    def _insert_first(
        self, conn: Connection, hids: list[int], chunk: list[Merged], first_source: list[int], now: datetime,
        reads: PreviousReads,
    ) -> tuple[AddResult, dict[tuple[int, str], tuple[int, int | None]]]:
        """Insert what is new first (one index probe per URL), and only when some URLs turned out to be known,
        look those up and update them. Needs serialized writers (SQLite): new rows are exactly the ids above
        the largest id before the insert, and nobody else writes in between."""
        d = self._d
        before = d.max_url_id(conn)
        d.insert_new_urls(conn, hids, chunk, first_source, self._canonical_version, now)
        inserted = d.max_url_id(conn) - before
        if inserted:
            d.enqueue_above(conn, before)
        if inserted == len(chunk):
            multi: dict[int, list[str]] = {}
            for h, m in zip(hids, chunk, strict=True):
                if len(m.sources) > 1:
                    multi.setdefault(h, []).append(m.path)
            stored = {
                (host_id, path): (url_id, source_id)
                for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id")
            }
            return AddResult(inserted, 0, 0), stored
        # Some were known: their rows are untouched so far (DO NOTHING), so their old state is still readable.
        known, made_due, revive, announced, period_due = self._known_rows(conn, hids, chunk, before, now, reads)
        again = [(h, m, sid) for h, m, sid in zip(hids, chunk, first_source, strict=True) if (h, m.path) in known]
        d.write_urls(conn, [a[0] for a in again], [a[1] for a in again], [a[2] for a in again],
                     self._canonical_version, now)
        self._due_in_period(conn, period_due, now)
        self._announce(conn, announced)
        self._rerank(conn, hids, chunk, known)
        self._revive(conn, revive)
        self._promote(conn, hids, chunk, known, now)
        stored = {key: (row[0], row[1]) for key, row in known.items()}
        multi = {}
        for h, m in zip(hids, chunk, strict=True):
            if len(m.sources) > 1 and (h, m.path) not in known:
                multi.setdefault(h, []).append(m.path)
        for host_id, path, url_id, source_id in self._lookup(conn, multi, "id, source_id"):
            stored[(host_id, path)] = (url_id, source_id)
        return AddResult(inserted, len(known), made_due), stored

    def _stored_meanwhile(
        self, conn: Connection, known: dict[tuple[int, str], _Known],
        written: dict[tuple[int, str], tuple[int, int | None, bool]],
    ) -> None:
        """Add to ``known`` the rows the write found stored though the lookup had not: another transaction stored
        them in between (PostgreSQL's writers run side by side; the write waited for that commit, and this read
        sees it). Judged on the lookup alone, a listing page the listing crawl's completion stored there was no
        known listing page for ``_promote``: the feed naming it a detail changed nothing, and it was never fetched
        as one (test_feed_names_a_listing under load; tests/frontier/test_promote_race.py)."""
        meanwhile: dict[int, list[str]] = {}
        for (host_id, path), (_id, _source, inserted) in written.items():
            if not inserted and (host_id, path) not in known:
                meanwhile.setdefault(host_id, []).append(path)
        if not meanwhile:
            return
        for host_id, path, url_id, source_id, state, score, kind in self._lookup(
                conn, meanwhile, "id, source_id, state, score, kind"):
            known[(host_id, path)] = (url_id, source_id, state, score, kind)

    def _rerank(
        self, conn: Connection, hids: list[int], chunk: list[Merged], known: dict[tuple[int, str], _Known]
    ) -> None:
        """Queued URLs that came back with a better score move up in the queue (the upsert kept the best)."""
        moves = []
        for h, m in zip(hids, chunk, strict=True):
            row = known.get((h, m.path))
            if row is not None and row[2] == "queued" and m.score > row[3]:
                moves.append((-m.score, h, row[4], -row[3], row[0]))
        if moves:
            conn.exec_driver_sql(self._d.rerank_sql, moves)

    def _promote(
        self, conn: Connection, hids: list[int], chunk: list[Merged], known: dict[tuple[int, str], _Known],
        now: datetime,
    ) -> None:
        """Stored listing pages that a feed or sitemap entry names as a detail become details: stronger evidence
        wins. A URL's kind is written when it is first stored, and a listing page's link that merely looks like
        pagination (``/p/2`` beside ``/list?page=1``) was stored as a listing when the listing crawl read it before
        the feed taught the site's shapes; its feed entries then changed nothing, the product was never counted
        new and never in the snapshot. A seed stays a listing (the operator said so).

        The URL forgets what it kept as a listing (content hash and validators: its next request is in full and
        its first answer as a detail is a new version, ``Outcomes._store_versions``) and is due now: a finished
        one goes back to the queue, a queued one's entry moves to the detail kind (``queue_counts``' triggers
        follow both). One the listing crawl holds is put back by its completion (``Outcomes.complete_many``)."""
        wanted = [row[0] for h, m in zip(hids, chunk, strict=True)
                  if m.kind == "detail" and (row := known.get((h, m.path))) is not None and row[4] == "listing"
                  and any(label.partition(":")[0] in _PUBLISHED for label in m.sources)]
        if not wanted:
            return
        d = self._d
        where, params = d.any_of("u.id", wanted)
        seeded = "EXISTS (SELECT 1 FROM sources s WHERE s.kind = 'seed' AND (s.id = u.source_id OR s.id IN" \
                 " (SELECT us.source_id FROM url_sources us WHERE us.url_id = u.id)))"
        rows = conn.exec_driver_sql(
            f"SELECT u.id FROM urls u WHERE {where} AND u.kind = 'listing' AND NOT {seeded}", tuple(params),
        ).all()
        if not rows:
            return
        due = d.ts(now)
        where, params = d.any_of("id", [int(url_id) for url_id, in rows])
        # The row as the UPDATE finds it (a listing crawl's completion may have finished it meanwhile): RETURNING
        # says what it is now, and a queued one without a queue entry (it was DONE) gets one.
        moved = conn.exec_driver_sql(
            "UPDATE urls SET kind = 'detail', content_hash = NULL, etag = NULL, last_modified = NULL,"
            f" next_fetch_at = {d.p}, state = CASE WHEN state = 'done' THEN 'queued' ELSE state END"
            f" WHERE {where} AND kind = 'listing' RETURNING id, host_id, state", (due, *params),
        ).all()
        queued = [(int(url_id), int(host_id)) for url_id, host_id, state in moved if state == "queued"]
        if queued:
            conn.exec_driver_sql(f"UPDATE queue SET kind = 'detail', due_at = {d.p} WHERE host_id = {d.p}"
                                 f" AND url_id = {d.p}", [(due, host_id, url_id) for url_id, host_id in queued])
            where, params = d.any_of("u.id", [url_id for url_id, _ in queued])
            # Not one the listing crawl holds (its completion queues it again, ``Outcomes._read_as``): queued while
            # leased, a claim of details took it and failed whole on ``pk_leases`` (test_queued_while_leased.py).
            conn.exec_driver_sql(
                "INSERT INTO queue (host_id, kind, rank, url_id, due_at)"
                f" SELECT u.host_id, u.kind, -u.score, u.id, u.next_fetch_at FROM urls u WHERE {where}"
                " AND NOT EXISTS (SELECT 1 FROM queue q WHERE q.host_id = u.host_id AND q.url_id = u.id)"
                " AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.url_id = u.id)",
                tuple(params),
            )
        logger.info("%d listing pages that a feed or sitemap names as details are details now", len(moved))

    def _announce(self, conn: Connection, announced: list[tuple[int, int, str, float]]) -> None:
        """Queued revisits (url id, host id, kind, score) that a newer lastmod announces now move ahead of everything
        (``dialects.REVISIT_RANK_OFFSET``), as they would have had the lastmod been read before they were queued.
        A claim promotes every due URL of its host, a listing claim beside the sitemap walk too (the seed's), so a
        page due for its routine re-check was queued behind every URL never fetched before its sitemap announced
        its change; within a page budget the change waited for the next day (test_budget, 1 run in 3). Each entry is
        found by its whole key (its rank as a routine revisit, or as queued again by a failure): one index probe."""
        if announced:
            moves = [(-score - REVISIT_RANK_OFFSET, host_id, kind, -score + REVISIT_RANK_OFFSET, -score, url_id)
                     for url_id, host_id, kind, score in announced]
            p = self._d.p
            conn.exec_driver_sql(f"UPDATE queue SET rank = {p} WHERE host_id = {p} AND kind = {p}"
                                 f" AND rank IN ({p}, {p}) AND url_id = {p}", moves)

    def _revive(self, conn: Connection, revive: list[tuple[int, datetime]]) -> None:
        """Gone URLs named again (``_known_rows``) go back to the queue, due when ``revive`` says (now, or their
        recheck time): the run that reaches it asks them, and a 200 stores their new version (docs/operations.md
        §4b). Until then they stay out of ``export --latest`` (their last answer was a 404/410). Failed URLs and
        duplicates a newer lastmod announces are queued due now the same way."""
        if not revive:
            return
        d = self._d
        # Only the URLs still gone, failed or duplicate now (locked to the commit on PostgreSQL) move and enter the
        # queue. ``_known_rows`` read their state before the upsert, and on PostgreSQL another transaction may have
        # moved one since: the extraction beside this discovery queued a failed page for its recheck
        # (``requeue_rechecks``) and leased it. Queued by "is QUEUED now", it got a second entry (another rank)
        # while leased, and the next claim of its host failed whole on ``pk_leases`` (test_queued_while_leased.py).
        where, params = d.any_of("id", [url_id for url_id, _ in revive])
        lock = "" if d.is_sqlite else " FOR UPDATE"
        moving = {int(i) for i in conn.exec_driver_sql(
            f"SELECT id FROM urls WHERE {where} AND state IN ('gone', 'failed', 'duplicate'){lock}", tuple(params),
        ).scalars()}
        if not moving:
            return
        conn.exec_driver_sql(f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p} WHERE id = {d.p}"
                             " AND state IN ('gone', 'failed', 'duplicate')",
                             [(d.ts(due), url_id) for url_id, due in revive if url_id in moving])
        where, params = d.any_of("id", sorted(moving))
        conn.exec_driver_sql(
            "INSERT INTO queue (host_id, kind, rank, url_id, due_at)"
            f" SELECT host_id, kind, -score, id, next_fetch_at FROM urls WHERE {where} AND state = 'queued'"
            " ON CONFLICT DO NOTHING", tuple(params),
        )

    def _known_rows(
        self, conn: Connection, hids: list[int], chunk: list[Merged], max_id: int | None, now: datetime,
        reads: PreviousReads,
    ) -> tuple[dict[tuple[int, str], _Known], int, list[tuple[int, datetime]], list[tuple[int, int, str, float]],
               list[int]]:
        """{(host_id, path): (id, source_id, state, score, kind)} of the chunk's URLs already stored (ids <=
        ``max_id`` if given), how many of them are made due now (counted ``urls_made_due``), and (id, due) of the
        GONE ones among them to queue again (``_revive``), (id, host id, kind, score) of the QUEUED revisits it
        announces (``_announce``), and the ids of DONE URLs a reduced-precision lastmod makes due that the upsert
        does not (``_due_in_period``).

        A DONE URL is made due by a newer lastmod than both the stored one and the last fetch (the rule of
        dialects._UPSERT_SET). A GONE URL named again is queued: due now when a lastmod newer than the time it was
        found gone announces it (the page is back) or its recheck time has passed, else due at that time
        (``next_fetch_at``, doubling each time it is found still gone: ``rules.revisit.gone_recheck_s``). Before
        its recheck time only a list (a sitemap, feed, listing page, seed) queues it, never a link on a page: a
        page found gone stays gone though the pages fetched with it still link to it. So a stale list naming a
        dead URL costs a request at a growing interval, not one a day. A list naming it *again* (its previous full
        read did not name it, ``PreviousReads.relisted``: a deleted page put back) makes it due now: the site
        published it anew, and waiting for the recheck kept a restored page out of the snapshot a day or more
        (docs/operations.md §4b). A FAILED or DUPLICATE URL is queued due now
        by a lastmod newer than its stored one: the site touched the page since (mended it, or made it differ from
        the page it copied), whatever its own recheck time (``FrontierStore.requeue_rechecks``)."""
        d = self._d
        paths_by_host: dict[int, list[str]] = {}
        for host_id, m in zip(hids, chunk, strict=True):
            paths_by_host.setdefault(host_id, []).append(m.path)
        lastmods = {(h, m.path): m.lastmod for h, m in zip(hids, chunk, strict=True) if m.lastmod is not None}
        # A reduced-precision lastmod ("2026-12") names a period: it may announce a change after our last fetch
        # while its period's end is later than that fetch. Compared by its start, a page edited on 9 December and
        # dated "2026-12" in place of "2026-11-30" was older than our fetch of the 8th, and never asked.
        untils = {(h, m.path): m.lastmod_until for h, m in zip(hids, chunk, strict=True)
                  if m.lastmod is not None and m.lastmod_until is not None}
        period_due: list[int] = []
        listed = {(h, m.path): m.sources for h, m in zip(hids, chunk, strict=True)
                  if any(label.partition(":")[0] in _LISTS for label in m.sources)}
        known: dict[tuple[int, str], _Known] = {}
        made_due = 0
        revive: list[tuple[int, datetime]] = []
        announced: list[tuple[int, int, str, float]] = []
        for host_id, path, url_id, source_id, state, old_lastmod, fetched_at, score, kind, gone_at, due, seen in (
            self._lookup(conn, paths_by_host, "id, source_id, state, lastmod, last_fetched_at, score, kind, gone_at,"
                                              " next_fetch_at, last_seen")
        ):
            if max_id is not None and url_id > max_id:
                continue
            known[(host_id, path)] = (url_id, source_id, state, score, kind)
            new_lastmod = lastmods.get((host_id, path))
            # the latest moment the lastmod may mean
            until = untils.get((host_id, path), new_lastmod) if new_lastmod is not None else None
            if state == "gone":
                went, recheck = d.dt(gone_at), d.dt(due)
                if recheck is None and went is not None:  # found gone before rechecks were scheduled
                    recheck = went + timedelta(seconds=self.settings.revisit.default_s)
                # Dated back: a lastmod newer than the time it was found gone. A reduced-precision one ("2026-12")
                # counts by its period's end only when it differs from the one stored, or a stale sitemap dating a
                # dead URL with its month would make it due on every run of that month.
                stored_lastmod = d.dt(old_lastmod)
                dated_back = new_lastmod is not None and went is not None and (new_lastmod > went or (
                    until is not None and until > went and (stored_lastmod is None or new_lastmod > stored_lastmod)))
                if dated_back or ((recheck is None or recheck > now) and (host_id, path) in listed and reads.relisted(
                        [label for label in listed[(host_id, path)] if label.partition(":")[0] in _RELISTS],
                        d.dt(seen))):
                    recheck = now
                if recheck is not None and (recheck <= now or (host_id, path) in listed):
                    revive.append((url_id, recheck))
                    made_due += recheck <= now
                continue
            if state in ("failed", "duplicate") and new_lastmod is not None:
                old, last_fetch = d.dt(old_lastmod), d.dt(fetched_at)
                # The site touched it since it was last asked: asked now, whatever its recheck (a sitemap stamping
                # every URL with the same date every day names no news past the last fetch, as for a DONE URL).
                if (old is None or new_lastmod > old) and (last_fetch is None or _after(until, last_fetch)):
                    revive.append((url_id, now))
                    made_due += 1
                continue
            if state == "done" and new_lastmod is not None:
                old, last_fetch = d.dt(old_lastmod), d.dt(fetched_at)
                if (old is None or new_lastmod > old) and (last_fetch is None or _after(until, last_fetch)):
                    made_due += 1
                    if last_fetch is not None and new_lastmod <= last_fetch:  # the upsert's rule compares the start
                        period_due.append(url_id)
            elif state == "queued" and new_lastmod is not None and fetched_at is not None:
                old, last_fetch = d.dt(old_lastmod), d.dt(fetched_at)
                if (old is None or new_lastmod > old) and last_fetch is not None and _after(until, last_fetch):
                    announced.append((url_id, host_id, str(kind), float(score)))
        return known, made_due, revive, announced, period_due

    def _due_in_period(self, conn: Connection, ids: list[int], now: datetime) -> None:
        """DONE URLs whose reduced-precision lastmod announces a change that may be later than our last fetch
        (``_known_rows``: its period ends after it) but whose start does not (``dialects._UPSERT_SET`` compares the
        stored value, the start): due now, as the upsert makes those whose start is later, and queued at once with
        an announced change's rank (``REVISIT_RANK_OFFSET``). Left for a claim to promote, they were ranked by their
        start (not after the fetch) as routine re-checks, behind every URL never fetched, unless due before half
        their interval: a page on a 2-day interval, announced so 24 h 05 min after its fetch, waited behind them."""
        if not ids:
            return
        d = self._d
        where, params = d.any_of("id", ids)
        queued = conn.exec_driver_sql(
            f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p} WHERE {where} AND state = 'done'"
            f" RETURNING host_id, kind, -score - {REVISIT_RANK_OFFSET}, id, next_fetch_at", (d.ts(now), *params),
        ).all()
        if queued:
            conn.exec_driver_sql(d.enqueue_sql, [tuple(row) for row in queued])

    def _lookup(self, conn: Connection, paths_by_host: dict[int, list[str]], columns: str) -> list[Any]:
        return lookup_paths(conn, self._d, self._chunk, paths_by_host, columns)


def _after(until: datetime | None, moment: datetime) -> bool:
    """Whether a lastmod's period (its end, ``until``) reaches past ``moment``."""
    return until is not None and until > moment
