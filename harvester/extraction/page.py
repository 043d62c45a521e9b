"""What is kept from a fetched page: metadata, a main-content hash, JSON-LD, outlinks; and the user's hook.

Pure and synchronous: bytes in, a ``PageRecord`` out. Never fetches, never speaks SQL, and never lets a hostile
document (huge, deeply nested, mis-declared charset) or a failing user hook take the harvest down.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

import lxml.etree
import lxml.html

from harvester.discovery._html import decode_html, parse_html
from harvester.discovery.listings import PageLinks, apply_robots_header, extract_links, links_of
from harvester.extraction.content import elements, main_content_text, normalized_text
from harvester.extraction.hook import robots_directives, with_hook
from harvester.extraction.model import (
    HTML_TYPES,
    MAX_DESCRIPTION_CHARS,
    MAX_JSONLD_BLOCKS,
    MAX_JSONLD_BYTES,
    MAX_LINKS,
    MAX_TITLE_CHARS,
    Extracted,
    ExtractorHook,
    host_of,
    parse_html_text,
    without_surrogates,
)
from harvester.fetch.robots import robots_token
from harvester.records import ErrorClass, FetchResult, PageRecord
from harvester.settings import Settings

logger = logging.getLogger(__name__)


# Elements that are never main content: code, chrome, navigation, forms, embedded documents.
# ARIA landmark roles that mark chrome rather than content (WAI-ARIA 1.2 §5.3.4).
# class/id tokens of ads, cookie banners, share bars, widgets (readability's "unlikely candidates", narrowed
# to whole tokens so that e.g. "header-image" inside an article is not caught by "ad").
# Blocks whose direct text counts towards their container's density score.
_LANG_TAG = re.compile(r"^[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*$")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a surrogate (a pair's half, or a lone one): the blocks that may need ``without_surrogates``."""
_LINK_CANONICAL = re.compile(r"""<\s*([^>]*)\s*>\s*((?:;\s*[^,]*)*)""")



# --- the entry point ----------------------------------------------------------------------------------------


def extract_page(
    result: FetchResult, *, settings: Settings, hook: ExtractorHook | None = None, user_agent: str | None = None
) -> Extracted:
    """The record kept for one successful fetch (2xx with a body), and its outlinks.

    Never raises for anything the page contains. A raising or misbehaving ``hook`` gives an ``Extracted``
    with ``error_class=HOOK_FAILED``; every other field is still filled.
    """
    body = result.body or b""
    content_type = result.content_type or _header(result.headers, "content-type")
    mime = _mime(content_type)
    final_url = result.final_url or result.url
    fields = _Fields(
        final_url=final_url, status=result.status if result.status is not None else 200, content_type=content_type,
        body=body, etag=result.etag or _header(result.headers, "etag"),
        last_modified=result.last_modified or _header(result.headers, "last-modified"),
        canonical_url=_canonical_from_link_header(_header(result.headers, "link"), final_url),
    )
    allowed = {_mime(kind) for kind in settings.http.allowed_content_types}
    is_html = (mime is None and _looks_like_html(body)) or (
        mime is not None and (mime in HTML_TYPES or (mime in allowed and mime.endswith(("html", "+xml"))))
    )
    # the profile's User-Agent, when it names its own; the explicit robots.product_token over both
    token = robots_token(user_agent or settings.http.user_agent, settings.robots)
    if not is_html:
        record = fields.headers_only(result, token, hashlib.sha256(body).hexdigest())
        return with_hook(Extracted(page=record), result, hook, text="", encoding="", main_text="")
    text, encoding = decode_html(body, content_type)
    tree = parse_html_text(text, for_extraction=True)
    if tree is None:
        record = replace(fields.headers_only(result, token, hashlib.sha256(b"").hexdigest()), encoding=encoding)
        return with_hook(Extracted(page=record, encoding=encoding), result, hook, text=text, encoding=encoding,
                         main_text="")
    try:
        extracted, main_text = _from_html(result, tree, fields, token, encoding)
    except Exception as exc:  # a page the extraction cannot read must not end the run
        # A defect of ours that a hostile page found (a lone surrogate once took every run down here): the page is
        # kept as its headers and bytes say, the class of the fault logged, and the harvest goes on.
        logger.warning("extraction of %s failed, kept with its headers and bytes only: %s: %s", final_url,
                       type(exc).__name__, str(exc)[:300], exc_info=exc,
                       extra={"host": host_of(final_url), "error_class": ErrorClass.BAD_CONTENT.value})
        record = replace(fields.headers_only(result, token, hashlib.sha256(body).hexdigest()), encoding=encoding)
        return with_hook(Extracted(page=record, encoding=encoding), result, hook, text=text, encoding=encoding,
                         main_text="")
    return with_hook(extracted, result, hook, text=text, encoding=encoding, main_text=main_text)


