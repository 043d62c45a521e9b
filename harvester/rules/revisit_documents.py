"""When to ask a discovery document (a sitemap, a feed, a feed page or archive) again: the revisit schedule of
documents, beside ``revisit``'s schedule of pages.

Pure functions over ``DocumentState`` records, the settings and an explicit time: due or not, the state after a
304, after a transient failure, after an answer that could not be used (a growing interval). Never fetches, never
speaks SQL, never counts: the discovery step that asked the document does.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime, timedelta

from harvester.records import DEADLINE_PASSED, DocumentState, ErrorClass, FetchResult
from harvester.rules.revisit import due_at
from harvester.runtime import aware
from harvester.settings import Settings

UNREADABLE_RETRY_S = 24 * 3600.0
"""A discovery document that answered and could not be used (a gzip bomb over the cap, billion laughs, an external
entity, a page where a sitemap was named) is asked again after this, then twice as long after each further such
answer, up to ``UNREADABLE_RETRY_MAX_S``. A transient failure (5xx, timeout) keeps ``robots.error_cache_s``: a
file that was whole and unusable will not heal by the next run, and asking it daily cost a full download a day."""

UNREADABLE_RETRY_MAX_S = 16 * 24 * 3600.0

UNREADABLE_CLASSES = frozenset({ErrorClass.TOO_LARGE, ErrorClass.BAD_CONTENT, ErrorClass.BAD_CONTENT_TYPE})
"""Fetch outcomes that are an unusable answer, not a failed exchange."""

_UNREADABLE = re.compile(r"unreadable \((\d+)\): ")
"""How many unusable answers in a row a document gave, kept in its ``error`` (no column of its own): the count
outlives ``mark_due`` and refreshes, which reset ``next_fetch_at``."""


_GROWN = re.compile(r"(cut while reading|absent) \((\d+)\): ")
"""How many asks in a row a document's deadline cut while its body was arriving (``cut_while_reading``), or a
probed known path answered 404/410 (``absent``): each waits a growing interval, counted in its ``error``."""


def cut_while_reading(result: FetchResult) -> bool:
    """The whole-fetch deadline passed while the body was arriving: the link is slower than the deadline allows
    for this document, and asking it again at once would download as much again to be cut the same way."""
    return (result.error_class is ErrorClass.TIMEOUT and result.bytes_read > 0
            and (result.error or "").startswith(DEADLINE_PASSED))  # not a stall between reads (review)


def absent_count(error: str | None) -> int:
    """Probes in a row that found a known path absent (404/410) behind a document's stored ``error`` (0: none)."""
    found = _GROWN.match(error) if error else None
    return int(found.group(2)) if found is not None and found.group(1) == "absent" else 0


def unreadable_count(error: str | None) -> int:
    """Unusable answers in a row behind a document's stored ``error`` (0: none, or its last failure was another)."""
    found = _UNREADABLE.match(error) if error else None
    return int(found.group(1)) if found else 0


def unreadable_wait_s(count: int) -> float:
    """How long a document that gave ``count`` unusable answers in a row waits before it is asked again."""
    return min(UNREADABLE_RETRY_MAX_S, UNREADABLE_RETRY_S * float(2 ** max(0, min(count, 32) - 1)))


def revisit_s(kind: str, settings: Settings) -> float:
    """The revisit interval of a document of ``kind`` read in full (an index, a sitemap; any other: a feed's)."""
    discovery = settings.discovery
    return {"sitemap_index": discovery.sitemap_index_revisit_s, "sitemap": discovery.sitemap_revisit_s}.get(
        kind, discovery.feed_revisit_s)


