"""Main text and article metadata of a stored page, by trafilatura (the optional ``text`` extra), for export.

The export's text is trafilatura's because it is the better extractor on public article data (bench/text_quality.py,
docs/internals.md). Imported only when text is asked for; a missing extra is a ConfigError naming it.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from importlib import import_module
from importlib.metadata import version
from typing import Any

from harvester.discovery._html import decode_html
from harvester.errors import ConfigError
from harvester.runtime import CLOCK
from harvester.store_results import StoredPage

logger = logging.getLogger(__name__)

MAIN_FIELDS = ("text", "headline", "author", "published", "sitename", "categories", "tags", "extractor")
"""The keys of the JSONL ``main`` object (docs/export.md), in this order."""

MISSING_EXTRA = ("--text needs trafilatura, from the optional 'text' extra: pip install 'harvester[text]' "
                 "(or pip install 'trafilatura>=2' lxml_html_clean)")


DATE_SEARCH = {"extensive_search": False, "original_date": True}
"""htmldate's options for ``main.published`` (through trafilatura): no guess from the page's free text."""

ZONE_SLACK = timedelta(days=1)
"""A page's stated day may be the day after its fetch's UTC day (a zone ahead of UTC, up to +14 h)."""


def latest_date(fetched_at: datetime | None) -> str:
    """The latest publication date a page can state: the day it was fetched (plus a zone's day), on the harvest's
    clock. htmldate's own bound is the machine's date: a page fetched under ``HARVESTER_NOW`` after it, stating
    its date in ``<time>``, meta and JSON-LD, got another day of that month the page names nowhere (a stranger's
    test: 2026-12-11 stated, 2026-12-01 exported)."""
    return ((fetched_at or CLOCK.now()) + ZONE_SLACK).date().isoformat()


class MainText:
    """trafilatura loaded once; ``of(page)`` is the page's ``main`` object. Raises ConfigError when it is missing."""

    def __init__(self) -> None:
        try:
            module = import_module("trafilatura")
        except ImportError as exc:
            raise ConfigError(f"{MISSING_EXTRA} ({exc})") from None
        self._extract = module.bare_extraction
        self.version = f"trafilatura {version('trafilatura')}"

    def text(self, html: bytes | str, url: str | None = None) -> str | None:
        """The main text alone (what bench/text_quality.py scores)."""
        text: str | None = self._fields(html, url, None)["text"]
        return text

    def of(self, page: StoredPage) -> dict[str, Any]:
        """The article text and metadata of one page, nulls where trafilatura found none.

        The body is decoded here, by the harvester's one charset rule (BOM, Content-Type, ``<meta>``, UTF-8), not
        left to trafilatura: given bytes, it guesses, and read a windows-1252 page its header declared as
        windows-1250 (``naïve`` came out ``naďve``) while the page's title, read by that rule, was right."""
        text, _ = decode_html(page.body, page.content_type)
        return {**self._fields(text, page.final_url or page.url, page.fetched_at), "extractor": self.version}

    def _fields(self, html: bytes | str, url: str | None, fetched_at: datetime | None) -> dict[str, Any]:
        try:
            # Comments are not the page's main text; tables are. The date only from where a page states it
            # (JSON-LD, meta tags, <time>, the URL), and the publication date rather than the last edit: the
            # search of the page's free text took "Copyright 2026" in a footer for 2026-01-01 (a stranger's test).
            doc = self._extract(html, url=url, with_metadata=True, include_comments=False, include_tables=True,
                                date_extraction_params={**DATE_SEARCH, "max_date": latest_date(fetched_at)})
        except Exception as exc:  # one odd page must not end an export: logged, and its fields are null
            logger.warning("main text of %s: trafilatura failed (%s)", url, exc,
                           extra={"error_class": type(exc).__name__})
            doc = None

        def get(name: str) -> Any:
            return getattr(doc, name, None) or None

        return {
            "text": get("text"), "headline": get("title"), "author": get("author"), "published": get("date"),
            "sitename": get("sitename"), "categories": list(get("categories") or []),
            "tags": list(get("tags") or []),
        }
