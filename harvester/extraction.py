"""What is kept from a fetched page: metadata, a main-content hash, JSON-LD, outlinks; and the user's hook.

Pure and synchronous: bytes in, a ``PageRecord`` out. Never fetches, never speaks SQL, and never lets a hostile
document (huge, deeply nested, mis-declared charset) or a failing user hook take the harvest down.
"""

from __future__ import annotations

import codecs
import copy
import hashlib
import importlib
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any
from urllib.parse import urljoin, urlsplit

import lxml.etree
import lxml.html

from harvester.discovery.listings import PageLinks, apply_robots_header, extract_links
from harvester.errors import ConfigError
from harvester.fetch.robots import robots_token
from harvester.records import ErrorClass, FetchResult, PageRecord
from harvester.settings import Settings

logger = logging.getLogger(__name__)

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

MAX_HOOK_FIELDS_BYTES = 2**20
"""Serialized size allowed for the fields a user hook returns; more is a hook failure, not a silent cut."""

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})

CHARSET_PRESCAN_BYTES = 4096
"""WHATWG's prescan looks at the first 1024 bytes; real pages put <meta charset> a little later, so be lenient."""

# Elements that are never main content: code, chrome, navigation, forms, embedded documents.
BOILERPLATE_TAGS = (
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "object",
    "embed", "svg", "math", "canvas", "button", "select", "textarea", "input", "dialog", "menu", "video", "audio",
)

# ARIA landmark roles that mark chrome rather than content (WAI-ARIA 1.2 §5.3.4).
BOILERPLATE_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog", "menu",
     "menubar", "toolbar", "alert", "status", "marquee", "timer"}
)

# class/id tokens of ads, cookie banners, share bars, widgets (readability's "unlikely candidates", narrowed
# to whole tokens so that e.g. "header-image" inside an article is not caught by "ad").
_BOILERPLATE_TOKEN = re.compile(
    r"(?:^|[\s_-])(?:ads?|advert\w*|sponsor\w*|banner|cookie\w*|consent|gdpr|promo\w*|share|sharing|social|"
    r"newsletter|subscribe|popup|modal|sidebar|widget|breadcrumbs?|skip-?link|related|recommend\w*|"
    r"comments?|disqus|outbrain|taboola|timestamp|clock|ticker)(?:$|[\s_-])",
    re.IGNORECASE,
)

# Blocks whose direct text counts towards their container's density score.
_TEXT_BLOCKS = frozenset({"p", "pre", "blockquote", "td", "li", "dd", "h1", "h2", "h3", "h4", "h5", "h6"})
_CONTAINERS = frozenset({"div", "section", "article", "main", "td", "body", "ul", "ol", "dl", "table", "tbody"})

