"""Outcomes of fetches: one transaction writes the URLs' states, pages, fetch log and outlinks, or nothing."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, select, update

from harvester.errors import InvalidRecord, LeaseLost
from harvester.frontier.base import Database, Part
from harvester.frontier.dialects import REVISIT_RANK_OFFSET
from harvester.frontier.discovered import Discovered
from harvester.frontier.documents import Documents
from harvester.frontier.hosts import Reasked, write_reasks
from harvester.frontier.models import (
    HOOK_FAILED_ROWS,
    RECHECK_ROWS,
    Host,
    Page,
    Url,
)
from harvester.frontier.rows import (
    UrlOutcome,
    check_completion,
    fold,
    merge,
    outcome,
    page_row,
    url_outcome,
    version_change,
)
from harvester.frontier.versions import INSERT_PAGES, READ_AGAIN, latest_versions, read_again, store_bodies
from harvester.records import ChangeKind, Completion, DiscoveredUrl, ErrorClass, PageRecord, UrlKind, UrlState, Vanished
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.runtime import aware, count_answered, utcnow
from harvester.store_results import AddResult, CompleteResult

logger = logging.getLogger(__name__)

GONE_STATUSES = (404, 410)

_URL_UPDATE = (
    "UPDATE urls SET state = ?, last_status = ?, etag = ?, last_modified = ?, content_hash = ?,"
    " next_fetch_at = ?, revisit_s = ?, attempts = ?, last_error_class = ?, last_error = ?,"
    " changed_at = COALESCE(?, changed_at), gone_at = ?, final_url = ?, duplicate_of = ?,"
    " last_fetched_at = COALESCE(?, last_fetched_at) WHERE id = ?"
)
"""One completion's URL columns (rows.UrlOutcome); run with executemany for a batch of completions."""

_FETCH_INSERT = (
    "INSERT INTO fetches (url_id, run_id, fetched_at, status, outcome, bytes, error_class, page_id, change,"
    " conditional, if_none_match, if_modified_since, etag, last_modified, validators_logged)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A completion's line in the fetch log, its values bound as the driver takes them (``Dialect.ts``, as
``models.UtcDateTime`` would): through ``insert(Fetch)`` SQLAlchemy ran every row's dict through its type processors,
a fifth of ``_write_outcomes``' CPU (issue 32)."""

_NEWS = (
    "CASE WHEN (urls.lastmod > ? AND urls.lastmod > COALESCE(?, urls.last_fetched_at))"
    " OR (urls.lastmod IS NULL AND ? = 1) THEN ? ELSE ? END"
)
"""``next_fetch_at`` of a DONE completion built from a claim: due at once (the value after THEN) when the URL's
lastmod grew since the claim (past the lastmod it was claimed with) and is newer than our copy (the fetch this
completion records, else the last one), or when a completion that sent no request (a skip on the lastmod) finds the
lastmod it was decided on withdrawn (the URL vanished from the sitemap that dated it: ``recheck_vanished``); else its
next revisit. Discovery acts on such news only for a DONE URL (``dialects._UPSERT_SET``, ``recheck_vanished``);
while extraction held it, the news changed nothing but the lastmod, and without this the completion, decided on
what the claim read (a skip, a 304, an unchanged 200), would push the news back to the URL's next revisit. Read in
the UPDATE itself, not before it: on PostgreSQL the UPDATE waits for a concurrent upsert of the row and sees its
lastmod, and an upsert after it sees the URL DONE."""
_URL_UPDATE_NEWS = _URL_UPDATE.replace(" next_fetch_at = ?,", f" next_fetch_at = {_NEWS},")
_NEWS_FLOOR = datetime(1970, 1, 1, tzinfo=UTC)
"""Stands for "no lastmod at claim" in ``_NEWS``: any lastmod stored since is news."""


class _Held(NamedTuple):
    """What a completion's outcome depends on, read with its lease."""

    attempts: int
    etag: str | None
    last_modified: str | None
    content_hash: str | None
    host_id: int
    kind: str
    score: float
    last_status: int | None
    last_error_class: str | None
    last_error: str | None
    duplicate_of: int | None
    holder_hash: str | None
    """The content hash of the URL ``duplicate_of`` names, while it holds a content (not gone, failed, moved)."""


