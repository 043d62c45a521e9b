"""What extraction hands back and what the user's hook sees: ``Extracted`` (kept of one fetch), ``Page`` (the
hook's argument) and the hook's type."""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import lxml.etree
import lxml.html

from harvester.records import ErrorClass, FetchResult, PageRecord

MAX_PARSE_BYTES = 16 * 2**20
"""Bytes of a body handed to the HTML parser; the fetcher's cap is normally lower. The stored body is not cut."""

MAX_ELEMENTS = 200_000
"""Elements visited when scoring text blocks; a bigger document is scored on its first elements only."""

MAX_LINKS = 10_000
"""Outlinks kept per page (document order). A page linking more is a link farm or a sitemap in disguise."""

MAX_JSONLD_BLOCKS = 64
"""JSON-LD ``<script>`` blocks parsed per page; later ones are counted as skipped."""

MAX_JSONLD_BYTES = 2**20
"""A JSON-LD block larger than this is skipped (counted) rather than parsed."""

MAX_TITLE_CHARS = 2_000
MAX_DESCRIPTION_CHARS = 10_000

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def html_parser() -> lxml.html.HTMLParser:
    # huge_tree=False keeps libxml2's depth (256) and text-node limits: deep nesting costs nothing extra.
    return lxml.html.HTMLParser(
        encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True, huge_tree=False,
        default_doctype=False,
    )


_PLAIN_CLASSES = lxml.etree.ElementDefaultClassLookup(
    element=lxml.html.HtmlElement, comment=lxml.html.HtmlComment, pi=lxml.html.HtmlProcessingInstruction,
    entity=lxml.html.HtmlEntity)
_PARSERS = threading.local()


def extraction_parser() -> lxml.etree.HTMLParser:
    """``html_parser``'s parse, every element an ``HtmlElement``: for extraction's own walks, never for a hook.

    lxml.html's parser picks each element's class (forms, inputs...) by calling a Python method for every
    element proxy made: that lookup was a seventh of the extraction. Extraction uses no form API, so a C
    lookup does; the hook's ``Page.tree`` keeps lxml.html's classes. One parser per thread (reused: a parser
    serves one parse at a time), not one per page."""
    parser: lxml.etree.HTMLParser | None = getattr(_PARSERS, "parser", None)
    if parser is None:
        parser = lxml.etree.HTMLParser(
            encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True, huge_tree=False,
            default_doctype=False,
        )
        parser.set_element_class_lookup(_PLAIN_CLASSES)
        _PARSERS.parser = parser
    return parser


def parse_html_text(text: str, *, for_extraction: bool = False) -> lxml.html.HtmlElement | None:
    """The document's root (None if empty or unparseable); ``for_extraction``: with ``extraction_parser``."""
    data = text.encode("utf-8", errors="replace")[:MAX_PARSE_BYTES]
    if not data.strip():
        return None
    try:
        root = lxml.html.document_fromstring(
            data, parser=extraction_parser() if for_extraction else html_parser())
    except (lxml.etree.ParserError, lxml.etree.XMLSyntaxError, ValueError):
        return None
    return root if isinstance(root, lxml.html.HtmlElement) else None


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def without_surrogates(text: str) -> str:
    """``text`` with every lone surrogate made U+FFFD: a JSON string may hold one (``"\\ud83d"`` is valid JSON, RFC
    8259 §8.2), a hook may return one, and it has no UTF-8 form, so hashing or storing it raised UnicodeEncodeError
    and took the whole run down. U+FFFD is what an HTML parser makes of ``&#xD83D;``. (A str holds a valid pair as
    one astral character, so every surrogate code point in it is a lone one.)"""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def host_of(url: str) -> str:
    try:
        return urlsplit(url).netloc
    except ValueError:
        return ""



MAX_HOOK_FIELDS_BYTES = 2**20
"""Serialized size allowed for the fields a user hook returns; more is a hook failure, not a silent cut."""


ExtractorHook = Callable[["Page"], Mapping[str, Any] | None]
"""A user extractor: gets a read-only ``Page``, returns JSON-able fields (or None for none)."""


@dataclass(frozen=True, slots=True)
class Extracted:
    """What ``extract_page`` made of one fetch.

    A failed hook is a value, not an exception: ``error_class`` is ``HOOK_FAILED`` and ``error`` says why;
    ``page`` is still filled, without hook fields and with its ``hook_error``, and is stored like any page
    (``revisit.classify_outcome(..., hook_error=...)`` labels the completion with the hook's failure).
    """

    page: PageRecord
    outlinks: tuple[str, ...] = ()
    next_pages: tuple[str, ...] = ()
    feeds: tuple[str, ...] = ()
    encoding: str | None = None
    jsonld_invalid: int = 0
    main_text_chars: int = 0
    robots_nofollow: bool = False
    robots_noindex: bool = False
    error_class: ErrorClass | None = None
    error: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_class is not None

    @property
    def content_hash(self) -> str:
        return self.page.content_hash


@dataclass(frozen=True, slots=True)
class Page:
    """The read-only view of a page a user hook gets. ``tree`` is parsed on first use, from the raw bytes.

    ``jsonld`` is the hook's own copy, so mutating it does not touch the stored record.
    """

    url: str
    final_url: str
    status: int
    headers: Mapping[str, str]
    bytes: bytes
    text: str
    encoding: str
    content_type: str | None
    etag: str | None
    last_modified: str | None
    content_hash: str
    canonical_url: str | None
    title: str | None
    description: str | None
    language: str | None
    jsonld: list[Any]
    main_text: str
    _tree_cache: list[lxml.html.HtmlElement | None] = field(default_factory=list, repr=False, compare=False)

    @classmethod
    def build(cls, result: FetchResult, record: PageRecord, *, text: str, encoding: str, main_text: str) -> Page:
        return cls(
            url=result.url, final_url=record.final_url, status=record.status,
            headers=MappingProxyType({key.lower(): value for key, value in result.headers.items()}),
            bytes=record.body, text=text, encoding=encoding, content_type=record.content_type, etag=record.etag,
            last_modified=record.last_modified, content_hash=record.content_hash,
            canonical_url=record.canonical_url, title=record.title, description=record.description,
            language=record.language, jsonld=copy.deepcopy(record.jsonld), main_text=main_text,
        )

    @property
    def tree(self) -> lxml.html.HtmlElement | None:
        """A fresh, unmodified lxml tree of the document (None if it is not HTML or is empty)."""
        if not self._tree_cache:
            self._tree_cache.append(parse_html_text(self.text) if self.text else None)
        return self._tree_cache[0]