_META_CHARSET = re.compile(rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]{1,40})""", re.IGNORECASE)
_LANG_TAG = re.compile(r"^[A-Za-z]{1,8}(?:-[A-Za-z0-9]{1,8})*$")
_LINK_CANONICAL = re.compile(r"""<\s*([^>]*)\s*>\s*((?:;\s*[^,]*)*)""")

# WHATWG Encoding: labels that browsers decode as windows-1252, and declarations they ignore.
_AS_CP1252 = frozenset({"iso-8859-1", "latin-1", "latin1", "iso8859-1", "l1", "ascii", "us-ascii", "x-user-defined"})
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


ExtractorHook = Callable[["Page"], Mapping[str, Any] | None]
"""A user extractor: gets a read-only ``Page``, returns JSON-able fields (or None for none)."""


@dataclass(frozen=True, slots=True)
class Extracted:
    """What ``extract_page`` made of one fetch.

    A failed hook is a value, not an exception: ``error_class`` is ``HOOK_FAILED`` and ``error`` says why;
    ``page`` is still filled (without hook fields) so the caller can log it, but must not store it as a
    success (``revisit.classify_outcome(..., hook_error=...)`` turns it into a FAILED completion).
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
            self._tree_cache.append(_parse(self.text) if self.text else None)
        return self._tree_cache[0]


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
    status = result.status if result.status is not None else 200
    etag = result.etag or _header(result.headers, "etag")
    last_modified = result.last_modified or _header(result.headers, "last-modified")
    header_canonical = _canonical_from_link_header(_header(result.headers, "link"), final_url)

    allowed = {_mime(kind) for kind in settings.http.allowed_content_types}
    is_html = (mime is None and _looks_like_html(body)) or (
        mime is not None and (mime in HTML_TYPES or (mime in allowed and mime.endswith(("html", "+xml"))))
    )
    # the profile's User-Agent, when it names its own; the explicit robots.product_token over both
    token = robots_token(user_agent or settings.http.user_agent, settings.robots)
    header_only = apply_robots_header(PageLinks(), _header(result.headers, "x-robots-tag"), token)
    if not is_html:
        record = PageRecord(
            final_url=final_url, status=status, content_type=content_type,
            content_hash=hashlib.sha256(body).hexdigest(), body=body, etag=etag, last_modified=last_modified,
            canonical_url=header_canonical, language=_language_tag(_header(result.headers, "content-language")),
            robots=_robots_directives(header_only),
        )
        return _with_hook(Extracted(page=record), result, hook, text="", encoding="", main_text="")

    text, encoding = decode_html(body, content_type)
    tree = _parse(text)
    if tree is None:
        record = PageRecord(
            final_url=final_url, status=status, content_type=content_type,
            content_hash=hashlib.sha256(b"").hexdigest(), body=body, etag=etag, last_modified=last_modified,
            canonical_url=header_canonical, language=_language_tag(_header(result.headers, "content-language")),
            robots=_robots_directives(header_only),
        )
        return _with_hook(Extracted(page=record, encoding=encoding), result, hook, text=text, encoding=encoding,
                          main_text="")

    base = _base_url(tree, final_url)
    canonical = _canonical_from_html(tree, base) or header_canonical
    links = apply_robots_header(
        find_outlinks(body, base_url=final_url, content_type=content_type), _header(result.headers, "x-robots-tag"),
        token,
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
        final_url=final_url, status=status, content_type=content_type, content_hash=content_hash, body=body,
        etag=etag, last_modified=last_modified, canonical_url=canonical, title=title, description=description,
        language=language, jsonld=jsonld, robots=_robots_directives(links),
    )
    extracted = Extracted(
        page=record, outlinks=outlinks, next_pages=next_pages, feeds=tuple(links.feeds), encoding=encoding,
        jsonld_invalid=invalid, main_text_chars=len(main_text), robots_nofollow=links.robots_nofollow,
        robots_noindex=links.robots_noindex,
    )
    if invalid:
        logger.debug("skipped %d invalid JSON-LD blocks on %s", invalid, final_url, extra={"host": _host(final_url)})
    return _with_hook(extracted, result, hook, text=text, encoding=encoding, main_text=main_text)


# --- charset ------------------------------------------------------------------------------------------------


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Text and the encoding used: BOM, then the Content-Type charset, then ``<meta>``, then UTF-8.

    The order is WHATWG's (a BOM wins over the header). Undeclared bytes that are not valid UTF-8 are decoded as
    windows-1252, as browsers do, so a latin-1 page keeps its accents; nothing here raises.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(name, errors="replace"), name
    for declared in (_charset_param(content_type), _meta_charset(body)):
        codec = _codec(declared)
        if codec is not None:
            return body.decode(codec, errors="replace"), codec
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return body.decode("cp1252", errors="replace"), "cp1252"


def _charset_param(content_type: str | None) -> str | None:
    if not content_type:
        return None
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip("\"'") or None
    return None


def _meta_charset(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:CHARSET_PRESCAN_BYTES])
    return match.group(1).decode("ascii", errors="ignore") if match else None


