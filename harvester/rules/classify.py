"""Which links are detail pages, listing pages, feeds or neither: URL shapes, learned per site and known in general.

``LinkClassifier`` works without configuration: it learns a site's detail URL shapes from URLs known to be
details (sitemap and feed entries) and knows common pagination and listing forms; the site profile's
``detail_patterns`` / ``listing_patterns`` override it. Pure: strings in, kinds out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from harvester.records import UrlKind
from harvester.rules.url_shapes import _EXTENSION, _IGNORED_PARAMS, _SEPARATORS, _Parts, _Templates, segment_shape
from harvester.site_profile import SiteProfile

FEEDISH_HREF = re.compile(r"(?i)(?:^|[/._-])(?:feed|rss|atom|rdf|jsonfeed)(?:$|[/._?-])|\.(?:rss|atom)$")
"""A path that names a feed by its shape (/feed, /rss.xml, atom.xml, feed.json, .rss)."""

LISTING_WORDS = frozenset(
    (
        "category",
        "categories",
        "tag",
        "tags",
        "topic",
        "topics",
        "author",
        "authors",
        "archive",
        "archives",
        "section",
        "sections",
        "collection",
        "collections",
        "search",
        "list",
        "browse",
        "kategorie",
        "categorie",
        "categoria",
        "rubrique",
        "themen",
    )
)
"""Path words that mark a listing (/category/x/, /tag/y, /archive/...) when no learned detail shape matches."""

_SECTION = re.compile(r"[a-z][a-z-]{1,29}")
_FURNITURE = frozenset((
    "about", "about-us", "contact", "contact-us", "imprint", "impressum", "legal", "privacy", "privacy-policy",
    "terms", "cookies", "login", "logout", "signin", "sign-in", "signup", "sign-up", "register", "account",
    "cart", "checkout", "help", "faq", "subscribe", "newsletter", "jobs", "careers", "advertise", "donate", "wp-admin",
    "wp-json", "admin", "user", "users", "profile", "my-account", "wishlist", "basket", "kontakt", "datenschutz",
    "calendar", "events", "services", "print", "share",
))
"""One-word directories that are site furniture, not sections (see ``classify``)."""

# The one-letter "p" pages only up to 999: beyond, /p/12345 and ?p=12345 are items (a post id), not page 12,345.
_PAGINATION_QUERY = re.compile(
    r"(?:^|&)(?:(?:page|pg|paged|pagenum|page_num|pageno|start|offset|seite)=\d+|p=\d{1,3})(?:&|$)"
)
_PAGINATION_PATH = re.compile(r"/(?:(?:page|pages|seite|pagina)[/-]?\d+|p[/-]?\d{1,3})/?$", re.IGNORECASE)
ROOT_ITEM = re.compile(r"(?:^|&)(?:p|page_id|attachment_id)=\d+(?:&|$)")
"""The query of a root URL that names one item (WordPress's plain permalinks); any other (``?cat=5``, ``?m=2024``)
is an archive."""
_SITEMAP_PATH = re.compile(r"(?i)sitemap[^/]*\.(?:xml|txt)(?:\.gz)?$")
_YEAR = re.compile(r"(?:19|20)\d\d")
_FILE_SUFFIXES = (
    ".xml.gz", ".gz", ".zip", ".pdf", ".jpg", ".jpeg", ".png", ".gif", ".webp", ".svg", ".css", ".js", ".ico",
    ".mp4", ".mp3", ".woff", ".woff2",
)  # fmt: skip
"""Paths that name files, never HTML pages."""
def is_feed_url(href: str) -> bool:
    """True for hrefs that are obviously feeds by their shape (/feed, /rss.xml, atom.xml, feed.json, .rss)."""
    path = href.split("?", 1)[0].split("#", 1)[0]
    return (
        bool(path)
        and FEEDISH_HREF.search(path) is not None
        and not href.lower().startswith(("javascript:", "mailto:"))
    )


def is_pagination(url: str) -> bool:
    """True for ``?page=N``-style queries and ``/page/N`` paths (the page number of a listing)."""
    if url.isprintable() and url[:8].lower().startswith(("http://", "https://")):
        # Asked of every link of every page: an absolute URL with nothing ``urlsplit`` would drop (tab, CR, LF)
        # splits into the same query and, for these patterns, the same path by _Parts' few str calls.
        fast = _Parts(url)
        return bool((fast.query and _PAGINATION_QUERY.search(fast.query)) or _PAGINATION_PATH.search(fast.path))
    return is_pagination_split(url)


def is_pagination_split(url: str) -> bool:
    """``is_pagination`` by ``urlsplit``, for any text: the general path."""
    parts = urlsplit(url)
    return bool((parts.query and _PAGINATION_QUERY.search(parts.query)) or _PAGINATION_PATH.search(parts.path))


def list_of(url: str) -> tuple[str, str, str]:
    """The list a page belongs to: its URL without the page number (``/blog/page/3/`` → ``/blog``,
    ``/list?page=2&sort=new`` → ``/list?sort=new``), as (host, path, sorted query)."""
    parts = urlsplit(url)
    path = _PAGINATION_PATH.sub("", parts.path).rstrip("/") or "/"
    query = sorted(piece for piece in parts.query.split("&") if piece and not _PAGINATION_QUERY.search(piece))
    return parts.netloc.lower(), path, "&".join(query)


def same_list(page: str, other: str) -> bool:
    """Whether ``other`` is a page of the list ``page`` is a page of (another page number, or none): what makes
    it a continuation of ``page``, not a list of its own that ``page`` links to (a home page's "All products"
    link to ``/list?page=1``)."""
    return list_of(page) == list_of(other)


# --- classification ----------------------------------------------------------------------------------------


MAX_REMEMBERED_KINDS = 16_384
"""URLs whose kind ``LinkClassifier.classify`` remembers at most (forgotten all at once past it)."""
_UNKNOWN = object()


class LinkClassifier:
    """Detail or listing, per URL, for one site, with no configuration needed on typical sites.

    Order: profile patterns (detail, then listing); feed and sitemap URLs; pagination (``?page=N``, ``/page/N``);
    detail shapes learned from ``learn_details`` (sitemap/feed entries); listing shapes learned from
    ``observe_page`` (pages that link to many details); listing words (/category/, /tag/, date archives, the
    homepage); generic detail shapes (long slugs, slug-plus-id, ``.html``). ``classify`` returns None for
    "neither" (for example /about, /contact): the caller queues those as LINK with a low score, or not at all.
    """

    def __init__(
        self, profile: SiteProfile | None = None, *, max_examples: int = 5_000, listing_min_details: int = 5
    ) -> None:
        self._detail_rules = [re.compile(p) for p in profile.detail_patterns] if profile else []
        self._listing_rules = [re.compile(p) for p in profile.listing_patterns] if profile else []
        self._details = _Templates(max_examples)
        self._listings = _Templates(max_examples)
        self._listing_min_details = listing_min_details
        self._known: dict[str, UrlKind | None] = {}
        self._item_groups: set[tuple[str, ...]] = set()
        """Groups ``repeated_items`` found to be a list's items, by ``_item_group``'s key."""

    def learn_details(self, urls: Iterable[str]) -> None:
        """Remember these URLs as known details (sitemap and feed entries) to learn the site's shapes."""
        learned = False
        for url in urls:
            learned |= self._details.add(url)
        if learned:
            self._known.clear()

    def learn_listing(self, url: str) -> None:
        if self._listings.add(url):
            self._known.clear()

    def observe_page(self, url: str, links: Iterable[str]) -> UrlKind | None:
        """Learn ``url`` as a listing when it links to many details; returns its kind by that evidence."""
        details = sum(1 for link in links if self.classify(link) is UrlKind.DETAIL)
        if details >= self._listing_min_details:
            if not self._details.matches(url):
                self.learn_listing(url)
            return UrlKind.LISTING
        return self.classify(url)

    @property
    def learned(self) -> int:
        return len(self._details)

    def guess_navigation(self, url: str) -> UrlKind | None:
        """A seed page's link that ``classify`` left undecided, on a host with no detail shape learned (no
        sitemap or feed): a directory of words (``/news/``, ``/product-category/tools/``) or a word under a one-
        or two-letter prefix (``/c/shoes``, ``/en/sport``), with no query and no site furniture, is taken for a
        section front: a homepage's navigation is the only way to such a site's items. A slug that could be an
        item (``/hello-world``, ``/blog/hello-world``) is left alone: a guessed listing is never stored."""
        parts = _Parts(url)
        if self._details.knows(parts.host) or parts.query:
            return None
        segments = [seg.lower() for seg in parts.segments]
        if not 1 <= len(segments) <= 2 or not all(_words_only(seg) for seg in segments):
            return None
        if any(seg in _FURNITURE for seg in segments):
            return None
        if parts.path.endswith("/") or (len(segments) == 2 and len(segments[0]) <= 2):
            return UrlKind.LISTING
        return None

    def repeated_items(
        self, links: Iterable[str], *, pager: Iterable[str] = (), page: str | None = None, min_siblings: int = 3
    ) -> set[str]:
        """Of a paginated list's links that ``classify`` left undecided (the caller classified them already),
        those that share a directory and end in an id, at least ``min_siblings`` of them, or fewer of a group this
        classifier took for items before (the last page of a list holds what is left: one item, say): the list's
        items. ``/article/3-2``, ``/item/7`` or ``/product.php?id=5`` are no generic detail shape, yet a list's
        pages side by side are made of them, and a site with no sitemap or feed has no other way to them.

        An id is any last segment with a digit, whatever its length (``/item/1`` to ``/item/9`` are a shop's first
        nine products), or the value of an id key of the query (``id``, ``product_id``, ``pid``: ``_ID_KEY``) on a
        path other than the page's own. A page number is not an id: ``pager`` (the page's next pages) and ``page``
        itself name the list's own numbering, and the directory of a numbered one (``/blog/2``) is the pager's.

        Deliberately narrow otherwise, because a kind is fixed when a URL is first stored and learned from later
        (only a feed or sitemap entry turns a listing page into a detail, ``frontier.discovered``, never back):
        never a word or a slug with no digit (menus, footers and section links repeat words: ``/news/world``,
        ``/pages/shipping``), never any other query (filters, languages, views, variants, forums), never site
        furniture. The caller asks only of a paginated page."""
        numbered = {(parts.host, tuple(parts.segments[:-1]))
                    for url in (*pager, *((page,) if page else ()))
                    if (parts := _Parts(url)).segments and parts.segments[-1].isdigit()}
        own_path = _Parts(page).path if page else None
        groups: dict[tuple[str, ...], set[str]] = {}
        for link in links:
            parts = _Parts(link)
            key = _item_group(parts, numbered, own_path)
            if key is not None:
                groups.setdefault(key, set()).add(link)
        items: set[str] = set()
        for key, members in groups.items():
            if len(members) >= min_siblings:
                if len(self._item_groups) < MAX_ITEM_GROUPS:
                    self._item_groups.add(key)
                items |= members
            elif key in self._item_groups:
                items |= members
        return items

    def classify(self, url: str) -> UrlKind | None:
        """The kind of ``url`` by what is learned so far (the rules in the class docstring).

        Remembered per URL until something new is learned: a site's pages link the same navigation, sections
        and related items over and over, and each page's links were classified afresh (a tenth of the CPU of a
        page). Learning anything forgets every answer, so an answer is always what the rules give now."""
        known = self._known.get(url, _UNKNOWN)
        if known is not _UNKNOWN:
            return known  # type: ignore[return-value]
        kind = self._classify(url)
        if len(self._known) >= MAX_REMEMBERED_KINDS:
            self._known.clear()
        self._known[url] = kind
        return kind

    def _classify(self, url: str) -> UrlKind | None:
        for rule in self._detail_rules:
            if rule.search(url):
                return UrlKind.DETAIL
        for rule in self._listing_rules:
            if rule.search(url):
                return UrlKind.LISTING
        parts = _Parts(url)
        path = parts.path
        lowered = path.lower()
        if "sitemap" in lowered and (_SITEMAP_PATH.search(path) or lowered.endswith((".xml", ".xml.gz", ".txt"))):
            return UrlKind.SITEMAP
        if lowered.endswith(_FILE_SUFFIXES):
            return None  # files, not pages
        if is_feed_url(path):
            return UrlKind.FEED
        # Learned detail shapes before the pagination heuristic: "/p/12" is pagination on one site and a post
        # on another, and the site's own sitemaps and feeds are the better witness.
        if self._details.matches(parts):
            return UrlKind.DETAIL
        if not parts.segments and ROOT_ITEM.search(parts.query):
            return UrlKind.DETAIL  # WordPress's plain permalinks (/?p=12, /?page_id=2): its lists page by ?paged=
        if (parts.query and _PAGINATION_QUERY.search(parts.query)) or _PAGINATION_PATH.search(path):
            return UrlKind.LISTING
        if self._listings.matches(parts) or self._details.is_section_of(parts):
            return UrlKind.LISTING
        segments = parts.segments
        if not segments:
            return UrlKind.LISTING  # the homepage lists the newest items of most sites
        if any(seg.lower() in LISTING_WORDS for seg in segments):
            return UrlKind.LISTING
        if all(_YEAR.fullmatch(seg) or (seg.isdigit() and len(seg) <= 2) for seg in segments):
            return UrlKind.LISTING  # /2024/ or /2024/05/: a date archive
        if _looks_like_detail(segments[-1]):
            return UrlKind.DETAIL
        if len(segments) == 1 and path.endswith("/") and not parts.query and not self.learned:
            # A one-word directory (/news/, /sport/, /en/) is a section front on most sites; with no sitemap or
            # feed to learn the site's shapes from, it is the way to its articles. Site furniture is left out.
            word = segments[0].lower()
            if _SECTION.fullmatch(word) and word not in _FURNITURE:
                return UrlKind.LISTING
        return None


MAX_ITEM_GROUPS = 1_000
"""Groups of list items ``LinkClassifier.repeated_items`` remembers at most (a site has a few lists)."""

_ID_KEY = re.compile(
    r"(?i)(?:id|[a-z]+_id|(?:p|a|t|item|product|prod|article|post|story|news|topic|thread|entry|doc)id|sku)"
)
"""A query key that names one item (``?id=5``, ``?product_id=42``, ``?itemid=7``), not a filter or a view."""


def _item_group(
    parts: _Parts, numbered: set[tuple[str, tuple[str, ...]]], own_path: str | None
) -> tuple[str, ...] | None:
    """The group of list items ``parts`` belongs to (``LinkClassifier.repeated_items``), or None when it is no
    item by its shape: ``("path", host, directory...)`` for an id as the last segment, ``("query", host, path,
    key, the other pairs...)`` for an id in the query."""
    segments = [seg.lower() for seg in parts.segments]
    if any(_is_furniture(seg) for seg in segments):
        return None
    if not parts.query:
        if not segments or not any(ch.isdigit() for ch in segments[-1]):
            return None
        directory = tuple(segments[:-1])
        if segments[-1].isdigit() and (parts.host, tuple(parts.segments[:-1])) in numbered:
            return None  # the list's own page numbers
        return ("path", parts.host, *directory)
    if parts.path == own_path:
        return None  # the list itself, filtered, sorted or in another view
    pairs = [piece.partition("=") for piece in parts.query.split("&") if piece]
    ids = [(name, value) for name, _, value in pairs if _ID_KEY.fullmatch(name) and any(ch.isdigit() for ch in value)]
    if len(ids) != 1:
        return None
    name = ids[0][0]
    others = sorted(f"{key}={value}" for key, _, value in pairs
                    if key != name and key.lower() not in _IGNORED_PARAMS)
    return ("query", parts.host, parts.path, name, *others)


def _is_furniture(segment: str) -> bool:
    """A segment that is, or is made of, site furniture (``about-us``, ``privacy-policy``, ``terms-of-use``)."""
    return segment in _FURNITURE or any(word in _FURNITURE for word in _SEPARATORS.split(_EXTENSION.sub("", segment)))


def _words_only(segment: str) -> bool:
    return bool(_SECTION.fullmatch(segment) or (len(segment) == 1 and segment.isalpha()))


def _looks_like_detail(last: str) -> bool:
    """Generic detail shapes: a slug of three or more words, a slug with an id, a long id, an id-like page name.

    Two-word slugs (about-us, privacy-policy, wp-login.php) are left undecided: site furniture, mostly.
    """
    shape = segment_shape(last)
    tokens = shape.rsplit(".", 1)[0].split("-") if "." in shape else shape.split("-")
    stem = _EXTENSION.sub("", last)
    words = len([chunk for chunk in _SEPARATORS.split(stem) if chunk.isalpha()])
    if words >= 3:
        return True
    if ("a+" in tokens or "a" in tokens) and "9" in tokens and len(last) >= 6:
        return True
    if tokens == ["9"] and len(last) >= 4:
        return True
    return "x" in tokens and len(last) >= 6 and any(ch.isdigit() for ch in last)
