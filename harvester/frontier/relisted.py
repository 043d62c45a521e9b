"""Whether a list that names a gone URL names it *again*: its previous full read did not name it (re-listed).

Read by the upsert of found URLs (``Discovered._known_rows``) for the few gone URLs a list names before their
recheck time; one index probe per naming document, never a scan. Writes nothing.
"""

# ruff: noqa: S608 -- SQL text is built from constants; values are always bound.
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import Connection

from harvester.frontier.dialects import Dialect

READ_DOCUMENTS = frozenset({"sitemap", "feed"})
"""Source kinds whose label names a row of ``documents`` (``<kind>:<document url>``), read in full at ``read_at``."""


class PreviousReads:
    """When each naming list was last read in full before the read now being written, per label, looked up once.

    A sitemap's or a feed's is its ``documents.read_at``: the document's state is saved after the URLs it names
    (invariant 5), so while they are written it still holds the previous full read, and a 304 leaves it alone (an
    unchanged document names nothing new). A listing page's is handed in (``given``): its previous 200 from the
    fetch log, read by the listing crawl before its completion writes this one (``Vanished.named_since``). A list
    with no previous full read on record has none: it cannot have stopped naming anything."""

    def __init__(self, conn: Connection, dialect: Dialect, given: Mapping[str, datetime | None] | None) -> None:
        self._conn = conn
        self._d = dialect
        self._reads: dict[str, datetime | None] = dict(given or {})

    def read_at(self, label: str) -> datetime | None:
        if label not in self._reads:
            kind, _, where = label.partition(":")
            moment = None
            if kind in READ_DOCUMENTS and where:
                moment = self._d.dt(self._conn.exec_driver_sql(
                    f"SELECT read_at FROM documents WHERE url = {self._d.p}", (where,)).scalar_one_or_none())
            self._reads[label] = moment
        return self._reads[label]

    def relisted(self, labels: Iterable[str], last_seen: datetime | None) -> bool:
        """Whether one of ``labels`` names again a URL last named at ``last_seen``: that list was read in full
        after it, so that read did not name the URL (every URL a full read names is written with a ``last_seen`` at
        or after the read's ``read_at``), nor did anything since. A list naming a URL on every read (a stale
        sitemap keeping a deleted page) is never re-listing it. Another source naming it meanwhile (a stale list
        beside the one re-listing it, a page's link) hides the re-listing: the gone recheck then governs."""
        if last_seen is None:
            return False
        for label in labels:
            previous = self.read_at(label)
            if previous is not None and last_seen < previous:
                return True
        return False