def _codec(label: str | None) -> str | None:
    """A Python codec for a declared charset label, or None when unknown (the declaration is then ignored)."""
    if not label:
        return None
    label = label.strip().lower()
    if label in _AS_CP1252:
        return "cp1252"
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    # WHATWG: a <meta> claiming UTF-16 in a byte stream without a BOM is treated as UTF-8.
    return "utf-8" if name.startswith("utf-16") or name.startswith("utf-32") else name


# --- parsing and metadata -----------------------------------------------------------------------------------


def _parser() -> lxml.html.HTMLParser:
    # huge_tree=False keeps libxml2's depth (256) and text-node limits: deep nesting costs nothing extra.
    return lxml.html.HTMLParser(
        encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True, huge_tree=False,
        default_doctype=False,
    )


def _parse(text: str) -> lxml.html.HtmlElement | None:
    data = text.encode("utf-8", errors="replace")[:MAX_PARSE_BYTES]
    if not data.strip():
        return None
    try:
        root = lxml.html.document_fromstring(data, parser=_parser())
    except (lxml.etree.ParserError, lxml.etree.XMLSyntaxError, ValueError):
        return None
    return root if isinstance(root, lxml.html.HtmlElement) else None


def _elements(root: lxml.html.HtmlElement, *tags: str) -> Iterator[lxml.html.HtmlElement]:
    for count, element in enumerate(root.iter(*tags)):
        if count >= MAX_ELEMENTS:
            return
        if isinstance(element, lxml.html.HtmlElement):
            yield element


def _norm(text: str | None) -> str:
    """NFC with whitespace runs collapsed to one space (str.split: every Unicode whitespace, and fast)."""
    if not text:
        return ""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


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
    for base in _elements(root, "base"):
        if base.get("href") is None:
            continue
        # HTML: only the first <base href> counts
        return _http_url(final_url, base.get("href")) or final_url
    return final_url


def _rel(element: lxml.html.HtmlElement) -> set[str]:
    return set((element.get("rel") or "").lower().split())


def _canonical_from_html(root: lxml.html.HtmlElement, base: str) -> str | None:
    for link in _elements(root, "link"):
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
    for element in _elements(root, "title"):
        title = _norm(element.text_content())
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
    for meta in _elements(root, "meta"):
        key = (meta.get("name") or meta.get("property") or "").strip().lower()
        if key == name:
            value = _norm(meta.get("content"))
            if value:
                return value
    return ""


def _language(root: lxml.html.HtmlElement, headers: Mapping[str, str]) -> str | None:
    """html lang (or xml:lang), then ``<meta http-equiv=content-language>``, then the Content-Language header."""
    candidates = [root.get("lang"), root.get("{http://www.w3.org/XML/1998/namespace}lang"), root.get("xml:lang")]
    for meta in _elements(root, "meta"):
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
    for script in _elements(root, "script"):
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
            blocks.append(json.loads(raw, parse_constant=_reject_constant))
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

    Kept behind this function so the extractor can be swapped in one place. It parses the bytes again
    (about a third of a millisecond for a 20 KB page), which buys one set of link rules for discovery and
    extraction alike.
    """
    return extract_links(body, base_url=base_url, content_type=content_type)


def _outlinks(links: PageLinks, canonical: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(outlinks, next pages): hrefs, then rel=next/pagination, then the canonical link; deduped, capped."""
    if links.robots_nofollow:
        # <meta name=robots content=nofollow>: the page asks crawlers not to follow any of its links.
        return ((canonical,) if canonical else ()), ()
    merged = dict.fromkeys([*links.links, *links.next_pages, *([canonical] if canonical else [])])
    return tuple(list(merged)[:MAX_LINKS]), tuple(links.next_pages)


# --- main content -------------------------------------------------------------------------------------------


