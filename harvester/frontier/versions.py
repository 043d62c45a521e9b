"""A URL's stored versions, as the completions compare and write them (``Outcomes._store_versions``): the newest
version of each URL, payloads stored once by digest, and a version read again in place.

Apart from ``outcomes`` so that the completion's transaction reads as its decisions; these are its storage."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, insert, update

from harvester.frontier.dialects import Dialect
from harvester.frontier.models import Page
from harvester.frontier.rows import StoredVersion
from harvester.records import PageRecord

_PAGES = cast("Table", Page.__table__)
INSERT_PAGES = insert(_PAGES).returning(_PAGES.c.id, sort_by_parameter_order=True)
"""Pages inserted by Core, the statement built once: the ORM's bulk-insert path re-read every row's keys and
built the statement per batch (~1.4 % of a harvest's CPU) for the same SQL."""

READ_AGAIN = (update(Page).where(Page.id == bindparam("pid"))
              .values({name: bindparam(name) for name in ("encoding", "content_hash", "title", "description",
                                                         "language", "jsonld")}))
"""A version stored before its encoding was recorded (0024), read again in place (``read_again``)."""


def read_again(page_id: int, page: PageRecord) -> dict[str, Any]:
    """The parameters of ``READ_AGAIN`` for a version stored before its encoding was recorded: what its bytes,
    repeated by ``page``, read as now."""
    return {"pid": page_id, "encoding": page.encoding, "content_hash": page.content_hash, "title": page.title,
            "description": page.description, "language": page.language, "jsonld": list(page.jsonld)}


def latest_versions(conn: Connection, d: Dialect, url_ids: Sequence[int]) -> dict[int, StoredVersion]:
    """url id -> its newest stored version (ix_pages_url_id): page id, payload digest, content hash, whether the
    hook failed on it, the encoding its text was decoded with, its Content-Type."""
    where, params = d.any_of("url_id", list(url_ids))
    return {
        int(url_id): StoredVersion(int(page_id), str(digest), str(content_hash), bool(hook_failed), encoding,
                                   content_type)
        for url_id, page_id, digest, content_hash, hook_failed, encoding, content_type in conn.exec_driver_sql(
            "SELECT p.url_id, p.id, b.digest, p.content_hash, p.hook_error IS NOT NULL, p.encoding, p.content_type"
            " FROM pages p JOIN bodies b ON b.id = p.body_id"
            f" WHERE p.id IN (SELECT max(id) FROM pages WHERE {where} GROUP BY url_id)", tuple(params))
    }


def store_bodies(conn: Connection, d: Dialect, bodies: Mapping[str, bytes], *, level: int) -> dict[str, int]:
    """digest -> ``bodies`` id, each payload written once (compressed at ``level``) whoever wrote it first: a body
    another URL or another worker stored is shared, not copied."""
    digests = list(bodies)
    where, params = d.any_of("digest", digests)
    select_sql = f"SELECT digest, id FROM bodies WHERE {where}"
    ids = {str(k): int(v) for k, v in conn.exec_driver_sql(select_sql, tuple(params))}
    missing = [digest for digest in digests if digest not in ids]
    if missing:
        conn.exec_driver_sql(
            d.insert_ignore("bodies", ("digest", "size", "body"), ("digest",)),
            [(digest, len(bodies[digest]), zlib.compress(bodies[digest], level)) for digest in missing],
        )
        where, params = d.any_of("digest", missing)
        ids.update({str(k): int(v) for k, v in conn.exec_driver_sql(
            f"SELECT digest, id FROM bodies WHERE {where}", tuple(params))})
    return ids
