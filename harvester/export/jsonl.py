"""JSONL export: one line per stored page version (docs/export.md describes every field), optionally with the
page's main text and article metadata (``main``, by trafilatura)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, cast

from harvester.runtime import aware
from harvester.store_results import Departure, StoredPage

if TYPE_CHECKING:
    from harvester.export.text import MainText

JSONL_FIELDS = (
    "url", "final_url", "kind", "status", "fetched_at", "change", "payload_digest", "content_type", "etag",
    "last_modified", "content_hash", "canonical", "title", "description", "language", "jsonld", "fields", "hook_error",
    "robots", "state",
)
"""The keys of every JSONL line, in this order; ``main`` follows them when text is asked for."""


def export_jsonl(pages: Iterable[StoredPage], out: IO[bytes] | IO[str], *, main: MainText | None = None) -> int:
    """Write one JSON line per stored page; returns the number written. ``out`` may be binary or text.
    ``main``: add each page's ``main`` object (its article text and metadata)."""
    count = 0
    for page in pages:
        record = page_record(page)
        if main is not None:
            record["main"] = main.of(page)
        _write(record, out)
        count += 1
    return count


def export_departures(departures: Iterable[Departure], out: IO[bytes] | IO[str], *, main: bool = False) -> int:
    """Write one JSON line per stored page that left the site (``departure_record``); returns the number written.
    ``main``: the line carries ``main`` too, null (there is no page to read it from), so every line has one."""
    count = 0
    for departure in departures:
        record = departure_record(departure)
        if main:
            record["main"] = None
        _write(record, out)
        count += 1
    return count


def departure_record(departure: Departure) -> dict[str, Any]:
    """The JSONL object (``JSONL_FIELDS``) of a URL that went gone or moved away, for ``export --since``: its
    ``state`` (``gone`` or ``moved``) and ``change`` say so, ``status`` and ``fetched_at`` are the answer that first
    said so and when; nothing of a body (there is none), so the fields of a page are null, [] or {}."""
    return {
        "url": departure.url, "final_url": departure.final_url, "kind": departure.kind, "status": departure.status,
        "fetched_at": _iso(departure.at), "change": departure.state, "payload_digest": None, "content_type": None,
        "etag": None, "last_modified": None, "content_hash": None, "canonical": None, "title": None,
        "description": None, "language": None, "jsonld": [], "fields": {}, "hook_error": None, "robots": None,
        "state": departure.state,
    }


def _write(record: dict[str, Any], out: IO[bytes] | IO[str]) -> None:
    line = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"
    if isinstance(out, io.TextIOBase):
        cast("IO[str]", out).write(line)
    else:
        cast("IO[bytes]", out).write(line.encode("utf-8"))


def page_record(page: StoredPage) -> dict[str, Any]:
    """The JSONL object of one page (``JSONL_FIELDS``), times as ISO 8601 UTC."""
    return {
        "url": page.url,
        "final_url": page.final_url,
        "kind": page.kind,  # detail or listing: filter on it to keep the articles only
        "status": page.status,
        "fetched_at": _iso(page.fetched_at),
        "change": page.change,  # new / changed / restyled: what this version is to the one before it
        "payload_digest": page.payload_digest,  # sha256 hex of the body as stored: a new version's key
        "content_type": page.content_type,
        # The validators last received with these bytes (a later 200 repeating them may bring new ones): for the
        # newest version of a live page, what the site serves now and the next conditional request sends.
        "etag": page.served[0] if page.served is not None else page.etag,
        "last_modified": page.served[1] if page.served is not None else page.last_modified,
        "content_hash": page.content_hash,
        "canonical": page.canonical_url,
        "title": page.title,
        "description": page.description,
        "language": page.language,
        "jsonld": page.jsonld,
        # null, never {} nor an older version's, when the hook failed on this version: hook_error says why.
        "fields": None if page.hook_error else page.fields,
        "hook_error": page.hook_error,  # {"class": "KeyError", "message": "'price'"}, or null
        # What the page's robots directives asked of us (["noindex"] ...): filter on it to honour noindex
        # downstream. null for a page stored before they were recorded.
        "robots": None if page.robots is None else list(page.robots),
        "state": page.url_state,  # the URL's state now: "gone" marks a page the site has since removed
    }


def _iso(moment: datetime | None) -> str | None:
    return aware(moment).isoformat().replace("+00:00", "Z") if moment is not None else None