def is_due(doc: DocumentState, settings: Settings, *, run_started: datetime, refresh: bool, now: datetime) -> bool:
    """Asked in every run that has not asked it yet, whatever minute the run starts: a document that can be
    asked conditionally (it was read, and the server gave a validator) costs the site a 304 when unchanged,
    and it is what announces changes, new pages and deletions. One without validators would be downloaded
    whole each time: it waits for its revisit time (``revisit.due_at``: a little ahead of the interval, so a
    run on the same schedule as the last one finds it due). A failed one waits for its retry time.
    ``refresh`` asks those not due yet too, but not one whose last answer was unusable."""
    if doc.fetched_at is not None and doc.fetched_at >= run_started:
        return False
    unreadable = unreadable_count(doc.error)
    if unreadable and doc.fetched_at is not None:
        # Its last answer was unusable: asked on its own growing interval, a refresh included (a server that
        # ignores the validators would answer the same bad file in full again).
        return due_at(aware(doc.fetched_at), unreadable_wait_s(unreadable), settings.revisit) <= now
    if refresh or doc.next_fetch_at is None:
        return True
    if doc.error is None and doc.content_hash is not None and (doc.etag or doc.last_modified):
        return True
    return doc.next_fetch_at <= now


def not_modified(doc: DocumentState, now: datetime, settings: Settings) -> DocumentState:
    """``doc`` answered 304: asked now, read as before (``read_at`` stays: what it names has not changed)."""
    return replace(doc, fetched_at=now, next_fetch_at=due_at(now, revisit_s(doc.kind, settings), settings.revisit))


def is_unusable(result: FetchResult, *, refused: bool = False) -> bool:
    """Whether a failed ask is an answer that could not be used (``refused``: its parser refused a whole answer,
    or a 304 repeated one), which waits a growing interval, rather than a transient failure."""
    return refused or result.error_class in UNREADABLE_CLASSES


def failed(
    url: str, kind: str, result: FetchResult, now: datetime, known: DocumentState | None, settings: Settings,
    *, error: str | None = None, refused: bool = False, absent: bool = False,
) -> DocumentState:
    """The state of a document whose ask failed. An unusable answer (``is_unusable``) waits a growing interval and
    keeps that answer's validators, so its next ask is conditional; one cut by its deadline while its body was
    arriving (``cut_while_reading``) waits the same growing interval (a 52 MB sitemap on a slow link was
    downloaded and cut every 10 minutes), and so does a known path probed on a guess that answered 404/410
    (``absent``: /sitemap.xml.gz was asked and answered 404 every daily run); any other failure is transient and
    waits ``robots.error_cache_s``."""
    base = known or DocumentState(url=url, kind=kind)
    label = "cut while reading" if cut_while_reading(result) and not refused else "absent" if absent else None
    if label == "absent":  # gone: no copy of it is the site's sitemap any more (review: its old children were read
        base = replace(base, content_hash=None, children=(), etag=None, last_modified=None)  # stale copy; review)
    if label is not None:
        found = _GROWN.match(known.error) if known is not None and known.error else None
        count = (int(found.group(2)) if found is not None and found.group(1) == label else 0) + 1
        return replace(base, status=result.status, fetched_at=now,
                       next_fetch_at=due_at(now, unreadable_wait_s(count), settings.revisit),
                       error=f"{label} ({count}): {result.error or result.status or 'timeout'}")
    if not is_unusable(result, refused=refused):
        retry = timedelta(seconds=settings.robots.error_cache_s)
        return replace(
            base, status=result.status, fetched_at=now, next_fetch_at=now + retry,
            error=error or result.error or (result.error_class.value if result.error_class else None),
        )
    count = unreadable_count(known.error if known is not None else None) + 1
    message = error or result.error or (result.error_class.value if result.error_class else "unusable")
    if not result.not_modified:  # the validators of the answer refused (a 304 keeps those it answered)
        base = replace(base, etag=result.etag, last_modified=result.last_modified)
    return replace(base, status=result.status, fetched_at=now,
                   next_fetch_at=due_at(now, unreadable_wait_s(count), settings.revisit),
                   error=f"unreadable ({count}): {_UNREADABLE.sub('', message, count=1)}")
