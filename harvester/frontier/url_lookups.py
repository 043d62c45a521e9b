"""Reads of stored URLs by their canonical form: whether the frontier holds them, since when, from which sources.

Kept apart from ``discovered`` (the upsert): these are lookups for the listing crawl, redirects and reports, none
of which writes a found URL."""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from harvester.frontier.base import FULL_URL, Part, url_id_of
from harvester.frontier.dialects import Dialect
from harvester.frontier.models import Host, Source, Url
from harvester.frontier.rows import split_url
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.runtime import aware, utcnow


def lookup_paths(conn: Connection, d: Dialect, chunk: int, paths_by_host: dict[int, list[str]],
                 columns: str) -> list[Any]:
    """Rows for (host_id, path) keys: one statement per host and chunk, through the unique index."""
    rows: list[Any] = []
    for host_id, paths in paths_by_host.items():
        for start in range(0, len(paths), chunk):
            where, params = d.any_of("path", paths[start : start + chunk])
            rows += conn.exec_driver_sql(
                f"SELECT host_id, path, {columns} FROM urls WHERE host_id = {d.p} AND {where}",
                (host_id, *params),
            ).all()
    return rows


class UrlLookups(Part):
    """Stored URLs read by URL, for callers outside the upsert."""

    def known_urls(self, urls: Sequence[str], *, before: datetime | None = None) -> set[str]:
        """The canonical ``urls`` the frontier already holds (any state), first seen before ``before`` when given;
        through the unique index."""
        by_origin: dict[str, list[str]] = {}
        for url in urls:
            origin, path = split_url(url)
            by_origin.setdefault(origin, []).append(path)
        if not by_origin:
            return set()
        cutoff = aware(before)
        d = self._d
        with self._tx(write=False) as tx:
            ids: dict[str, int] = {
                origin: host_id for origin, host_id in tx.conn.execute(
                    select(Host.origin, Host.id).where(Host.origin.in_(list(by_origin)))
                )
            }
            origin_of_id = {host_id: origin for origin, host_id in ids.items()}
            rows = lookup_paths(
                tx.conn, d, self._chunk, {ids[o]: paths for o, paths in by_origin.items() if o in ids}, "first_seen",
            )
        return {
            origin_of_id[host_id] + path for host_id, path, first_seen in rows
            if cutoff is None or ((seen := d.dt(first_seen)) is not None and seen < cutoff)
        }


    def first_sources(self, urls: Sequence[str], *, before: datetime) -> dict[str, str]:
        """The provenance label of the first source of each of ``urls`` the frontier held before ``before``.

        Lets the listing crawl tell an item found earlier by a sitemap or the plain listing (known) from one that
        only a filter page ever listed (which that filter page keeps adding on every run)."""
        by_origin: dict[str, list[str]] = {}
        for url in urls:
            origin, path = split_url(url)
            by_origin.setdefault(origin, []).append(path)
        if not by_origin:
            return {}
        cutoff = aware(before)
        d = self._d
        with self._tx(write=False) as tx:
            ids = dict(tx.conn.execute(select(Host.origin, Host.id).where(Host.origin.in_(list(by_origin)))).all())
            origin_of_id = {host_id: origin for origin, host_id in ids.items()}
            rows = lookup_paths(
                tx.conn, d, self._chunk, {ids[o]: paths for o, paths in by_origin.items() if o in ids},
                "first_seen, source_id",
            )
            firsts = {
                origin_of_id[host_id] + path: source_id for host_id, path, first_seen, source_id in rows
                if (seen := d.dt(first_seen)) is not None and seen < cutoff
            }
            wanted = sorted({i for i in firsts.values() if i is not None})
            labels: dict[int, str] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start:start + 500]
                labels.update(tx.conn.execute(select(Source.id, Source.label).where(Source.id.in_(chunk))).all())
        return {url: labels.get(source_id, "") if source_id is not None else "" for url, source_id in firsts.items()}

    def url_id(self, url: str) -> int | None:
        """The id of a stored URL (canonical), or None when the frontier does not hold it."""
        with self._tx(write=False) as tx:
            return url_id_of(tx.conn, self._d, url)

    def held_target(self, url: str, *, now: datetime | None = None) -> bool:
        """Whether the frontier holds ``url`` (canonical), the target of a permanent redirect that is not followed
        because the URL is asked on its own. A target last found moved itself is made due now: the redirect to
        it is the news that it is back (a page moved away one day and back the next, the new address now
        redirecting home), and left to a moved URL's long revisit it would be in no snapshot for weeks."""
        p = self._d.p
        with self._tx() as tx:
            url_id = url_id_of(tx.conn, self._d, url)
            if url_id is None:
                return False
            tx.conn.exec_driver_sql(
                f"UPDATE urls SET next_fetch_at = {p} WHERE id = {p} AND state = 'done'"
                f" AND last_status IN ({', '.join(str(code) for code in sorted(PERMANENT_REDIRECTS))})"
                f" AND (next_fetch_at IS NULL OR next_fetch_at > {p})",
                (self._d.ts(aware(now) or utcnow()), url_id, self._d.ts(aware(now) or utcnow())),
            )
        return True

    def sources_of(self, url: str) -> list[str]:
        """Provenance labels of ``url`` (first source first), or [] when the URL is unknown."""
        p = self._d.p
        with self._tx(write=False) as tx:
            url_id = url_id_of(tx.conn, self._d, url)
            if url_id is None:
                return []
            rows = tx.conn.exec_driver_sql(
                "SELECT s.label, 0 AS o FROM urls u JOIN sources s ON s.id = u.source_id"
                f" WHERE u.id = {p} UNION SELECT s.label, 1 FROM url_sources us"
                f" JOIN sources s ON s.id = us.source_id WHERE us.url_id = {p} ORDER BY 2, 1",
                (url_id, url_id),
            ).all()
        return list(dict.fromkeys(label for label, _ in rows))


    def holds_kind(self, origins: Sequence[str], *, kind: str) -> bool:
        """Whether the frontier holds any URL of ``kind`` on ``origins`` (a site's detail pages, say)."""
        with self._tx(write=False) as tx:
            return tx.conn.execute(
                select(Url.id).join(Host, Host.id == Url.host_id)
                .where(Host.origin.in_(list(origins)), Url.kind == kind).limit(1)
            ).first() is not None

    def sample_urls(self, *, kind: str, limit: int) -> list[str]:
        """Some known URLs of ``kind`` (the newest first), e.g. to re-learn a site's detail URL shapes."""
        with self._tx(write=False) as tx:
            rows = tx.conn.execute(
                select(FULL_URL).select_from(Url).join(Host, Host.id == Url.host_id).where(Url.kind == kind)
                .order_by(Url.id.desc()).limit(limit)
            ).scalars()
            return list(rows)
