"""HTML bytes to an lxml tree with the right charset: BOM, header, meta, UTF-8, then windows-1252.

Never raises on hostile or broken markup (latin-1 bytes without a charset included); None when nothing parses.
"""

from __future__ import annotations

import codecs
import re
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree

from harvester.discovery._charset import decoder, encoding_name, prescan, xml_encoding

_XML_DECL = re.compile(r"^\s*<\?xml[^>]*\?>")
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
CHARSET_PRESCAN_BYTES = 4096
"""WHATWG's prescan looks at the first 1024 bytes; real pages put <meta charset> a little later, so be lenient."""
LATE_META_BYTES = 256 * 1024
"""How far into the head a ``<meta>`` charset is looked for when the prescan found none and the bytes are not UTF-8."""


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Text and the encoding used: BOM, then the Content-Type charset, then ``<meta>``, then UTF-8.

    The one charset rule for discovery and extraction alike, so a listing and its page never read the same bytes two
    ways. The order is WHATWG's (a BOM wins over the header); labels and decoders are the Encoding Standard's
    (``_charset``: ``euc-kr`` is decoded as windows-949, ``iso-8859-1`` as windows-1252), and ``<meta>`` is found by
    HTML's prescan (a commented-out one declares nothing). Undeclared bytes that are not valid UTF-8 are decoded
    as windows-1252, as browsers do, so a latin-1 page keeps its accents; nothing here raises. The name returned is
    the Python codec underneath (``cp1252``, ``cp949``): equal names, equal text for equal bytes.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom):].decode(name, errors="replace"), name
    declared = encoding_name(_charset_param(content_type)) or prescan(body[:CHARSET_PRESCAN_BYTES])
    if declared is not None:
        codec, decode = decoder(declared)
        return decode(body), codec
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    codec, decode = decoder(_late_meta_charset(body) or "windows-1252")
    return decode(body), codec


def _late_meta_charset(body: bytes) -> str | None:
    """A ``<meta>`` charset past the prescan, in the head (before ``</head>``, within ``LATE_META_BYTES``).

    Browsers that meet one while parsing decode the page again with it (WHATWG "change the encoding"); a
    Shift_JIS page whose ``<meta>`` sat behind 6 KB of inline script was read as windows-1252, title and text.
    Asked only of bytes that are not UTF-8, so a UTF-8 page that misdeclares itself late stays readable."""
    head = body[:LATE_META_BYTES]
    lowered = head.lower()
    end = lowered.find(b"</head")
    if end >= 0:
        head, lowered = head[:end], lowered[:end]
    if b"charset" not in lowered:
        # No <meta> can declare one (``charset`` or a ``content`` naming it): only an XML declaration could, and the
        # byte-by-byte prescan, ~1.7 us a tag, cost 57 ms on a 300 KB windows-1252 page with no <head> (its body
        # scanned to LATE_META_BYTES: 1.5 ms with the regex before).
        return xml_encoding(head)
    return prescan(head)


def _charset_param(content_type: str | None) -> str | None:
    if not content_type:
        return None
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip("\"'") or None
    return None


def parse_html(body: bytes, content_type: str | None = None) -> Any:
    """The lxml.html document root, or None for an empty or unparseable body."""
    if not body or not body.strip():
        return None
    text = _XML_DECL.sub("", decode_html(body, content_type)[0], count=1)
    if not text.strip():
        return None
    try:
        return lxml.html.document_fromstring(text)
    except (etree.ParserError, ValueError):
        return None


HTML_SPACE = " \t\n\f\r"
"""What HTML strips around an attribute's URL: ``str.strip`` also takes control characters (\\x1c-\\x1f, \\x85)."""

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ufffd]")
"""A control character, or U+FFFD (what an HTML parser makes of a NUL): an href holding one is refused, never
repaired into another URL by deleting it (issue 31); ``urljoin`` silently drops tabs and line breaks."""


def absolute_http(href: str, base: str) -> str | None:
    """``href`` resolved against ``base`` when the result is http(s) with a host; else None (also for an href
    holding a control character)."""
    href = href.strip(HTML_SPACE)
    if not href:
        return None
    if _plain(href):
        # A page's links are mostly root-relative or absolute and plain: joining them is concatenation, and
        # ``urljoin`` (two parses and an unparse, ~a fifth of a page's link work) gives the same string for them
        # (tests/discovery/test_listings.py proves it on generated hrefs). Anything else takes the general path.
        parsed, origin = _base(base)
        if href[0] == "/":
            if origin and href[1:2] != "/" and "/." not in href.partition("?")[0].partition("#")[0]:
                return origin + href
        elif parsed and _ABSOLUTE.match(href) is not None:
            return href  # what ``urljoin`` returns for it: as written, or parsed and unparsed to the same
    return joined_http(href, base)


def joined_http(href: str, base: str) -> str | None:
    """``absolute_http`` by ``urljoin`` alone, for a stripped, non-empty ``href``: the general path."""
    if _CONTROL.search(href) is not None:
        return None
    try:
        url = urljoin(base, href)
    except ValueError:
        return None
    lowered = url[:8].lower()
    if not lowered.startswith(("http://", "https://")):
        return None
    rest = url.split("//", 1)[1] if "//" in url else ""
    if not rest or rest[0] in "/?#":
        return None
    return url if url.isascii() or has_utf8_form(url) else None


_ABSOLUTE = re.compile(r"https?://[^/?#\[\]]+(?:[/?#]|$)")
"""An absolute http(s) href (scheme in lower case) with a host and no IPv6 brackets (which ``urlsplit`` checks)."""


def _plain(href: str) -> bool:
    """Printable ASCII with nothing ``urljoin`` would rewrite: no white space or controls (stripped or dropped),
    no ``;`` (a path parameter, dropped when empty), no empty query or fragment (``?`` or ``#`` with nothing
    after it, which an unparse drops)."""
    return (
        href.isascii() and href.isprintable() and " " not in href and ";" not in href and "?#" not in href
        and href[-1] not in "?#"
    )


@lru_cache(maxsize=512)
def _base(base: str) -> tuple[bool, str]:
    """(whether ``urljoin`` can parse ``base``, its ``scheme://netloc`` when http(s) with a host, else "")."""
    try:
        parts = urlsplit(base)
    except ValueError:
        return False, ""
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return True, ""
    return True, f"{parts.scheme}://{parts.netloc}"


def has_utf8_form(text: str) -> bool:
    """False for text holding a lone surrogate (a JSON string may carry "\\ud800"): it has no UTF-8 form, so it
    is no URL, and a database or an HTTP request refuses it with an exception rather than a verdict."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def document_base(root: Any, base_url: str) -> str:
    """The page's ``<base href>`` resolved against its URL (HTML: the first base element with href wins)."""
    for el in root.iter("base"):
        href = (el.get("href") or "").strip(HTML_SPACE)
        if href:
            return absolute_http(href, base_url) or base_url
    return base_url
