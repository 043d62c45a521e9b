"""Turns a SiteModel into HTTP responses: precomputed bodies with ETag / Last-Modified, 304s, traps.

Everything a request needs is built ahead (per day for sitemaps, feeds, listings; once per page version for
details), so answering is a dict lookup and a join. Never touches sockets; the server in web.py does. One object
per role builds what ``ServedSite`` answers with: ``render_pages`` (robots.txt, sitemaps, listings, home),
``render_feeds``, ``render_facets``, ``render_details``, ``render_traps``, over ``render_layout`` (the pages'
chrome and links, and the Last-Modified the aggregates carry across rebuilds).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

from harvester.testing.render_details import Details
from harvester.testing.render_facets import FacetPages, facet_query
from harvester.testing.render_feeds import FeedDocs, feed_key
from harvester.testing.render_layout import Carried, Layout
from harvester.testing.render_pages import SitePages
from harvester.testing.render_traps import trap as render_trap
from harvester.testing.resources import HTML, Reply, Resource, Stream, make_resource
from harvester.testing.sites import HostSpec, SiteModel

if TYPE_CHECKING:
    from harvester.testing.hostile import HostileRoutes

_PAGE_RE = re.compile(r"(?:^|&)page=(\d{1,6})(?:&|$)")


class ServedSite:
    """Responses of one host. All mutation (``rebuild``, ``advance``) happens on the server's event loop; what
    the builders return is this object's, and the model is changed only by ``advance``."""

    def __init__(self, spec: HostSpec, seed: int, origin: str) -> None:
        self.spec = spec
        self.model = SiteModel(spec, seed)
        self.origin = origin
        self.layout = Layout(spec, self.model, origin)
        carried = Carried(self.model)
        self.facets = FacetPages(self.layout)
        self.pages = SitePages(self.layout, carried, self.facets)
        self.feed_docs = FeedDocs(self.layout, carried)
        self.details = Details(self.layout)
        self.static: dict[str, Resource] = {}
        self.listings: dict[str, list[Resource]] = {}
        self.feeds: dict[str, dict[str, Resource]] = {}
        self.facet_pages: dict[tuple[str, str, str], Resource] = {}
        self._counter = 0
        self.not_found = make_resource(404, HTML, "<!DOCTYPE html><html><body><h1>Not found</h1></body></html>")
        self.gone = make_resource(410, HTML, "<!DOCTYPE html><html><body><h1>Gone</h1></body></html>")
        self.hostile: HostileRoutes | None = None
        if spec.hostile:
            from harvester.testing.hostile import HostileRoutes

            self.hostile = HostileRoutes(self)
        self.rebuild()

    # ----------------------------------------------------------------- answering

    def token(self) -> bytes:
        self._counter += 1
        return b"%08x" % ((self._counter * 2_654_435_761) & 0xFFFFFFFF)

    def respond(self, path: str, query: str, inm: str | None, ims: str | None) -> Reply | Stream:
        """The reply for one GET/HEAD; never raises for odd paths (404)."""
        res = self.static.get(path)
        if res is not None:
            return res.reply(inm, ims, self.token())
        page = self.model.by_path.get(path)
        if page is not None:
            if not page.live:
                return self.gone.reply(None, None, b"")
            return self.details.page(page).reply(inm, ims, self.token())
        feed = self.feeds.get(path)
        if feed is not None:
            doc = feed.get(feed_key(query))
            if doc is None:
                return self.not_found.reply(None, None, b"")
            return doc.reply(inm, ims, self.token())
        moved_to = self.model.moved_from.get(path)
        if moved_to is not None:
            return self.moved(moved_to)
        pages = self.listings.get(path)
        if pages is not None:
            n = 1
            if query and self.spec.facets and (facet := facet_query(query)) is not None:
                return self.facet_pages[(path.strip("/").rpartition("/")[2], *facet)].reply(inm, ims, self.token())
            if query:
                m = _PAGE_RE.search(query)
                n = int(m.group(1)) if m else 1
            if 1 <= n <= len(pages):
                return pages[n - 1].reply(inm, ims, self.token())
            return self.not_found.reply(None, None, b"")
        if "%" in path or "/." in path:
            clean = _remove_dot_segments(unquote(path))
            if clean != path:
                return self.respond(clean, query, inm, ims)
        if self.spec.traps:
            trap = render_trap(self.layout, path, query)
            if trap is not None:
                return trap.reply(inm, ims, self.token())
        if self.hostile is not None and path.startswith("/hostile/"):
            reply = self.hostile.respond(path, query, inm, ims)
            if reply is not None:
                return reply
        return self.not_found.reply(None, None, b"")

    # ----------------------------------------------------------------- building

    def rebuild(self) -> None:
        """Re-render everything but details (rendered lazily per version); called at start and each day."""
        self.static = {**self.pages.robots(), **self.pages.sitemaps(), **self.pages.home()}
        self.feeds = self.feed_docs.build()
        self.listings = self.pages.listings()
        self.facet_pages = self.facets.build()

    def advance(self, *, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> None:
        self.model.advance(changed=changed, new=new, gone=gone, moved=moved, restyled=restyled, returned=returned)
        self.rebuild()

    def moved(self, new_path: str) -> Reply:
        """301 to a page's new address (absolute, as most servers send it); RFC 9110 §15.4.2."""
        res = make_resource(301, HTML, "moved", headers=(("Location", self.origin + new_path),), validators=False)
        return res.reply(None, None, b"")


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4, enough for request targets."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        if seg == ".":
            if i == len(segments) - 1:
                out.append("")
            continue
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if i == len(segments) - 1:
                out.append("")
            continue
        out.append(seg)
    result = "/".join(out)
    return result if result.startswith("/") else "/" + result