def main_content_text(root: lxml.html.HtmlElement) -> str:
    """The normalized text of the page's main content: what the content hash is computed over.

    Boilerplate (scripts, chrome, forms, ads, comments) is dropped first; then ``<main>``/``role=main``, else
    the ``<article>``(s), else the densest text block, else the whole body. MUTATES ``root``.
    """
    _strip_boilerplate(root)
    body = next(_elements(root, "body"), root)
    chosen = _landmark(body)
    if chosen is None:
        chosen = _densest(body)
    return _norm(" ".join(_texts(chosen)))


def _strip_boilerplate(root: lxml.html.HtmlElement) -> None:
    doomed = list(_elements(root, *BOILERPLATE_TAGS))
    seen = set(doomed)
    for element in _elements(root):
        if element in seen:
            continue
        role = (element.get("role") or "").strip().lower()
        if (
            role in BOILERPLATE_ROLES
            or element.get("hidden") is not None
            or (element.get("aria-hidden") or "").strip().lower() == "true"
            or _BOILERPLATE_TOKEN.search(f"{element.get('class') or ''} {element.get('id') or ''}")
        ) and element.tag not in ("html", "body", "main", "article"):
            doomed.append(element)
    for element in doomed:
        if element.getparent() is not None:
            element.drop_tree()  # keeps the element's tail text, which belongs to the parent