@dataclass(frozen=True, slots=True)
class _Fields:
    """What a record takes from the response itself, HTML or not."""

    final_url: str
    status: int
    content_type: str | None
    body: bytes
    etag: str | None
    last_modified: str | None
    canonical_url: str | None
    """From a ``Link: <...>; rel=canonical`` header; a page's own ``<link rel=canonical>`` wins over it."""

    def headers_only(self, result: FetchResult, token: str, content_hash: str) -> PageRecord:
        """The record of a body that is not (readable) HTML: what the headers say, the bytes' hash."""
        return PageRecord(
            final_url=self.final_url, status=self.status, content_type=self.content_type, content_hash=content_hash,
            body=self.body, etag=self.etag, last_modified=self.last_modified, canonical_url=self.canonical_url,
            language=_language_tag(_header(result.headers, "content-language")),
            robots=robots_directives(apply_robots_header(PageLinks(), _header(result.headers, "x-robots-tag"), token)),
        )


def _from_html(
    result: FetchResult, tree: lxml.html.HtmlElement, fields: _Fields, token: str, encoding: str
) -> tuple[Extracted, str]:
    """Metadata, outlinks and the main-content hash of a parsed HTML page; and its main text (for the hook)."""
    final_url, body = fields.final_url, fields.body
    base = _base_url(tree, final_url)
    canonical = _canonical_from_html(tree, base) or fields.canonical_url
    links = apply_robots_header(
        links_of(tree, base_url=final_url),  # the one link extractor, over the tree parsed once
        _header(result.headers, "x-robots-tag"), token,
    )
    outlinks, next_pages = _outlinks(links, canonical)
    jsonld, invalid = _jsonld(tree)
    title = _title(tree)
    description = _description(tree)
    language = _language(tree, result.headers)
    main_text = main_content_text(tree)  # mutates tree: must come after everything else that reads it
    # No text at all (an image-only page): the raw bytes are the only identity there is.
    content_hash = _content_hash(main_text, title, jsonld) if main_text else hashlib.sha256(body).hexdigest()
    record = PageRecord(
        final_url=final_url, status=fields.status, content_type=fields.content_type, content_hash=content_hash,
        body=body, etag=fields.etag, last_modified=fields.last_modified, canonical_url=canonical, title=title,
        description=description, language=language, jsonld=jsonld, robots=robots_directives(links),
        encoding=encoding,
    )
    if invalid:
        logger.debug("skipped %d invalid JSON-LD blocks on %s", invalid, final_url, extra={"host": host_of(final_url)})
    extracted = Extracted(
        page=record, outlinks=outlinks, next_pages=next_pages, feeds=tuple(links.feeds), encoding=encoding,
        jsonld_invalid=invalid, main_text_chars=len(main_text), robots_nofollow=links.robots_nofollow,
        robots_noindex=links.robots_noindex,
    )
    return extracted, main_text


@dataclass(frozen=True, slots=True)
class ListingRead:
    """A listing page as the listing crawl reads it: its links, and the metadata its stored version carries."""

    links: PageLinks
    title: str | None = None
    description: str | None = None
    language: str | None = None
    jsonld: list[Any] = field(default_factory=list)


