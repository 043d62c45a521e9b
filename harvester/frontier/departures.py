"""The deletions of a window: stored pages whose URL went gone (404/410) or moved away (a permanent redirect) at or
after a moment, for ``export --since``.

A window's export held only the versions fetched in it, so a page deleted that day was simply absent: a downstream
reader told to take "what changed" from it (docs/operations.md) never learnt of a deletion. When a URL went is the
first answer of its current run of gone (or moved) answers: ``urls.gone_at`` is re-stamped by every recheck that
finds it still gone, so a page deleted last month would be reported again by every window holding a recheck.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime

from sqlalchemy import and_, exists, func, or_, select

from harvester.frontier.base import FULL_URL, Part
from harvester.frontier.models import Fetch, Host, Page, Url
from harvester.records import UrlState
from harvester.rules.revisit import PERMANENT_REDIRECTS
from harvester.runtime import aware
from harvester.store_results import Departure

GONE_STATUSES = (404, 410)

_FINAL_ELSEWHERE = tuple(s.value for s in (UrlState.DUPLICATE, UrlState.DISALLOWED, UrlState.SKIPPED))
"""Final states that are not a departure from the site (its page is elsewhere, or was never ours to keep)."""


class Departures(Part):
    """Stored pages that left the site in a window (``iter_departures``)."""

    def iter_departures(self, *, since: datetime, kinds: Sequence[str] | None = None) -> Iterator[Departure]:
        """One ``Departure`` per URL with a stored page whose answers now say gone (404/410; ``gone``) or moved (a
        permanent redirect; ``moved``) and first said so at or after ``since``, in the order they went. A URL gone
        before ``since`` and still gone is not one of them, however often it was rechecked since."""
        since = aware(since) or since
        found: list[Departure] = []
        with self._tx(write=False) as tx:
            for state, statuses in (("gone", GONE_STATUSES), ("moved", tuple(sorted(PERMANENT_REDIRECTS)))):
                found.extend(self._went(tx.conn, state, statuses, since, kinds))
        found.sort(key=lambda d: (d.at, d.url))
        yield from found

    def _went(self, conn, state: str, statuses: tuple[int, ...], since: datetime,  # type: ignore[no-untyped-def]
              kinds: Sequence[str] | None) -> list[Departure]:
        # The last answer that was not this kind of departure (a page, a 304, another redirect): the current run of
        # gone (or moved) answers began after it. A 5xx or a failed fetch between two 404s does not end the run.
        stays = or_(Fetch.status < 400, Fetch.status.is_(None)) if state == "gone" else Fetch.status < 400
        before = (select(func.max(Fetch.fetched_at))
                  .where(Fetch.url_id == Url.id, Fetch.status.is_not(None), Fetch.status.not_in(statuses), stays)
                  .correlate(Url).scalar_subquery())
        began = (select(func.min(Fetch.fetched_at))
                 .where(Fetch.url_id == Url.id, Fetch.status.in_(statuses),
                        or_(before.is_(None), Fetch.fetched_at > before))
                 .correlate(Url).scalar_subquery())
        first_status = (select(Fetch.status)
                        .where(Fetch.url_id == Url.id, Fetch.status.in_(statuses), Fetch.fetched_at == began)
                        .correlate(Url).limit(1).scalar_subquery())
        # Candidates: URLs with such an answer in the window (ix_fetches_fetched_at), few on any day.
        in_window = select(Fetch.url_id).where(Fetch.fetched_at >= since, Fetch.status.in_(statuses)).distinct()
        now = (or_(Url.state == UrlState.GONE.value, and_(Url.state.not_in(_FINAL_ELSEWHERE),
                                                          Url.last_status.in_(GONE_STATUSES)))
               if state == "gone" else
               and_(Url.state.not_in((UrlState.GONE.value, *_FINAL_ELSEWHERE)), Url.last_status.in_(statuses)))
        query = (
            select(FULL_URL, Url.kind, Url.final_url, began.label("began"), first_status.label("status"))
            .join(Host, Host.id == Url.host_id)
            .where(Url.id.in_(in_window), now, exists().where(Page.url_id == Url.id))
        )
        if kinds is not None:
            query = query.where(Url.kind.in_(list(kinds)))
        out = []
        for row in conn.execute(query):
            went = aware(row.began)
            if went is None or went < since:
                continue
            out.append(Departure(url=row.url, kind=row.kind, state=state, status=row.status, at=went,
                                 final_url=(row.final_url or row.url) if state == "moved" else row.url))
        return out
