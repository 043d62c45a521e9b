"""The canonical form of a URL (the frontier's key) and its fetch form (what is requested), per RFC 3986.

Pure functions: never fetches, never touches SQL. Every URL that enters the frontier passes ``canonicalize``
then ``scope.UrlFilter.check``; bump ``CANONICAL_VERSION`` whenever the canonical form changes.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from functools import lru_cache
from urllib.parse import quote, unquote_to_bytes, urlsplit

import idna

from harvester.records import http_origin
from harvester.settings import UrlSettings

logger = logging.getLogger(__name__)

CANONICAL_VERSION: int = 3
"""Stored with every URL: a frontier keyed by an older canonical form is re-keyed explicitly, never silently.

3: userinfo dropped; ``[``, ``]`` and a ``%`` that starts no escape always percent-encoded; a raw control
character refuses the URL wherever it stands. Only URLs holding one of those changed key. Percent-encoded hosts
(decoded, then IDNA: issue 31) were refused before, so they gained a key and none changed: still 3."""

DEFAULT_PORTS = {"http": 80, "https": 443}


# RFC 3986 §2.3: unreserved characters; their percent-encodings are decoded (§6.2.2.2).
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = "0123456789abcdefABCDEF"
# Characters kept literally when non-ASCII or unsafe characters are percent-encoded (UTF-8, as browsers do).
_PATH_SAFE = "/!$&'()*+,;=:@%~"
_QUERY_SAFE = "/?!$&'()*+,;=:@%~"
# Every printable ASCII character RFC 3986 allows in no path or query (§3.3, §3.4): always percent-encoded,
# whatever else the component holds, so "/a[1]" and "/a[1] b" take one rule ("[" and "]" are legal only around
# an IP literal, §3.2.2). "%" is kept here and judged by ``_normalize_escapes``.
_UNSAFE = re.compile(r'[ "<>\\^`{|}\[\]]')
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# A URL that needs no more than host lower-casing, port and query filtering: http(s), no userinfo, fragment,
# escapes or unsafe characters (dot segments are checked apart). Most sitemap locs and many links take this
# path, which is what makes 200k URLs/s; tests prove it agrees with the general path.
_FAST = re.compile(
    r"(https?://)([A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?)(?::([0-9]{1,5}))?(/[A-Za-z0-9\-._~!$&'()*+,;=:@/]*)?"
    r"(?:\?([A-Za-z0-9\-._~!$&'()*+,;=:@/?]*))?"
)
_HOST_OK = re.compile(r"[a-z0-9._-]+|\[[0-9a-f:.]+\]")


class UnusableHost(ValueError):
    """A percent-encoded host that decodes to no host name; the message says why (``host_refusal``)."""


_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_NOT_IN_HOST = re.compile(r"[\x00-\x20\x7f-\x9f%/?#\[\]@:\\<>\"{}|^`]")
"""What a decoded host name may not hold: controls and space, the delimiters of a URL's authority (RFC 3986
§3.2: ``/ ? # [ ] @ :``), ``%`` (no second decoding) and what no URL holds raw (§2)."""


def decoded_host(host: str) -> str:
    """A registered name written with percent-escapes, decoded (RFC 3986 §3.2.2: "%c3%a4" as JavaScript's
    ``encodeURI`` writes "ä", "example%2Ecom"): the escapes name UTF-8 octets, and the result is a host name for
    IDNA to encode like any other. Raises ``UnusableHost`` naming the reason when it decodes to no host name."""
    if _ESCAPE.sub("", host).count("%"):
        raise UnusableHost(f"host {host!r}: a '%' that starts no percent-escape")
    try:
        name = unquote_to_bytes(host).decode("utf-8")  # raw non-ASCII beside escapes: taken as its UTF-8
    except UnicodeDecodeError:
        raise UnusableHost(f"host {host!r}: its percent-escapes are not UTF-8") from None
    bad = _NOT_IN_HOST.search(name)
    if bad is not None:
        raise UnusableHost(f"host {host!r} decodes to {name!r}, which holds {bad.group(0)!r}: no host name does")
    return name