def _landmark(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    mains = [e for e in _elements(body, "main") if not _has_ancestor(e, body, "main")]
    mains += [e for e in _elements(body) if (e.get("role") or "").strip().lower() == "main" and e.tag != "main"]
    if mains:
        return mains[0] if len(mains) == 1 else max(mains, key=_text_len)
    articles = [e for e in _elements(body, "article") if not _has_ancestor(e, body, "article")]
    if len(articles) == 1:
        return articles[0]
    if len(articles) > 1:
        # Several top-level articles (a listing): their closest common container holds them all.
        return _common_ancestor(articles, body)
    return None


def _has_ancestor(element: lxml.html.HtmlElement, stop: lxml.html.HtmlElement, tag: str) -> bool:
    parent = element.getparent()
    while parent is not None and parent is not stop:
        if parent.tag == tag:
            return True
        parent = parent.getparent()
    return False


def _common_ancestor(elements: list[lxml.html.HtmlElement], body: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    path: list[lxml.html.HtmlElement] = []
    node: lxml.html.HtmlElement | None = elements[0]
    while node is not None:
        path.append(node)
        node = node.getparent()
    candidates = set(path)
    for element in elements[1:]:
        chain = set()
        node = element
        while node is not None:
            chain.add(node)
            node = node.getparent()
        candidates &= chain
    for node in path:
        if node in candidates:
            return node
    return body


def _densest(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """The container with the most paragraph-like text below it (readability's scoring, simplified)."""
    scores: dict[lxml.html.HtmlElement, float] = {}
    for element in _elements(body):
        own = _chars(element.text) + sum(_chars(child.tail) for child in element)
        if not own or (element.tag not in _TEXT_BLOCKS and element.tag not in _CONTAINERS):
            continue
        weight = float(own)
        node: lxml.html.HtmlElement | None = element if element.tag in _CONTAINERS else element.getparent()
        for share in (1.0, 0.5):
            if node is None:
                break
            scores[node] = scores.get(node, 0.0) + weight * share
            node = node.getparent()
    if not scores:
        return body
    best = max(scores, key=lambda element: scores[element])
    return best if scores[best] >= 25 else body


def _chars(text: str | None) -> int:
    return len(text.strip()) if text else 0


def _texts(element: lxml.html.HtmlElement) -> Iterable[str]:
    # itertext over the element only: its own tail is outside the content.
    yield from element.itertext()


def _text_len(element: lxml.html.HtmlElement) -> int:
    return len(_norm(element.text_content()))


# --- the user hook ------------------------------------------------------------------------------------------


def load_hook(spec: str) -> ExtractorHook:
    """The callable named ``module:function`` in a site profile's ``extractor`` field.

    Raises ``ConfigError`` naming the field and the value when the module cannot be imported, the function is
    missing, or it is not callable: a bad profile must fail before the harvest starts, not per page.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"site profile field 'extractor'={spec!r}: expected 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import-time failure of user code is a configuration problem
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: cannot import module {module_name!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        hook = getattr(module, attr)
    except AttributeError:
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: module {module_name!r} has no attribute {attr!r}"
        ) from None
    if not callable(hook):
        raise ConfigError(
            f"site profile field 'extractor'={spec!r}: {attr!r} is a {type(hook).__name__}, not a callable"
        )
    checked: ExtractorHook = hook
    return checked


def resolve_hook(spec: str | None, hook: ExtractorHook | None = None) -> ExtractorHook | None:
    """The extractor of a run: a callable handed to ``harvest()``/``extract()`` or the profile's ``module:function``.

    A callable cannot live in the profile (the profile is stored with each run and serialised to Prefect
    parameters, so it holds the importable name); library callers may pass the function itself instead. Both
    at once is ambiguous, so it is refused rather than one silently ignored.
    """
    if hook is None:
        return load_hook(spec) if spec else None
    if spec:
        raise ConfigError(
            f"site profile field 'extractor'={spec!r} and an extractor callable were both given: pass one of them"
        )
    if not callable(hook):
        raise ConfigError(f"extractor: a {type(hook).__name__} is not a callable (it is called with each Page)")
    return hook


def _robots_directives(links: PageLinks) -> tuple[str, ...]:
    """What a page's robots directives asked of us, as stored with it and exported (``noindex``, ``nofollow``)."""
    return (("noindex",) if links.robots_noindex else ()) + (("nofollow",) if links.robots_nofollow else ())


def _with_hook(
    extracted: Extracted, result: FetchResult, hook: ExtractorHook | None, *, text: str, encoding: str, main_text: str
) -> Extracted:
    if hook is None:
        return extracted
    page = Page.build(result, extracted.page, text=text, encoding=encoding, main_text=main_text)
    try:
        returned = hook(page)
    except Exception as exc:  # a user hook may raise anything; the page fails, the harvest goes on
        message = f"extractor hook raised {type(exc).__name__}: {exc}"[:1000]
        logger.warning("%s on %s", message, page.final_url,
                       extra={"host": _host(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, message)
    fields, problem = _json_fields(returned)
    if problem is not None:
        logger.warning("%s on %s", problem, page.final_url,
                       extra={"host": _host(page.final_url), "error_class": ErrorClass.HOOK_FAILED.value})
        return _failed(extracted, problem)
    return replace(extracted, page=replace(extracted.page, fields=fields))


def _json_fields(returned: object) -> tuple[dict[str, Any], str | None]:
    if returned is None:
        return {}, None
    if not isinstance(returned, Mapping):
        return {}, f"extractor hook returned {type(returned).__name__}, expected a dict of JSON-able fields"
    if not all(isinstance(key, str) for key in returned):
        return {}, "extractor hook returned a dict with non-string keys; JSON objects need string keys"
    try:
        serialized = json.dumps(dict(returned), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return {}, f"extractor hook returned fields that are not JSON-able: {exc}"[:1000]
    if len(serialized.encode("utf-8")) > MAX_HOOK_FIELDS_BYTES:
        return {}, f"extractor hook returned {len(serialized)} characters of fields; the cap is {MAX_HOOK_FIELDS_BYTES}"
    fields: dict[str, Any] = json.loads(serialized)  # a plain copy: tuples become lists, no shared objects
    return fields, None


def _failed(extracted: Extracted, message: str) -> Extracted:
    return replace(extracted, error_class=ErrorClass.HOOK_FAILED, error=message)


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


def _host(url: str) -> str:
    try:
        return urlsplit(url).netloc
    except ValueError:
        return ""


__all__ = [
    "Extracted",
    "ExtractorHook",
    "Page",
    "decode_html",
    "extract_page",
    "find_outlinks",
    "load_hook",
    "main_content_text",
    "resolve_hook",
]
