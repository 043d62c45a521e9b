"""Which URL holds a content: the lookups extraction's duplicate test makes (``phases.completions``), one per batch
of completions, through ``ix_urls_content_hash``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, exists, func, or_, select
from sqlalchemy.orm import aliased

from harvester.frontier.base import FULL_URL, Part
from harvester.frontier.models import Host, Page, Url
from harvester.records import UrlState
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.runtime import aware, utcnow

_HOLDS = (
    Url.state == UrlState.DONE.value,
    or_(Url.last_status.is_(None), Url.last_status.not_in(sorted(PERMANENT_REDIRECTS))),
)
"""A URL holds its content hash: DONE, and its last answer was no permanent redirect (a moved URL keeps the hash
of the page it moved, which lives at its new address)."""


class Holders(Part):
    """The URLs holding each content, by content hash."""

    def duplicates_of(
        self, hashes: Sequence[str], *, exclude_ids: Sequence[int] = (), now: datetime | None = None
    ) -> dict[str, int]:
        """content_hash -> the lowest id of a URL already holding that content, as far as we know now.

        A holder is DONE and not yet due again: a URL due for a re-fetch (or being re-fetched) may have moved or
        vanished since, so its old hash vouches for nothing, and one whose last answer was a permanent redirect
        holds no content at all; the page at a moved URL's new address is never a duplicate of the old one."""
        if not hashes:
            return {}
        now = aware(now) or utcnow()
        query = (
            select(Url.content_hash, func.min(Url.id))
            .where(Url.content_hash.in_(list(set(hashes))), *_HOLDS,
                   or_(Url.next_fetch_at.is_(None), Url.next_fetch_at > now))
            .group_by(Url.content_hash)
        )
        if exclude_ids:
            query = query.where(Url.id.not_in(list(exclude_ids)))
        with self._tx(write=False) as tx:
            return {str(h): int(i) for h, i in tx.conn.execute(query)}

    def content_holders(
        self, hashes: Sequence[str], confirmed: Sequence[int], *, now: datetime | None = None
    ) -> dict[str, list[tuple[int, str, bool]]]:
        """content_hash -> (id, URL, vouches) of every URL holding it now (DONE, not moved), and of the URLs of
        ``confirmed`` (being revisited: queued while leased) that are no one's copy: what a confirmed content (a
        304, an unchanged 200) is settled against, so that the URL the rule picks keeps it whichever was read
        first. ``vouches``: not due again yet (``duplicates_of``'s holder)."""
        if not hashes:
            return {}
        now = aware(now) or utcnow()
        vouches = and_(*_HOLDS, or_(Url.next_fetch_at.is_(None), Url.next_fetch_at > now))
        query = (
            select(Url.content_hash, Url.id, FULL_URL, vouches)
            .join(Host, Host.id == Url.host_id)
            .where(Url.content_hash.in_(list(set(hashes))),
                   or_(and_(*_HOLDS), and_(Url.id.in_(list(confirmed)), Url.duplicate_of.is_(None))))
        )
        found: dict[str, list[tuple[int, str, bool]]] = {}
        with self._tx(write=False) as tx:
            for digest, url_id, url, fresh in tx.conn.execute(query):
                found.setdefault(str(digest), []).append((int(url_id), str(url), bool(fresh)))
        return found

    def declared_canonicals(self, url_ids: Sequence[int]) -> dict[int, str]:
        """url id -> the canonical URL its newest stored page declares (rel=canonical), where it declares one."""
        if not url_ids:
            return {}
        newer = aliased(Page)
        query = select(Page.url_id, Page.canonical_url).where(
            Page.url_id.in_(list(url_ids)), Page.canonical_url.is_not(None),
            ~exists().where(newer.url_id == Page.url_id, newer.id > Page.id),
        )
        with self._tx(write=False) as tx:
            return {int(url_id): str(canonical) for url_id, canonical in tx.conn.execute(query)}