def read_listing(body: bytes, *, base_url: str, content_type: str | None, headers: Mapping[str, str]) -> ListingRead:
    """A listing page's links (``extract_links``) and, from the same parse, its title, description, language and
    JSON-LD, read as ``extract_page`` reads a detail page's. The listing crawl stores listing pages without
    extraction, and their exported rows had title and language null for a page with ``<title>`` and
    ``<html lang>`` (stranger47), where null means a value the page did not give. Never raises on the page."""
    root = parse_html(body, content_type)
    links = links_of(root, base_url=base_url)
    if not isinstance(root, lxml.html.HtmlElement):
        return ListingRead(links, language=_language_tag(_header(headers, "content-language")))
    jsonld, _ = _jsonld(root)
    return ListingRead(links, title=_title(root), description=_description(root),
                       language=_language(root, headers), jsonld=jsonld)


# --- parsing and metadata -----------------------------------------------------------------------------------


def _cap(text: str, limit: int) -> str | None:
    return text[:limit] or None


def _http_url(base: str, href: str | None) -> str | None:
    if not href:
        return None
    try:
        url = urljoin(base, href.strip())
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # e.g. an unbalanced IPv6 literal
        return None
    return url if scheme in ("http", "https") else None


def _base_url(root: lxml.html.HtmlElement, final_url: str) -> str:
    for base in elements(root, "base"):
        if base.get("href") is None:
            continue
        # HTML: only the first <base href> counts
        return _http_url(final_url, base.get("href")) or final_url
    return final_url


def _rel(element: lxml.html.HtmlElement) -> set[str]:
    return set((element.get("rel") or "").lower().split())


def _canonical_from_html(root: lxml.html.HtmlElement, base: str) -> str | None:
    for link in elements(root, "link"):
        if "canonical" in _rel(link):
            return _http_url(base, link.get("href"))
    return None


def _canonical_from_link_header(value: str | None, base: str) -> str | None:
    """RFC 8288 ``Link: <url>; rel="canonical"`` (RFC 6596), used when the HTML has no canonical link."""
    if not value:
        return None
    for match in _LINK_CANONICAL.finditer(value):
        target, params = match.group(1), match.group(2)
        for param in params.split(";"):
            key, _, rel = param.partition("=")
            if key.strip().lower() == "rel" and "canonical" in rel.strip().strip("\"'").lower().split():
                return _http_url(base, target)
    return None


def _title(root: lxml.html.HtmlElement) -> str | None:
    for element in elements(root, "title"):
        title = normalized_text(element.text_content())
        if title:
            return _cap(title, MAX_TITLE_CHARS)
    return _cap(_meta(root, "og:title"), MAX_TITLE_CHARS)


def _description(root: lxml.html.HtmlElement) -> str | None:
    for name in ("description", "og:description", "twitter:description"):
        value = _meta(root, name)
        if value:
            return _cap(value, MAX_DESCRIPTION_CHARS)
    return None


def _meta(root: lxml.html.HtmlElement, name: str) -> str:
    for meta in elements(root, "meta"):
        key = (meta.get("name") or meta.get("property") or "").strip().lower()
        if key == name:
            value = normalized_text(meta.get("content"))
            if value:
                return value
    return ""


def _language(root: lxml.html.HtmlElement, headers: Mapping[str, str]) -> str | None:
    """html lang (or xml:lang), then ``<meta http-equiv=content-language>``, then the Content-Language header."""
    candidates = [root.get("lang"), root.get("{http://www.w3.org/XML/1998/namespace}lang"), root.get("xml:lang")]
    for meta in elements(root, "meta"):
        if (meta.get("http-equiv") or "").strip().lower() == "content-language":
            candidates.append(meta.get("content"))
    candidates.append(_header(headers, "content-language"))
    for candidate in candidates:
        tag = _language_tag(candidate)
        if tag:
            return tag
    return None


def _language_tag(value: str | None) -> str | None:
    """The first BCP 47-shaped tag of a value like ``en-US``, ``en_GB``, ``de, en``; None for junk."""
    if not value:
        return None
    first = value.split(",")[0].strip().replace("_", "-")
    return first if _LANG_TAG.match(first) and len(first) <= 35 else None