def _update_params(o: UrlOutcome, url_id: int, ts: Callable[[datetime | None], Any]) -> tuple[Any, ...]:
    """``_URL_UPDATE``'s parameters, in its order."""
    return (
        o.state, o.status, o.etag, o.last_modified, o.content_hash, ts(o.next_fetch_at), o.revisit_s, o.attempts,
        o.error_class, o.error, ts(o.changed_at), ts(o.gone_at), o.final_url, o.duplicate_of, ts(o.last_fetched_at),
        url_id,
    )


def _still_a_copy(c: Completion, links: Sequence[DiscoveredUrl],
                  h: _Held) -> tuple[Completion, Sequence[DiscoveredUrl]]:
    """A duplicate asked again whose answer is still its holder's content stays that holder's duplicate, stores no
    page and expands no links, though the holder was due when the answer was read (extraction's duplicate test,
    ``phases.completions``, only trusts a holder not due). Else on a site without validators a copy and its holder
    swapped roles at every revisit, a page version stored at each swap."""
    if (h.duplicate_of is None or h.holder_hash is None or c.state != UrlState.DONE or c.page is None
            or c.content_hash != h.holder_hash):
        return c, links
    return replace(c, state=UrlState.DUPLICATE, duplicate_of=h.duplicate_of, page=None), ()


def _confirms(c: Completion, held: Mapping[int, _Held]) -> bool:
    """Whether ``c`` is a 304 that confirmed the URL's own stored version: an answer to a conditional request, of a
    URL that keeps a content of its own (not a duplicate, whose 304 confirms its holder's). Its fetch-log line names
    that version and the validators the 304 left the URL with (``_write_outcomes``)."""
    h = held[c.url_id]
    return (c.status == 304 and c.state == UrlState.DONE and bool(c.sent_validators) and not c.forget_validators
            and h.duplicate_of is None and h.content_hash is not None)


def _read_as(c: Completion, h: _Held, read_as: UrlKind | None) -> Completion:
    """``c``, or, when its URL became another kind than the one it was read as while it was read (a feed named a
    listing page a detail: ``Discovered._promote``), a completion that keeps nothing of the answer and queues the
    URL again, due now, to be read as what it is now. The request stays in the fetch log."""
    if read_as is None or h.kind == read_as.value or c.state != UrlState.DONE:
        return c
    return replace(c, state=UrlState.QUEUED, page=None, content_hash=None, changed=False, forget_validators=True,
                   next_fetch_at=c.fetched_at, claimed=False, claimed_lastmod=None)


def _check_batch(items: Sequence[tuple[Completion, Sequence[DiscoveredUrl]]]) -> None:
    """Every completion valid and each URL once: a bad batch raises ``InvalidRecord`` before anything is written."""
    seen: set[int] = set()
    for completion, _ in items:
        check_completion(completion)
        if completion.url_id in seen:
            raise InvalidRecord(f"URL id {completion.url_id} appears twice in one complete_many batch")
        seen.add(completion.url_id)