def host_refusal(url: str) -> str | None:
    """Why ``url``'s percent-encoded host is unusable (what ``canonicalize`` then refuses it for), or None."""
    try:
        hostport = urlsplit(url.strip()).netloc.rpartition("@")[2]
    except ValueError as exc:
        return str(exc)
    host = hostport.partition(":")[0] if not hostport.startswith("[") else ""
    if "%" not in host:
        return None
    try:
        name = decoded_host(host)
        if not name.isascii():
            idna.encode(name, uts46=True, transitional=False)
    except UnusableHost as exc:
        return str(exc)
    except (UnicodeError, ValueError) as exc:  # idna's errors: a name IDNA refuses (a symbol, a mapped-away one)
        return f"host {host!r} decodes to {name!r}, which IDNA refuses: {exc}"
    return None


def _normalize_escapes(text: str) -> str:
    """Upper-case percent-escape hex digits and decode escaped unreserved characters (RFC 3986 §6.2.2); a "%"
    that starts no escape is itself escaped ("%25"), as a valid URI must have it (§2.4): "/a%zz" and "/a%25zz"
    are one page to every server that decodes the path."""
    if "%" not in text:
        return text
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "%" and i + 2 < n and text[i + 1] in _HEX and text[i + 2] in _HEX:
            decoded = chr(int(text[i + 1 : i + 3], 16))
            out.append(decoded if decoded in _UNRESERVED else "%" + text[i + 1 : i + 3].upper())
            i += 3
        else:
            out.append("%25" if ch == "%" else ch)
            i += 1
    return "".join(out)