def _jsonld(root: lxml.html.HtmlElement) -> tuple[list[Any], int]:
    blocks: list[Any] = []
    invalid = 0
    for script in elements(root, "script"):
        kind = (script.get("type") or "").split(";")[0].strip().lower()
        if kind != "application/ld+json":
            continue
        if len(blocks) >= MAX_JSONLD_BLOCKS:
            invalid += 1
            continue
        raw = (script.text or "").strip()
        # Some sites wrap JSON-LD in an HTML comment or CDATA marker; both are harmless to strip.
        for opener, closer in (("<!--", "-->"), ("//<![CDATA[", "//]]>"), ("<![CDATA[", "]]>")):
            if raw.startswith(opener) and raw.endswith(closer):
                raw = raw[len(opener):-len(closer)].strip()
        if not raw or len(raw) > MAX_JSONLD_BYTES:
            invalid += 1
            continue
        try:
            block = json.loads(raw, parse_constant=_reject_constant)
            if _SURROGATE_ESCAPE.search(raw):
                # "\ud83d" alone is valid JSON but no Unicode: each lone surrogate becomes U+FFFD (the block is kept,
                # as an HTML parser keeps a page holding &#xD83D;). Through the text, not a walk: no recursion.
                block = json.loads(without_surrogates(json.dumps(block, ensure_ascii=False)))
            blocks.append(block)
        except (ValueError, RecursionError):
            invalid += 1
    return blocks, invalid


def _reject_constant(name: str) -> Any:
    # NaN/Infinity are not JSON (RFC 8259 §6); PostgreSQL's json type and strict readers refuse them.
    raise ValueError(f"{name} is not valid JSON")


# --- outlinks -----------------------------------------------------------------------------------------------


def _content_hash(main_text: str, title: str | None, jsonld: list[Any]) -> str:
    """The page's identity for change and duplicate detection: its main text, and its title and structured data
    when it has them. Shop and catalogue pages often share one boilerplate description and differ only in their
    title and JSON-LD (name, SKU, price): hashed on the text alone, all but one were dropped as duplicates, and a
    changed price was no change. Navigation, ads and timestamps stay out, as before."""
    if not title and not jsonld:
        return hashlib.sha256(main_text.encode("utf-8")).hexdigest()
    structured = json.dumps(_stable(jsonld), sort_keys=True, ensure_ascii=False, default=str) if jsonld else ""
    return hashlib.sha256("\x00".join((main_text, title or "", structured)).encode("utf-8")).hexdigest()


_VOLATILE_JSONLD = frozenset((
    "datemodified", "commentcount", "interactionstatistic", "interactioncount", "userinteractioncount",
    "aggregaterating", "review", "reviews", "reviewcount", "ratingcount", "ratingvalue", "comment",
))
"""JSON-LD properties that move without the page changing (counters, ratings, a render-time dateModified): kept
out of the content hash, or most fetches would count as changes and wear down the host's lastmod truthfulness."""


def _stable(value: Any) -> Any:
    """``value`` (parsed JSON-LD) without its volatile properties, at any depth."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if str(k).lower() not in _VOLATILE_JSONLD}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def find_outlinks(body: bytes, *, base_url: str, content_type: str | None) -> PageLinks:
    """The page's links: the one link extractor of the project (``discovery.listings.extract_links``).

    Kept behind this function so the extractor can be swapped in one place. ``extract_page`` does not call it:
    it gives ``links_of`` the tree it has already parsed (a parse is ~0.25 ms of a ~4 ms page), with the same
    link rules for discovery and extraction alike.
    """
    return extract_links(body, base_url=base_url, content_type=content_type)


def _outlinks(links: PageLinks, canonical: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(outlinks, next pages): hrefs, then rel=next/pagination, then the canonical link; deduped, capped."""
    if links.robots_nofollow:
        # <meta name=robots content=nofollow>: the page asks crawlers not to follow any of its links.
        return ((canonical,) if canonical else ()), ()
    merged = dict.fromkeys([*links.links, *links.next_pages, *([canonical] if canonical else [])])
    return tuple(list(merged)[:MAX_LINKS]), tuple(links.next_pages)


# --- small helpers ------------------------------------------------------------------------------------------


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _mime(content_type: str | None) -> str | None:
    if not content_type:
        return None
    return content_type.split(";")[0].strip().lower() or None


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<!--", b"<meta", b"<title"))