class Outcomes(Part):
    """Completions, and the content-duplicate bookkeeping that goes with them. A completion's outlinks go in
    through ``discovered`` and the feeds and lists it names through ``documents``, in the completion's transaction."""

    def __init__(self, db: Database, discovered: Discovered, documents: Documents) -> None:
        super().__init__(db)
        self._discovered = discovered
        self._documents = documents

    def complete(
        self, owner: str, completion: Completion, outlinks: Sequence[DiscoveredUrl] = (), *, run_id: int | None = None
    ) -> None:
        """Record one outcome with its outlinks atomically; ``LeaseLost`` (nothing written) if the lease is gone."""
        result = self.complete_many(owner, [(completion, outlinks)], run_id=run_id)
        if result.lost:
            raise LeaseLost(f"URL id {completion.url_id} is no longer leased by {owner!r}; nothing was written")

    def complete_many(
        self, owner: str, items: Sequence[tuple[Completion, Sequence[DiscoveredUrl]]], *, run_id: int | None = None,
        demote: Sequence[tuple[int, int]] = (), vanished: Mapping[int, Vanished] | None = None,
        feeds: Sequence[str] = (), read_as: UrlKind | None = None,
        reasks: Mapping[str, Reasked] | None = None,
    ) -> CompleteResult:
        """Record outcomes, pages, fetches and outlinks in ONE transaction (all or nothing).

        ``vanished`` (url id → what that listing page may have stopped naming) re-checks, for each completion
        written, the URLs it no longer names (see ``Documents.recheck_vanished``). ``feeds`` found on these pages are
        recorded as discovery documents not yet read, so a kill right after this commit cannot lose them: the
        next discovery of their host reads every such document.

        ``demote`` holds (url id, new holder id) pairs: URLs that held a content which a URL of this batch now
        holds (the one the site names as canonical). Each becomes the new holder's duplicate in the same
        transaction, and so do its own duplicates, but only where the new holder's completion is written and the
        URL is still DONE (``demoted`` counts them).

        ``reasks``: per host, the contradicting 304s these completions ask again (re-asks and probes decided, when the
        last was) and the full answers to earlier ones that found a change (``phases.reasks``): the host's record
        moves with the completions that carry its decisions, or not at all. Written apart, a kill -9 between the two
        counted a re-ask whose 304 was never recorded (its page asked with validators again, and believed).

        ``read_as``: the kind the pages were read as (the listing crawl's LISTING); a URL that became another kind
        while it was read (``Discovered._promote``) stores nothing of this answer and is queued again, due now.

        Completions whose URL is no longer LEASED by ``owner`` are skipped and counted in ``lost``. A FAILED
        completion goes back to QUEUED (due at ``completion.next_fetch_at``) while attempts stay below
        ``settings.politeness.max_attempts``, then stays FAILED until its recheck time (a later run asks it
        again, ``requeue_rechecks``); any other outcome resets attempts. A URL whose content is gone or changed
        makes its duplicates due now (``_release_duplicates``). Validators and content_hash are replaced on a
        2xx response, updated by a 304 with those it carries (RFC 9111 §4.3.4: the others kept), and kept otherwise (an
        error says nothing new about them).
        """
        if not items:
            return CompleteResult(0, 0, 0, AddResult(0, 0, 0))
        _check_batch(items)
        outlink_batches = {c.url_id: merge(links) for c, links in items}
        with self._tx() as tx:
            conn = tx.conn
            held = self._take_leases(conn, owner, [c.url_id for c, _ in items], urls_too=read_as is not None)
            mine = [_still_a_copy(_read_as(c, held[c.url_id], read_as), links, held[c.url_id])
                    for c, links in items if c.url_id in held]
            lost_ids = tuple(c.url_id for c, _ in items if c.url_id not in held)
            page_ids, changes, stored, unrepaired = self._store_versions(conn, [c for c, _ in mine], held)
            self._write_outcomes(conn, [c for c, _ in mine], held, page_ids, changes, run_id, unrepaired)
            links = [m for c, _ in mine for m in outlink_batches[c.url_id]]
            added = AddResult(0, 0, 0)
            if links:
                now = max(c.fetched_at for c, _ in mine)
                # A listing page's previous full read, for what it names again (``relisted.PreviousReads``).
                reads = {label: gone_from.named_since for url_id, gone_from in (vanished or {}).items()
                         if url_id in held for label in gone_from.labels}
                added = self._discovered.upsert(tx, fold(links), aware(now) or utcnow(), reads)
            demoted = self._demote(conn, [(old, new) for old, new in demote if new in held], run_id)
            for url_id, gone_from in (vanished or {}).items():
                if url_id in held:
                    self._documents.recheck_vanished(conn, gone_from)
            if feeds and mine:
                self._documents.note_documents(conn, feeds, kind="feed")
            write_reasks(conn, reasks or {})
        count_answered(outcome(c) for c, _ in mine)  # committed: the progress line counts them (no table scan)
        if lost_ids:
            logger.warning("%d completions skipped: lease lost by %s", len(lost_ids), owner)
        return CompleteResult(len(mine), len(lost_ids), stored, added, lost_ids, demoted)

    def _take_leases(self, conn: Connection, owner: str, ids: list[int], *, urls_too: bool = False) -> dict[int, _Held]:
        """The leases ``owner`` still holds among ``ids``, with what the outcome rules need of each URL; those
        leases are deleted (the completions below are written in the same transaction, or nothing is).
        ``urls_too`` locks the URLs' rows as well (PostgreSQL), so that their kind is read as a concurrent
        ``Discovered._promote`` left it: read before its commit, the listing crawl's completion wrote a listing
        version over a URL just made a detail."""
        d = self._d
        lock = d.lock_rows + (", u" if urls_too and d.lock_rows else "")
        where, params = d.any_of("l.url_id", ids)
        held = {
            row[0]: _Held(*row[1:])
            for row in conn.exec_driver_sql(
                "SELECT l.url_id, u.attempts, u.etag, u.last_modified, u.content_hash, u.host_id, u.kind, u.score,"
                " u.last_status, u.last_error_class, u.last_error, u.duplicate_of,"
                " CASE WHEN hu.state IN ('done', 'queued') AND COALESCE(hu.last_status, 200) NOT IN"
                f" ({', '.join(str(status) for status in (*GONE_STATUSES, *PERMANENT_REDIRECTS))})"
                " THEN hu.content_hash END"
                " FROM leases l JOIN urls u ON u.id = l.url_id LEFT JOIN urls hu ON hu.id = u.duplicate_of"
                f" WHERE {where} AND l.owner = {d.p}{lock}",
                (*params, owner),
            )
        }
        if held:
            where_held, held_params = d.any_of("url_id", list(held))
            conn.exec_driver_sql(f"DELETE FROM leases WHERE {where_held}", tuple(held_params))
        return held

    def _store_versions(
        self, conn: Connection, completions: Sequence[Completion], held: Mapping[int, _Held]
    ) -> tuple[dict[int, int], dict[int, ChangeKind], int, set[int]]:
        """Each 2xx payload against its URL's latest stored version: a new payload (by digest) is a new version
        (``pages`` row, its bytes in ``bodies`` once per digest), a repeated one points at the stored version;
        404/410 are ``gone`` after a stored version and ``missing`` without one, and nothing when the URL's last
        answer was a 404/410 already (a gone URL re-checked and still gone changed nothing). A repeated payload whose
        stored version lacks its hook's fields (``hook_error``) gets them from this answer when the hook succeeded
        on it: a fixed hook repairs the version in place. A run without a hook (``Completion.hooked``) repairs
        nothing: the version keeps its ``hook_error``. Returns url id -> page id the answer served, url id -> its
        ``ChangeKind``, how many versions were added, and the URLs whose version stays unrepaired so."""
        answered = [c for c in completions if c.page is not None or c.state == UrlState.GONE or _confirms(c, held)]
        if not answered:
            return {}, {}, 0, set()
        latest = latest_versions(conn, self._d, [c.url_id for c in answered])
        page_ids: dict[int, int] = {}
        changes: dict[int, ChangeKind] = {}
        fresh: list[tuple[Completion, PageRecord, str, ChangeKind]] = []
        unrepaired: set[int] = set()
        relabelled: list[dict[str, Any]] = []
        for c in answered:
            # A URL holding no content hash keeps no version of its own kind: what is stored was read while it was
            # a listing page, before a feed or sitemap named it a detail (``Discovered._promote``). Its first
            # answer as a detail is its first version (new, with its title and metadata), the same bytes or not.
            before = latest.get(c.url_id) if held[c.url_id].content_hash is not None else None
            if c.status == 304:  # ``_confirms``: the version the 304 confirmed, whose validators it may renew
                if before is not None:
                    page_ids[c.url_id] = before[0]
                continue
            if c.page is None:
                if held[c.url_id].last_status not in GONE_STATUSES:
                    changes[c.url_id] = ChangeKind.GONE if before is not None else ChangeKind.MISSING
                continue
            digest = hashlib.sha256(c.page.body).hexdigest()
            change = version_change(before, digest, c.page)
            changes[c.url_id] = change
            if change is ChangeKind.SAME and before is not None:
                page_ids[c.url_id] = before.page_id
                # Not from an extraction that failed on the page (``extract_page`` kept it as its bytes' hash).
                if before.encoding is None and c.page.encoding is not None and c.page.content_hash != digest:
                    relabelled.append(read_again(before.page_id, c.page))
                if before.hook_failed and not c.hooked:
                    unrepaired.add(c.url_id)
                elif before.hook_failed and c.page.hook_error is None:
                    conn.execute(update(Page).where(Page.id == before.page_id)
                                 .values(fields=dict(c.page.fields), hook_error=None))
            else:
                fresh.append((c, c.page, digest, change))
        if relabelled:
            # A version stored before 0024 was read by the decoders of its day (EUC-KR as strict euc_kr, a commented-out
            # <meta> obeyed): the same bytes read now are kept as what they say, in place, once (no new version, no
            # change counted: the site changed nothing), and its encoding recorded for the comparisons to come.
            conn.execute(READ_AGAIN, relabelled)
        if fresh:
            body_ids = store_bodies(conn, self._d, {digest: page.body for _, page, digest, _ in fresh},
                                    level=self.settings.store.compress_level)
            inserted = conn.execute(INSERT_PAGES, [
                page_row(c.url_id, c.fetched_at, page, body_ids[digest], change.value)
                for c, page, digest, change in fresh
            ]).all()
            page_ids.update({c.url_id: row[0] for (c, _, _, _), row in zip(fresh, inserted, strict=True)})
        return page_ids, changes, len(fresh), unrepaired

    def _write_outcomes(self, conn: Connection, completions: Sequence[Completion], held: dict[int, _Held],
                        page_ids: dict[int, int], changes: Mapping[int, ChangeKind], run_id: int | None,
                        unrepaired: Set[int] = frozenset()) -> None:
        """Each URL's new state (``rows.url_outcome``), its line in the fetch log, and retries back in the queue.
        An ``unrepaired`` URL (``_store_versions``) keeps its mark of the hook's failure and no validators, so the
        next run with the hook asks it in full and repairs it; its fetch-log line is this run's, which ran no hook."""
        d = self._d
        max_attempts = self.settings.politeness.max_attempts
        updates, watched, fetch_rows, retries = [], [], [], []
        moment = utcnow()
        now = d.ts(moment)
        lost_content: list[int] = []
        for c in completions:
            h = held[c.url_id]
            o = url_outcome(c, h.attempts, h.etag, h.last_modified, h.content_hash, max_attempts,
                            self.settings.revisit)
            if (h.duplicate_of is not None and o.state == UrlState.DONE.value and c.status == 304
                    and h.holder_hash is None and c.sent_validators):
                # A copy answered "unchanged" whose holder keeps the content no more (robots.txt refuses it now, it is
                # gone or moved): the copy has no page of its own, so it is asked again now, in full, and holds the
                # content itself (as a 200 would have).
                o = replace(o, state=UrlState.QUEUED.value, next_fetch_at=moment, etag=None, last_modified=None,
                            duplicate_of=h.duplicate_of)
            elif h.duplicate_of is not None and o.state == UrlState.DONE.value and c.status == 304:
                # A copy asked at its revisit answered "unchanged": still the copy of the page its holder keeps.
                o = replace(o, state=UrlState.DUPLICATE.value, duplicate_of=h.duplicate_of)
            elif h.duplicate_of is not None and o.state in (UrlState.QUEUED.value, UrlState.FAILED.value):
                # A copy whose request failed: still its holder's copy, asked next in full, so that no 304 can
                # make it DONE without a stored page (its answer is compared with the holder's: ``_still_a_copy``).
                o = replace(o, duplicate_of=h.duplicate_of, etag=None, last_modified=None)
            if h.content_hash is not None and (
                o.state not in (UrlState.DONE.value, UrlState.QUEUED.value) or o.content_hash != h.content_hash
                or o.status in PERMANENT_REDIRECTS
            ):
                lost_content.append(c.url_id)
            if c.url_id in unrepaired:
                kept = h.last_error if h.last_error_class == ErrorClass.HOOK_FAILED.value else None
                o = replace(o, etag=None, last_modified=None, error_class=ErrorClass.HOOK_FAILED.value,
                            error=kept or "the extractor hook failed on this version; no hook ran since")
            if o.state == "queued":  # a retry: back in the queue, due after its back-off
                retries.append((h.host_id, h.kind, -h.score, c.url_id, d.ts(o.next_fetch_at)))
            params = _update_params(o, c.url_id, d.ts)
            if c.claimed and o.state == UrlState.DONE.value:  # ``_NEWS`` in place of next_fetch_at (its 6th value)
                withdrawn = int(c.claimed_lastmod is not None and o.last_fetched_at is None)
                news = (d.ts(aware(c.claimed_lastmod) or _NEWS_FLOOR), d.ts(o.last_fetched_at), withdrawn, now,
                        params[5])
                watched.append((*params[:5], *news, *params[6:]))
            else:
                updates.append(params)
            change = changes.get(c.url_id)
            how = outcome(c)
            # What the request carried, on the row written anyway (WARC request records); none when none left.
            asked = c.sent_validators if how != "unsent" else None
            # What the answer that served a version carried: a 200 repeating it may bring new validators, which
            # its WARC record and the export's ``etag`` / ``last_modified`` must say (the page keeps the first).
            # A 304 that confirmed it updates the stored response with those it carries and keeps the others
            # (RFC 9111 §4.3.4): the URL's validators now, the ones its next request sends.
            served = None if page_ids.get(c.url_id) is None else (
                (c.page.etag, c.page.last_modified) if c.page is not None else (o.etag, o.last_modified))
            fetch_rows.append((
                c.url_id, run_id, d.ts(aware(c.fetched_at)), c.status, how, c.bytes_read,
                c.error_class.value if c.error_class else None, page_ids.get(c.url_id),
                change.value if change is not None else None, bool(asked) if asked is not None else None,
                asked.etag if asked is not None else None, asked.last_modified if asked is not None else None,
                *(served or (None, None)),
                True,
            ))
        if updates:
            conn.exec_driver_sql(_URL_UPDATE.replace("?", d.p), updates)
        if watched:
            conn.exec_driver_sql(_URL_UPDATE_NEWS.replace("?", d.p), watched)
        if fetch_rows:
            conn.exec_driver_sql(_FETCH_INSERT.replace("?", d.p), fetch_rows)
        if retries:
            conn.exec_driver_sql(d.enqueue_sql, retries)
        self._release_duplicates(conn, lost_content, moment)

    def due_hook_retries(self, origins: Sequence[str], *, before: datetime, now: datetime | None = None) -> list[int]:
        """Detail URLs of ``origins`` the extractor hook failed on, last fetched before ``before`` (the run's start),
        become due now; returns their ids. Their page is stored without its fields and their URL keeps no
        validators, so the run asks them in full and runs the (fixed) hook on them, whatever their revisit
        interval: fixing the hook and running again repairs them. Each once per run, however many workers ask."""
        if not origins:
            return []
        now = aware(now) or utcnow()
        with self._tx() as tx:
            host_ids = select(Host.id).where(Host.origin.in_(list(origins))).scalar_subquery()
            ids = [int(i) for i in tx.conn.execute(
                select(Url.id).where(
                    Url.host_id.in_(host_ids), Url.kind == UrlKind.DETAIL.value, Url.state == UrlState.DONE.value,
                    HOOK_FAILED_ROWS, Url.last_fetched_at < aware(before))
            ).scalars()]
            for start in range(0, len(ids), 500):
                tx.conn.execute(update(Url).where(Url.id.in_(ids[start:start + 500])).values(next_fetch_at=now))
        return ids

    def requeue_rechecks(self, origins: Sequence[str], *, now: datetime | None = None) -> int:
        """FAILED and DUPLICATE URLs of ``origins`` whose time has come (``next_fetch_at``) go back to the queue;
        returns how many. A URL that failed every attempt of a run is asked again at a later run (its recheck time,
        ``rules.revisit.failed_recheck_s``), a duplicate at its revisit time: neither is final, as the site
        mends a broken page, and a copy of another page may change apart from it or outlive it. Run when an
        extraction begins, as finished URLs' revisits are promoted when their hosts are claimed."""
        if not origins:
            return 0
        now = aware(now) or utcnow()
        d = self._d
        with self._tx() as tx:
            where, params = d.any_of("h.origin", list(origins))
            ids = [int(i) for i in tx.conn.exec_driver_sql(  # the partial index's WHERE as it is written there
                f"SELECT u.id FROM urls u JOIN hosts h ON h.id = u.host_id WHERE {where} AND u.{RECHECK_ROWS}"
                f" AND u.next_fetch_at <= {d.p}", (*params, d.ts(now)),
            ).scalars()]
            return self._enqueue(tx.conn, ids, now, rank=f"{REVISIT_RANK_OFFSET} - score")

    def _release_duplicates(self, conn: Connection, holders: Sequence[int], now: datetime) -> int:
        """The duplicates of ``holders`` (URLs whose content is gone or changed) are due now: each may be the
        site's surviving copy of the page, so the run asks it (in full: ``_enqueue``'s ``in_full``) and it
        holds the content itself when no other URL does (``duplicates_of``)."""
        if not holders:
            return 0
        ids: list[int] = []
        for start in range(0, len(holders), 500):
            ids += [int(i) for i in conn.execute(
                select(Url.id).where(Url.duplicate_of.in_(list(holders[start:start + 500])),
                                     Url.state == UrlState.DUPLICATE.value)
            ).scalars()]
        return self._enqueue(conn, ids, now, in_full=True)

    def _enqueue(self, conn: Connection, ids: Sequence[int], now: datetime, *, in_full: bool = False,
                 rank: str = "-score") -> int:
        """FAILED or DUPLICATE URLs among ``ids`` become QUEUED, due ``now``, and enter the queue by score (ahead of
        plain revisits: each has a reason to be asked that a revisit has not). One another process moved meanwhile
        is left as it is. Returns how many. ``in_full`` drops their validators: a duplicate whose holder's content
        went away has no stored page of its own, so a 304 would leave the snapshot without the page."""
        d = self._d
        moved = 0
        forget = ", etag = NULL, last_modified = NULL" if in_full else ""
        for start in range(0, len(ids), 500):
            where, params = d.any_of("id", list(ids[start:start + 500]))
            rows = conn.exec_driver_sql(
                f"UPDATE urls SET state = 'queued', next_fetch_at = {d.p}{forget} WHERE {where}"
                f" AND state IN ('failed', 'duplicate') RETURNING host_id, kind, {rank}, id, next_fetch_at",
                (d.ts(now), *params),
            ).all()
            if rows:
                conn.exec_driver_sql(d.enqueue_sql, [tuple(row) for row in rows])
            moved += len(rows)
        return moved

    def _demote(self, conn: Connection, pairs: Sequence[tuple[int, int]], run_id: int | None) -> int:
        """(url id, new holder id): a DONE URL becomes the new holder's duplicate, and the URLs that were its
        duplicates follow it, so ``duplicate_of`` always names a URL that holds the content. A version it stored in
        this cycle (``run_id``'s) is no news of the cycle any more: its fetch loses its label (new, changed), as a
        page found a duplicate when read has none, so the cycle's counts name the content once, under its holder."""
        demoted = 0
        d = self._d
        for url_id, holder in pairs:
            if url_id == holder:
                continue
            changed = conn.execute(
                update(Url).where(Url.id == url_id, Url.state == UrlState.DONE.value)
                .values(state=UrlState.DUPLICATE.value, duplicate_of=holder)
            ).rowcount
            if changed:
                demoted += changed
                conn.execute(update(Url).where(Url.duplicate_of == url_id).values(duplicate_of=holder))
                if run_id is not None:
                    conn.exec_driver_sql(
                        f"UPDATE fetches SET change = NULL WHERE url_id = {d.p}"
                        " AND change IN ('new', 'changed', 'restyled')"
                        f" AND run_id IN (SELECT r.id FROM runs r WHERE r.id = {d.p} OR r.cycle_id ="
                        f" (SELECT c.cycle_id FROM runs c WHERE c.id = {d.p}))", (url_id, run_id, run_id))
        return demoted
