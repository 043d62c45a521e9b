"""The harvest out of the frontier: JSONL (one record per stored page version, optionally with its main text) and
a WARC 1.1 file that replays (one record per stored exchange). Every field is described in docs/export.md.

The writers stream: they take the store's iterators (``iter_pages`` / ``iter_fetches``) and hold one record at a
time plus bounded caches. Never fetches and never speaks SQL.
"""

from __future__ import annotations

from harvester.export.jsonl import JSONL_FIELDS, departure_record, export_departures, export_jsonl, page_record
from harvester.export.text import MAIN_FIELDS, MainText
from harvester.export.warc import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED, WarcCounts, export_warc, sha1_digest

__all__ = [
    "JSONL_FIELDS",
    "MAIN_FIELDS",
    "REVISIT_IDENTICAL",
    "REVISIT_NOT_MODIFIED",
    "MainText",
    "WarcCounts",
    "departure_record",
    "export_departures",
    "export_jsonl",
    "export_warc",
    "page_record",
    "sha1_digest",
]
