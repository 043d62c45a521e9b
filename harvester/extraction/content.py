"""The main content of a page: boilerplate (navigation, headers, footers, asides, cookie banners) stripped, the
densest text container found, its text returned: what the content hash is computed over, so a changed sidebar is
no change."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Iterator

import lxml.etree
import lxml.html

from harvester.extraction.model import MAX_ELEMENTS

_CONTAINERS = frozenset({"div", "section", "article", "main", "td", "body", "ul", "ol", "dl", "table", "tbody"})


def elements(root: lxml.html.HtmlElement, *tags: str) -> Iterator[lxml.html.HtmlElement]:
    for count, element in enumerate(root.iter(*tags)):
        if count >= MAX_ELEMENTS:
            return
        if isinstance(element, lxml.html.HtmlElement):
            yield element


def normalized_text(text: str | None) -> str:
    """NFC with whitespace runs collapsed to one space (str.split: every Unicode whitespace, and fast)."""
    if not text:
        return ""
    if not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


_TEXT_BLOCKS = frozenset({"p", "pre", "blockquote", "td", "li", "dd", "h1", "h2", "h3", "h4", "h5", "h6"})

_BOILERPLATE_TOKEN = re.compile(
    r"(?:^|[\s_-])(?:ads?|advert\w*|sponsor\w*|banner|cookie\w*|consent|gdpr|promo\w*|share|sharing|social|"
    r"newsletter|subscribe|popup|modal|sidebar|widget|breadcrumbs?|skip-?link|related|recommend\w*|"
    r"comments?|disqus|outbrain|taboola|timestamp|clock|ticker)(?:$|[\s_-])",
    re.IGNORECASE,
)


BOILERPLATE_ROLES = frozenset(
    {"navigation", "banner", "contentinfo", "complementary", "search", "dialog", "alertdialog", "menu",
     "menubar", "toolbar", "alert", "status", "marquee", "timer"}
)


BOILERPLATE_TAGS = (
    "script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "object",
    "embed", "svg", "math", "canvas", "button", "select", "textarea", "input", "dialog", "menu", "video", "audio",
)


# --- main content -------------------------------------------------------------------------------------------


def main_content_text(root: lxml.html.HtmlElement) -> str:
    """The normalized text of the page's main content: what the content hash is computed over.

    Boilerplate (scripts, chrome, forms, ads, comments) is dropped first; then ``<main>``/``role=main``, else
    the ``<article>``(s), else the densest text block, else the whole body. MUTATES ``root``.
    """
    _strip_boilerplate(root)
    body = next(elements(root, "body"), root)
    chosen = _landmark(body)
    if chosen is None:
        chosen = _densest(body)
    return normalized_text(" ".join(_texts(chosen)))


def _strip_boilerplate(root: lxml.html.HtmlElement) -> None:
    doomed = list(elements(root, *BOILERPLATE_TAGS))
    seen = set(doomed)
    for element in elements(root):
        if element in seen:
            continue
        role = (element.get("role") or "").strip().lower()
        names = f"{element.get('class') or ''} {element.get('id') or ''}"
        if (
            role in BOILERPLATE_ROLES
            or element.get("hidden") is not None
            or (element.get("aria-hidden") or "").strip().lower() == "true"
            or (names != " " and _BOILERPLATE_TOKEN.search(names))  # most elements have neither: no search
        ) and element.tag not in ("html", "body", "main", "article"):
            doomed.append(element)
    for element in doomed:
        if element.getparent() is not None:
            element.drop_tree()  # keeps the element's tail text, which belongs to the parent


def _landmark(body: lxml.html.HtmlElement) -> lxml.html.HtmlElement | None:
    mains = [e for e in elements(body, "main") if not _has_ancestor(e, body, "main")]
    mains += [e for e in elements(body) if (e.get("role") or "").strip().lower() == "main" and e.tag != "main"]
    if mains:
        return mains[0] if len(mains) == 1 else max(mains, key=_text_len)
    articles = [e for e in elements(body, "article") if not _has_ancestor(e, body, "article")]
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
    for element in elements(body):
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
    return len(normalized_text(element.text_content()))
