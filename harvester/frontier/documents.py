"""Discovery documents (sitemaps, feeds, listing pages read as lists): their validators, and what vanished from them."""


from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, and_, bindparam, case, insert, literal, or_, select, update

from harvester.frontier.base import Part
from harvester.frontier.models import (
    Document,
    Fetch,
    Host,
    Source,
    Url,
    UrlSource,
)
from harvester.records import (
    DocumentState,
    UrlState,
    Vanished,
)
from harvester.runtime import aware

logger = logging.getLogger(__name__)

def _document_state(doc: Any) -> DocumentState:
    return DocumentState(
        url=doc["url"], kind=doc["kind"], status=doc["status"], etag=doc["etag"],
        last_modified=doc["last_modified"], content_hash=doc["content_hash"], fetched_at=doc["fetched_at"],
        next_fetch_at=doc["next_fetch_at"], url_count=doc["url_count"], error=doc["error"],
        children=tuple(doc["children"] or ()), read_at=doc["read_at"],
        refusals_read=bool(doc["refusals_read"]) or doc["content_hash"] is None,
    )


_DOCUMENTS = cast("Table", Document.__table__)
_SAVED = ("kind", "status", "etag", "last_modified", "content_hash", "fetched_at", "next_fetch_at", "url_count",
          "error", "children", "read_at", "refusals_read")
_SAVED_VALUES = {name: bindparam(f"v_{name}", type_=_DOCUMENTS.c[name].type) for name in _SAVED}
_UPDATE_DOCUMENT = update(_DOCUMENTS).where(_DOCUMENTS.c.url == bindparam("doc_url")).values(_SAVED_VALUES)
_INSERT_DOCUMENT = insert(_DOCUMENTS).values(url=bindparam("doc_url"), **_SAVED_VALUES)
"""``save_document``'s statements, built once (Core, bound by name): building and keying them per save (the
ORM's DML path) cost more than running them."""


class Documents(Part):
    """Documents and the URLs they stopped naming (re-checked in the transaction that saves the new reading)."""

    def get_document(self, url: str) -> DocumentState | None:
        with self._tx(write=False) as tx:
            doc = tx.conn.execute(select(Document.__table__).where(Document.url == url)).mappings().first()
        return None if doc is None else _document_state(doc)

    def host_documents(self, origin: str, *, kinds: Sequence[str], limit: int = 1_000) -> list[DocumentState]:
        """Discovery documents of ``origin`` of ``kinds`` (e.g. the feeds to poll again), oldest fetch first."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(Document.__table__)
                .where(Document.url.startswith(origin + "/", autoescape=True), Document.kind.in_(list(kinds)))
                .order_by(Document.fetched_at, Document.id).limit(limit)
            ).mappings().all()
        return [_document_state(row) for row in rows]

    def save_document(self, doc: DocumentState, *, vanished: Vanished | None = None) -> int:
        """Insert or replace the state of one discovery document (keyed by URL). With ``vanished`` (the document
        was just read in full), the URLs it named at its previous full read and no longer names are made due
        now, in the same transaction: a rerun after a kill finds either both or neither. Returns how many."""
        values = {
            "v_kind": doc.kind, "v_status": doc.status, "v_etag": doc.etag, "v_last_modified": doc.last_modified,
            "v_content_hash": doc.content_hash, "v_fetched_at": aware(doc.fetched_at),
            "v_next_fetch_at": aware(doc.next_fetch_at), "v_url_count": doc.url_count, "v_error": doc.error,
            "v_children": list(doc.children) or None, "v_read_at": aware(doc.read_at),
            "v_refusals_read": doc.refusals_read, "doc_url": doc.url,
        }
        rechecked = 0
        with self._tx() as tx:
            if vanished is not None:
                rechecked = self.recheck_vanished(tx.conn, vanished)
            if not tx.conn.execute(_UPDATE_DOCUMENT, values).rowcount:
                tx.conn.execute(_INSERT_DOCUMENT, values)
        return rechecked

    def note_documents(self, conn: Connection, urls: Sequence[str], *, kind: str) -> None:
        """Documents found (feeds a page links to) that the frontier does not hold yet: rows with no fetch, so due.
        Two hosts' discoveries may name one feed at once: a conflict on the URL leaves the first."""
        d = self._d
        sql = d.insert_ignore("documents", ("url", "kind", "url_count"), ("url",))
        conn.exec_driver_sql(sql, [(url, kind, 0) for url in dict.fromkeys(urls)])

    def last_read_at(self, url_id: int) -> datetime | None:
        """When ``url_id`` last answered 200 (its last full read), from the fetch log."""
        with self._tx(write=False) as tx:
            moment = tx.conn.execute(
                select(Fetch.fetched_at).where(Fetch.url_id == url_id, Fetch.status == 200)
                .order_by(Fetch.fetched_at.desc()).limit(1)
            ).scalar_one_or_none()
        return aware(moment) if moment is not None else None

    def recheck_vanished(self, conn: Connection, vanished: Vanished) -> int:
        """Finished URLs of ``vanished.origins`` found through ``vanished.label`` and last named in
        ``[named_since, seen_before)``: named by the document's previous full read, not by this one (nor by
        anything read since ``seen_before``). They lose their published lastmod (no lastmod may say they are
        unchanged any more) and, when finished, are due now, so the run asks them (conditionally) and a 404/410
        marks them gone (a URL still waiting in the queue is asked anyway). One already asked since ``seen_before``
        (extraction runs beside the rest of a host's discovery) has its answer of this run: not asked again.
        The window makes it once: the next read's ``named_since`` is this read, later than their last naming.
        Without a previous full read on record (a document stored before ``read_at`` existed), URLs still
        carrying a lastmod stand in for "named by the last read"."""
        sources = select(Source.id).where(Source.label.in_(list(vanished.labels))).scalar_subquery()
        paired = select(UrlSource.url_id).where(UrlSource.source_id.in_(sources))
        named = (Url.last_seen >= aware(vanished.named_since) if vanished.named_since is not None
                 else Url.lastmod.is_not(None))
        total = 0
        for origin in vanished.origins:
            host_id = conn.execute(select(Host.id).where(Host.origin == origin)).scalar_one_or_none()
            if host_id is None:
                continue
            result = conn.execute(
                update(Url).where(
                    Url.host_id == host_id, named, Url.last_seen < aware(vanished.seen_before),
                    or_(Url.source_id.in_(sources), Url.id.in_(paired)),
                ).values(lastmod=None, lastmod_until=None, next_fetch_at=case(
                    (and_(Url.state == UrlState.DONE.value,
                          or_(Url.last_fetched_at.is_(None), Url.last_fetched_at < aware(vanished.seen_before))),
                     literal(aware(vanished.now), Url.next_fetch_at.type)),
                    else_=Url.next_fetch_at,
                ))
            )
            total += int(result.rowcount)
        return total

