"""What is kept of a page: ``extract_page`` turns one fetch into an ``Extracted`` (status, final URL, the content
hash over the main content, title, description, language, rel=canonical, JSON-LD, outlinks, robots directives and
the user hook's fields). ``page`` is the entry point and metadata, ``content`` the main-content text, ``hook`` the
user's extractor, ``model`` the records.

May use: ``discovery`` (links of a page), ``fetch.robots`` (the product token), ``rules``, the vocabulary. Must
not: fetch, speak SQL or import Prefect.
"""

from __future__ import annotations

from harvester.discovery._html import decode_html  # the one charset rule, shared with discovery
from harvester.extraction.content import main_content_text
from harvester.extraction.hook import hook_failed_everywhere, load_hook, resolve_hook
from harvester.extraction.model import Extracted, ExtractorHook, Page
from harvester.extraction.page import ListingRead, extract_page, find_outlinks, read_listing

__all__ = [
    "Extracted",
    "ExtractorHook",
    "ListingRead",
    "Page",
    "decode_html",
    "extract_page",
    "find_outlinks",
    "hook_failed_everywhere",
    "load_hook",
    "main_content_text",
    "read_listing",
    "resolve_hook",
]
