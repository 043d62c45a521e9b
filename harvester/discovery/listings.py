"""Listing pages: the links out of an HTML page (next-page links apart), and the robots directives that govern
following them. Which of those links are details or listings is ``rules.classify``'s to say.

Never fetches, never touches SQL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from harvester.discovery._html import HTML_SPACE, absolute_http, document_base, parse_html
from harvester.discovery.feeds import names_a_feed
from harvester.rules.classify import is_pagination

logger = logging.getLogger(__name__)

MAX_LINKS_PER_PAGE = 10_000
"""Links kept from one page; a page with more is hostile or a sitemap in HTML clothing."""

NEXT_WORDS = frozenset(
    (
        "next",
        "next page",
        "next »",
        "next ›",
        "next >",
        "next >>",
        "»",
        "›",
        ">",
        ">>",
        "→",
        "older",
        "older posts",
        "older entries",
        "more",
        "more posts",
        "load more",
        "suivant",
        "page suivante",
        "weiter",
        "nächste",
        "nächste seite",
        "siguiente",
        "volgende",
        "successivo",
        "próximo",
        "próxima",
        "następna",
    )
)
"""Anchor texts (lower-cased, stripped) that mean "the next page of this listing"."""

_NOT_PAGES = frozenset(("javascript:", "mailto:", "tel:", "data:", "ftp:", "sms:", "file:"))
_NOT_PAGE_PREFIXES = tuple(_NOT_PAGES)

@dataclass(slots=True)
class PageLinks:
    """What one HTML page links to, all absolute http(s) URLs (not yet canonical), in document order."""

    links: list[str] = field(default_factory=list)
    next_pages: list[str] = field(default_factory=list)
    feeds: list[str] = field(default_factory=list)
    canonical: str | None = None
    nofollow: list[str] = field(default_factory=list)
    base: str | None = None
    robots_nofollow: bool = False
    robots_noindex: bool = False
    crawler_meta: dict[str, set[str]] = field(default_factory=dict)
    """``<meta name=NAME>`` directives for one named crawler (``googlebot``, ``harvester``): ours are applied by
    ``apply_robots_header``, which knows our product token; another crawler's are not ours to obey."""


MAX_CRAWLER_METAS = 16
"""Distinct crawler names kept from one page's meta tags: a page cannot make us hold more."""

_ROBOTS_VALUED = frozenset(("unavailable_after", "max-snippet", "max-image-preview", "max-video-preview"))
"""X-Robots-Tag directives that carry a value after a colon (the colon of anything else names a crawler)."""


def apply_robots_header(page: PageLinks, value: str | None, token: str) -> PageLinks:
    """``page`` with the directives of an ``X-Robots-Tag`` header applied, as its ``<meta name=robots>`` are, and
    those of a ``<meta>`` naming our crawler.

    The header is how PDFs and HTML alike say noindex/nofollow from the server. A part ``name: directives``
    applies to that crawler only (``googlebot: nofollow``), up to the end of its header line; the rest to every
    crawler. ``token`` is ours (robots.product_token of the User-Agent). Several header lines arrive joined by
    newlines (http._headers_of), in order.
    """
    ours = page.crawler_meta.get(token.lower())
    if ours:
        _obey(page, ours)
    if not value:
        return page
    directives: set[str] = set()
    for line in value.lower().split("\n"):
        crawler: str | None = None
        for part in line.split(","):
            name, colon, rest = part.partition(":")
            if colon and name.strip() not in _ROBOTS_VALUED and " " not in name.strip():
                crawler, part = name.strip(), rest
            if crawler is None or crawler == token.lower():
                directives.add(part.strip())
    _obey(page, directives)
    return page


_DIRECTIVES = frozenset(("nofollow", "noindex", "none"))


def _obey(page: PageLinks, directives: set[str]) -> None:
    """Robots directives (of a meta tag or a header), lower-cased, onto ``page``."""
    page.robots_nofollow |= bool(directives & {"nofollow", "none"})
    page.robots_noindex |= bool(directives & {"noindex", "none"})


def extract_links(html: bytes, *, base_url: str, content_type: str | None = None) -> PageLinks:
    """Links, pagination (rel=next first, then numbered pages and "Next" anchors), feeds and rel=canonical.

    ``base_url`` is the final URL after redirects; ``<base href>`` overrides it. ``rel=nofollow`` links stay
    in ``links`` and are also listed in ``nofollow``; ``<meta name=robots content=nofollow>`` sets
    ``robots_nofollow`` (the caller decides what to follow). Never raises on broken markup or charsets.
    """
    return links_of(parse_html(html, content_type), base_url=base_url)


def links_of(root: Any, *, base_url: str) -> PageLinks:
    """``extract_links`` over a document already parsed (an lxml.html root, or None for an empty page).

    Extraction hands over the tree it parsed for the page's metadata: parsing a page costs about as much as
    everything else done with it, and twice made it the largest single cost per page. Only reads the tree.
    """
    page = PageLinks(base=base_url)
    if root is None:
        return page
    base = document_base(root, base_url)
    page.base = base
    seen: set[str] = set()
    rel_next: list[str] = []
    numbered: list[str] = []
    feeds: list[str] = []
    for el in root.iter("a", "area", "link", "meta"):
        tag = el.tag
        if tag == "meta":
            name = (el.get("name") or "").strip().lower()
            if name and (name == "robots" or name in page.crawler_meta or len(page.crawler_meta) < MAX_CRAWLER_METAS):
                directives = {part.strip() for part in (el.get("content") or "").lower().split(",")}
                if name == "robots":  # every crawler's
                    _obey(page, directives)
                elif directives & _DIRECTIVES and " " not in name:
                    page.crawler_meta.setdefault(name, set()).update(directives)
            continue
        href = el.get("href")
        if not href:
            continue
        href = href.strip(HTML_SPACE)
        if not href or href.startswith("#") or href[:11].lower().startswith(_NOT_PAGE_PREFIXES):
            continue
        rels = (el.get("rel") or "").lower().split()
        url = absolute_http(href, base)
        if url is None:
            continue
        # feed_links_in's rules, in the same walk (a second walk of every page cost ~3 % of the CPU): the hrefs
        # skipped above are never http(s), so they never were feeds either.
        if tag != "area" and url not in feeds and names_a_feed(el, href):
            feeds.append(url)
        if tag == "link":
            if "canonical" in rels and page.canonical is None:
                page.canonical = url
            if "next" in rels and url not in rel_next:
                rel_next.append(url)
            continue
        if "next" in rels and url not in rel_next:
            rel_next.append(url)
        elif _is_next_anchor(el) or is_pagination(url):
            numbered.append(url)
        if url not in seen and len(page.links) < MAX_LINKS_PER_PAGE:
            seen.add(url)
            page.links.append(url)
            if "nofollow" in rels:
                page.nofollow.append(url)
    page.next_pages = list(dict.fromkeys(rel_next + numbered))
    page.feeds = feeds
    return page


def _is_next_anchor(el: Any) -> bool:
    # An anchor with no child nodes (most of them) has its text as its whole string value: text_content() (an
    # XPath evaluation) for every anchor of every page was a tenth of the link extraction.
    text = " ".join(((el.text if len(el) == 0 else el.text_content()) or "").split()).lower()
    if text in NEXT_WORDS:
        return True
    label = (el.get("aria-label") or el.get("title") or "").strip().lower()
    return label in NEXT_WORDS or label.startswith("next page")