def _encode_unsafe(text: str, safe: str) -> str:
    """Percent-encode non-ASCII (as UTF-8) and unsafe ASCII; existing escapes are kept."""
    if text.isascii() and _UNSAFE.search(text) is None:
        return text
    return quote(text, safe=safe)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, on an absolute path."""
    if "." not in path:
        return path
    segments = path.split("/")
    if not any(seg in (".", "..") for seg in segments):
        return path
    out: list[str] = []
    for seg in segments[1:]:
        if seg == ".":
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    # A trailing "." or ".." names a directory: keep the trailing slash.
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


class Canonicalizer:
    """``canonicalize`` with its settings pre-digested; build one per crawl (or let ``canonicalize`` cache it)."""

    __slots__ = ("_cached", "_drop")

    def __init__(self, settings: UrlSettings, *, cache_size: int = 16_384) -> None:
        self._drop = frozenset(name.lower() for name in (*settings.tracking_params, *settings.presentation_params))
        # Only the general path is cached: links repeat on every page of a site (navigation, footers), while the
        # fast path is cheaper than a cache lookup and sitemap locs never repeat (caching them only costs memory).
        self._cached = lru_cache(maxsize=cache_size)(self.slow)

    def __call__(self, url: str, base: str | None = None) -> str | None:
        if base is not None and url[:8].lower().startswith(("http://", "https://")):
            base = None
        return self._canonicalize(url, base)

    def _canonicalize(self, url: str, base: str | None) -> str | None:
        url = url.strip()
        if base is not None and url.startswith("/") and not url.startswith("//"):
            # Root-relative (the commonest link form): the base's origin plus the path, as RFC 3986 §5.2.2 does.
            origin = http_origin(base)
            if origin is not None:
                url, base = origin + url, None
        if base is None:
            match = _FAST.fullmatch(url)
            if match is not None:
                scheme, host, port, path, query = match.groups()
                host = host.lower()
                path = path or "/"
                if port is not None:
                    number = int(port)
                    if number > 65535:
                        return None  # as the general path: no such port
                    if number != (80 if len(scheme) == 7 else 443):
                        host = f"{host}:{number}"
                if "xn--" not in host and "/." not in path:
                    if query:
                        query = self._query_plain(query)
                        return f"{scheme}{host}{path}?{query}" if query else f"{scheme}{host}{path}"
                    return f"{scheme}{host}{path}"
        return self._cached(url, base)

    def fetch_form(self, url: str, base: str | None = None) -> str | None:
        """The URL to request for ``url``: its canonical key with the query in the order the site wrote it.

        The key sorts the query so two spellings of a page are one frontier entry, but servers may read
        parameters in order (RFC 3986 gives the query no structure), and robots.txt rules are written against
        the URL as published (RFC 9309 §2.2.2). Everything else is the key's normalization: RFC 3986 §6.2.2
        (case, percent-encoding, dot segments) and §6.2.3 (default port, empty path), fragment dropped; the
        tracking and presentation parameters the key declares meaningless are not sent either.
        """
        key = self(url, base)
        if key is None:
            return None
        path, mark, query = key.partition("?")
        if not mark or "&" not in query:
            return key  # at most one parameter kept: no order to lose
        # Trimmed as the key was (``_canonicalize``, then ``slow``): trimmed less, a U+0085 the key's ``strip()``
        # dropped stayed in the query sent, and the fetch form named another URL than its key (``?q=&0\x85``).
        raw = url.strip().strip(" \t\n\r\f\v\x00")
        if base is not None and not raw[:8].lower().startswith(("http://", "https://")):
            raw = resolve(base.strip(), raw)
        written = self._query(urlsplit(raw).query, sort=False)
        return f"{path}?{written}" if written else path

    def slow(self, url: str, base: str | None = None) -> str | None:
        """The general path (no fast-path shortcut); public so tests can check both agree."""
        url = url.strip(" \t\n\r\f\v\x00")
        if not url:
            return None
        try:
            if base is not None:
                url = resolve(base.strip(), url)
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme not in DEFAULT_PORTS:
                return None
            netloc = self._netloc(parts.netloc, scheme)
        except (ValueError, UnicodeError):
            return None
        if netloc is None:
            return None
        path = parts.path or "/"
        if not path.startswith("/"):
            path = "/" + path
        # A raw control character refuses the URL before anything is encoded: one verdict, whatever else the
        # component holds (encoding it only when a non-ASCII neighbour forced encoding made two).
        if _CONTROL.search(path) is not None or _CONTROL.search(parts.query) is not None:
            return None
        try:
            path = remove_dot_segments(_normalize_escapes(_encode_unsafe(path, _PATH_SAFE)))
            query = self._query(parts.query) if parts.query else ""
        except UnicodeEncodeError:
            return None  # a lone surrogate (JSON's "\ud800"): no UTF-8 form, so no URL
        return f"{scheme}://{netloc}{path}?{query}" if query else f"{scheme}://{netloc}{path}"

    @staticmethod
    def _netloc(netloc: str, scheme: str) -> str | None:
        """Host and non-default port. Userinfo is dropped: credentials name no other resource (RFC 3986 §3.2.1
        deprecates "user:password", §7.5), a key must never store someone's password, and "u@h" beside "h"
        would split one page in two and let a link spend another budget on the same host."""
        hostport = netloc.rpartition("@")[2]
        if hostport.startswith("["):
            end = hostport.find("]")
            if end < 0:
                return None
            host, rest = hostport[: end + 1], hostport[end + 1 :]
            if rest and not rest.startswith(":"):
                return None
            port_text = rest[1:]
        else:
            host, _, port_text = hostport.partition(":")
            if "%" in host:
                host = decoded_host(host)  # raises UnusableHost (a ValueError): the URL is unusable
        host = host.lower()
        if not host:
            return None
        if not host.isascii():
            # UTS #46 non-transitional mapping (IDNA 2008), as current browsers resolve it.
            host = idna.encode(host, uts46=True, transitional=False).decode("ascii")
        elif "xn--" in host:
            idna.decode(host)  # an invalid punycode label raises: the URL is unusable
        if _HOST_OK.fullmatch(host) is None:
            return None
        if host.startswith("["):
            # RFC 5952 §4 text form of an IPv6 literal: [1:0::] and [1::] are one host ([::127.0.0.1] → [::7f00:1]).
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"  # an invalid one raises: unusable
        if port_text:
            if not port_text.isdigit() or not port_text.isascii():
                return None
            port = int(port_text)
            if port > 65535:
                return None
            if port != DEFAULT_PORTS[scheme]:
                host = f"{host}:{port}"
        elif hostport.endswith(":"):
            pass  # "host:" is the default port (RFC 3986 §6.2.3)
        return host

    def _query_plain(self, query: str) -> str:
        """``_query`` for a query without escapes or unsafe characters (nothing to normalize)."""
        drop = self._drop
        kept = [
            (name, piece)
            for piece in query.split("&")
            if piece and (name := piece.partition("=")[0]).lower() not in drop
        ]
        if len(kept) > 1:
            kept.sort(key=_first)
        return "&".join(piece for _, piece in kept)

    def _query(self, query: str, *, sort: bool = True) -> str:
        kept: list[tuple[str, str]] = []
        for piece in query.split("&"):
            if not piece:
                continue
            piece = _normalize_escapes(_encode_unsafe(piece, _QUERY_SAFE))
            name = piece.partition("=")[0]
            if name.lower() in self._drop:
                continue
            kept.append((name, piece))
        # Stable sort by name: repeated keys keep their relative order (a=2&a=1 stays distinct from a=1&a=2).
        if sort:
            kept.sort(key=_first)
        return "&".join(piece for _, piece in kept)


def resolve(base: str, ref: str) -> str:
    """RFC 3986 §5.2.2 reference resolution, leaving dot segments for the caller to remove.

    Not urllib's urljoin: it resolves "../" before "%2e" is decoded and drops empty segments ("/..//" → "/"),
    so the same link could canonicalize two ways. Dot segments are removed once, after escape normalization.
    """
    r = urlsplit(ref)
    if r.scheme:
        return ref
    b = urlsplit(base)
    if r.netloc or ref.startswith("//"):
        # A network-path reference, its authority empty included ("///x": no host, so no URL; urlsplit cannot
        # tell an empty authority from none, which made "///x" the path /x of the base's host).
        return f"{b.scheme}:{ref}"
    if not r.path:
        path, query = b.path, (r.query if "?" in ref else b.query)
    elif r.path.startswith("/"):
        path, query = r.path, r.query
    else:
        # §5.2.3 merge: the base path up to its last "/", or "/" for a base with authority and empty path.
        path = ("/" if b.netloc and not b.path else b.path[: b.path.rfind("/") + 1]) + r.path
        query = r.query
    return f"{b.scheme}://{b.netloc}{path}" + (f"?{query}" if query or "?" in ref.partition("#")[0] else "")


def _first(item: tuple[str, str]) -> str:
    return item[0]


_canonicalizers: dict[int, tuple[UrlSettings, Canonicalizer]] = {}


def canonicalizer_for(settings: UrlSettings) -> Canonicalizer:
    """The cached ``Canonicalizer`` of these settings (keyed by identity: settings are frozen)."""
    entry = _canonicalizers.get(id(settings))
    if entry is None or entry[0] is not settings:
        if len(_canonicalizers) > 64:
            _canonicalizers.clear()
        entry = (settings, Canonicalizer(settings))
        _canonicalizers[id(settings)] = entry
    return entry[1]


def canonicalize(url: str, *, base: str | None = None, settings: UrlSettings) -> str | None:
    """The conservative canonical form of ``url`` resolved against ``base``; None when unusable.

    Lower-cases scheme and host (IDNA to punycode), drops userinfo, fragment, default port, tracking and
    presentation parameters, sorts the query stably, resolves dot segments and normalizes percent-escapes
    (non-ASCII as UTF-8; every character RFC 3986 forbids in that component escaped, by one rule per character).
    Never lower-cases the path. Idempotent. None for a URL with a raw control character or a lone surrogate.
    ``base`` is the final URL after redirects of the page the link was found on.
    """
    return canonicalizer_for(settings)(url, base)
