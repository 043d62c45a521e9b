"""Turns a SiteModel into HTTP responses: precomputed bodies with ETag / Last-Modified, 304s, traps.

Everything a request needs is built ahead (per day for sitemaps, feeds, listings; once per page version for
details), so answering is a dict lookup and a join. Never touches sockets; the server in web.py does.
"""

from __future__ import annotations

import gzip
import json
import posixpath
import re
import time
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import unquote
from xml.sax.saxutils import escape as xml_escape

from harvester.testing.render_facets import FacetRendering, facet_query
from harvester.testing.render_feeds import feed_key
from harvester.testing.resources import HTML, TOKEN, Reply, Resource, Stream, make_resource, w3c_date
from harvester.testing.sites import (
    BASE_EPOCH,
    DAY_S,
    DISALLOWED_PREFIX,
    WORDS,
    HostSpec,
    PageModel,
    SiteModel,
)

if TYPE_CHECKING:
    from harvester.testing.hostile import HostileRoutes


def _sentences(rng_choices: Callable[..., list[str]], randint: Callable[[int, int], int], n: int) -> str:
    out = []
    for _ in range(n):
        words = " ".join(rng_choices(WORDS, k=randint(8, 22)))
        out.append(words[0].upper() + words[1:] + ".")
    return " ".join(out)


_PAGE_RE = re.compile(r"(?:^|&)page=(\d{1,6})(?:&|$)")
_CAL_RE = re.compile(r"/calendar/(\d{1,5})/(\d{1,2})/?")
_REPEAT_RE = re.compile(r"(?:/a/b)+/")

FACETS = {
    "color": ("red", "blue", "green", "black", "white", "grey"),
    "size": ("xs", "s", "m", "l", "xl"),
    "brand": ("acme", "globex", "initech", "umbrella", "hooli"),
    "sort": ("price", "new", "popular"),
}

TRAP_PREFIXES = {
    "calendar": "/calendar/",
    "facets": "/shop",
    "session": "sid=",
    "repeat": "/a/b/a/b/",
}
"""Where each trap kind lives: a path prefix, or (session) a query parameter that appears on any path."""

STYLE = (
    "body{font-family:Georgia,serif;margin:0;color:#222}header,footer{background:#f4f4f4;padding:1em}"
    "nav a{margin-right:1em}main{max-width:46em;margin:auto;padding:1em}.ad{border:1px dashed #aaa;"
    "padding:.5em;margin:1em 0;font-size:.8em}aside{font-size:.9em}footer{font-size:.8em;color:#555}"
)


class ServedSite(FacetRendering):
    """Responses of one host. All mutation (``rebuild``, ``advance``) happens on the server's event loop."""

    def __init__(self, spec: HostSpec, seed: int, origin: str) -> None:
        self.spec = spec
        self.model = SiteModel(spec, seed)
        self.origin = origin
        self.netloc = origin.split("://", 1)[1]
        self.static: dict[str, Resource] = {}
        self.listings: dict[str, list[Resource]] = {}
        self.feeds: dict[str, dict[str, Resource]] = {}
        self._carried: dict[str, tuple[str | None, float | None]] = {}
        self._details: dict[int, tuple[tuple[int, int], Resource]] = {}
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
            return self.detail(page).reply(inm, ims, self.token())
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
            trap = self.trap(path, query)
            if trap is not None:
                return trap.reply(inm, ims, self.token())
        if self.hostile is not None and path.startswith("/hostile/"):
            reply = self.hostile.respond(path, query, inm, ims)
            if reply is not None:
                return reply
        return self.not_found.reply(None, None, b"")

    # ----------------------------------------------------------------- building

    def _now_ts(self) -> int:
        """Noon of the current day: later than every page change of that day (those happen before 06:00)."""
        return BASE_EPOCH + self.model.day * DAY_S + 43_200

    def _put(self, path: str, res: Resource) -> Resource:
        self.static[path] = res
        return res

    def _carry(self, path: str, ctype: str, body: str | bytes, first_lm: float, *, weak: bool = False) -> Resource:
        """Last-Modified of an aggregate is the time of its last content change: kept while the ETag is
        unchanged, else moved to now; so If-Modified-Since never misses a change."""
        prev = self._carried.get(path)
        lm = prev[1] if prev and prev[1] is not None else first_lm
        res = make_resource(200, ctype, body, weak=weak, lm_ts=lm)
        if prev is not None and prev[0] != res.etag:
            res = make_resource(200, ctype, body, weak=weak, lm_ts=float(self._now_ts()))
        self._carried[path] = (res.etag, res.lm_ts)
        return res

    def rebuild(self) -> None:
        """Re-render everything but details (rendered lazily per version); called at start and each day."""
        self.static = {}
        self.listings = {}
        self.feeds = {}
        self._build_robots()
        self._build_sitemaps()
        self._build_feeds()
        self._build_listings()
        self._build_facets()
        self._build_home()

    def advance(self, *, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
                returned: float = 0.0) -> None:
        self.model.advance(changed=changed, new=new, gone=gone, moved=moved, restyled=restyled, returned=returned)
        self.rebuild()

    def moved(self, new_path: str) -> Reply:
        """301 to a page's new address (absolute, as most servers send it); RFC 9110 §15.4.2."""
        res = make_resource(301, HTML, "moved", headers=(("Location", self.origin + new_path),), validators=False)
        return res.reply(None, None, b"")

    def robots_text(self) -> str:
        r = self.spec.robots
        if r.body is not None:
            return r.body.replace("{origin}", self.origin)
        disallow = list(r.disallow)
        if self.spec.disallowed_in_sitemap > 0:
            disallow.append(DISALLOWED_PREFIX)
        pacing = []
        if r.crawl_delay is not None:
            pacing.append(f"Crawl-delay: {r.crawl_delay:g}")
        if r.request_rate is not None:
            pacing.append(f"Request-rate: {r.request_rate}")
        lines = ["# robots.txt of the harvester test web", "User-agent: *"]
        lines += [f"Disallow: {d}" for d in disallow] or ["Disallow:"]
        lines += pacing
        for agent, paths in r.agent_groups.items():
            lines += ["", f"User-agent: {agent}"]
            lines += [f"Disallow: {d}" for d in paths] or ["Disallow:"]
            lines += pacing
        if r.sitemaps and self.spec.sitemap_children > 0:
            lines += ["", f"Sitemap: {self.origin}/sitemap_index.xml"]
        return "\n".join(lines) + "\n"

    def _build_robots(self) -> None:
        r = self.spec.robots
        text = self.robots_text()
        if r.status == 200:
            self._put("/robots.txt", make_resource(200, "text/plain; charset=utf-8", text, lm_ts=BASE_EPOCH))
        elif 300 <= r.status < 400:
            target = r.redirect_to or "/robots-moved.txt"
            self._put("/robots.txt", make_resource(r.status, HTML, "moved", headers=(("Location", target),)))
            if target.startswith("/"):
                self._put(target, make_resource(200, "text/plain; charset=utf-8", text, lm_ts=BASE_EPOCH))
        else:
            self._put("/robots.txt", make_resource(r.status, "text/plain", f"status {r.status}\n"))

    def sitemap_paths(self) -> list[str]:
        n = self.spec.sitemap_children
        return [f"/sitemaps/pages-{i + 1}.xml" + (".gz" if i == 0 and n > 1 else "") for i in range(n)]

    def _build_sitemaps(self) -> None:
        n = self.spec.sitemap_children
        if n <= 0:
            return
        groups: list[list[PageModel]] = [[] for _ in range(n)]
        for p in self.model.pages:
            if p.live and p.in_sitemap:
                groups[self.model.sitemap_child_of(p)].append(p)
        index_entries = []
        for path, group in zip(self.sitemap_paths(), groups, strict=True):
            xml = [
                '<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            ]
            for p in group:
                priority = 0.3 + (p.id * 7 % 7) / 10
                freq = "daily" if p.id % 3 else "weekly"
                dated = p.modified_ts if self.spec.sitemap_lastmod == "modified" else p.published_ts
                xml.append(
                    f"<url><loc>{xml_escape(self.origin + p.path)}</loc><lastmod>{w3c_date(dated)}</lastmod>"
                    f"<changefreq>{freq}</changefreq><priority>{priority:.1f}</priority></url>"
                )
            xml.append("</urlset>\n")
            data = "\n".join(xml).encode()
            gz = path.endswith(".gz")
            body = gzip.compress(data, compresslevel=6, mtime=0) if gz else data
            ctype = "application/gzip" if gz else "application/xml"
            first = max((p.modified_ts for p in group), default=BASE_EPOCH)
            res = self._carry(path, ctype, body, first)
            self._put(path, res)
            index_entries.append(
                f"<sitemap><loc>{self.origin}{path}</loc><lastmod>{w3c_date(res.lm_ts or first)}</lastmod></sitemap>"
            )
        index = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            + "\n".join(index_entries)
            + "\n</sitemapindex>\n"
        )
        self._put(
            "/sitemap_index.xml",
            self._carry("/sitemap_index.xml", "application/xml", index, BASE_EPOCH),
        )
        if self.spec.sitemap_redirect:
            self._put("/sitemap.xml", make_resource(
                301, HTML, "moved", headers=(("Location", "/sitemap_index.xml"),), validators=False))

    def feed_paths(self) -> dict[str, str]:
        return {kind: f"/feeds/{kind}.xml" for kind in self.spec.feeds}


    def listing_path(self, topic: str, n: int = 1) -> str:
        return f"/topics/{topic}/" + ("" if n == 1 else f"?order=recent&page={n}")

    def _build_listings(self) -> None:
        for topic in self.model.topics:
            base = self.listing_path(topic)
            chunks = self.model.listing_pages(topic)
            out = []
            for i, items in enumerate(chunks, start=1):
                path = self.listing_path(topic, i)
                html = self._listing_html(topic, i, len(chunks), items, path)
                first = max((p.modified_ts for p in items), default=BASE_EPOCH)
                out.append(self._carry(path, HTML, html, first, weak=True))
            self.listings[base] = out

    def _chrome(self, title: str, path: str, head_extra: str = "") -> tuple[str, str]:
        """Header (with nav) and footer boilerplate shared by every HTML page."""
        nav = " ".join(
            f'<a href="{self._spell_listing(t, 1, i)}">{t.capitalize()}</a>' for i, t in enumerate(self.model.topics)
        )
        alternates = "".join(
            f'<link rel="alternate" type="application/{k}+xml" title="{k}" href="{p}">'
            for k, p in self.feed_paths().items()
        )
        head = (
            f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n{alternates}\n{head_extra}'
            f"<style>{STYLE}</style>\n</head>\n<body>\n"
            f'<header class="site-header"><a class="logo" href="/">{escape(self.spec.name)}</a>'
            f"<nav>{nav}</nav></header>\n"
        )
        traps = ""
        if self.spec.traps:
            traps = (
                '<a href="/calendar/2026/01">Archive</a> <a href="/shop?color=red">Shop</a> '
                f'<a href="/a/b/">Sections</a> <a href="{path}{"&" if "?" in path else "?"}sid={TOKEN}">Sign in</a> '
            )
        foot = (
            f'<footer><p><a href="/about/">About</a> <a href="/">Home</a> {traps}</p>'
            f"<p>© 2026 {escape(self.spec.name)} media. All rights reserved. Cookie settings. Terms.</p></footer>\n"
            "</body>\n</html>\n"
        )
        return head, foot

    def _spell_listing(self, topic: str, n: int, k: int) -> str:
        canonical = self.listing_path(topic, n)
        if not self.spec.link_spellings:
            return self.origin + canonical
        if n == 1:
            return (canonical, self.origin + canonical, f"/topics/{topic}")[k % 2] if k % 5 else canonical
        if k % 2:
            return f"/topics/{topic}/?page={n}&amp;order=recent"  # permuted query
        return escape(canonical)

    def _listing_html(self, topic: str, n: int, total: int, items: list[PageModel], path: str) -> str:
        head_extra = ""
        if n < total:
            head_extra += f'<link rel="next" href="{escape(self.listing_path(topic, n + 1))}">\n'
        if n > 1:
            head_extra += f'<link rel="prev" href="{escape(self.listing_path(topic, n - 1))}">\n'
        head, foot = self._chrome(f"{topic.capitalize()} — page {n}", path, head_extra)
        rows = [
            f'<li><a href="{self.spell(p.path, path, p.id + n)}">{escape(self._title(p))}</a> '
            f'<time datetime="{w3c_date(p.published_ts)}">{time.strftime("%d %b %Y", time.gmtime(p.published_ts))}'
            "</time></li>"
            for p in items
        ]
        pager = " ".join(
            f'<a href="{self._spell_listing(topic, i, i + n)}">{i}</a>' if i != n else f"<b>{i}</b>"
            for i in range(1, total + 1)
        )
        if n < total:
            pager += f' <a rel="next" href="{escape(self.listing_path(topic, n + 1))}">Next »</a>'
        return (
            f'{head}<main><h1>{topic.capitalize()}</h1>\n{self.facet_nav(topic)}<ul class="list">\n'
            + "\n".join(rows) + "\n</ul>\n"
            f'<nav class="pagination">{pager}</nav></main>\n{foot}'
        )

    def _build_home(self) -> None:
        head, foot = self._chrome(f"{self.spec.name} — home", "/")
        sections = "".join(
            f'<li><a href="{self._spell_listing(t, 1, i + 3)}">{t.capitalize()} stories</a></li>'
            for i, t in enumerate(self.model.topics)
        )
        odd = '<p><a href="/hostile/">Odd corners of this site</a></p>' if self.spec.hostile else ""
        html = f"{head}<main><h1>Welcome to {escape(self.spec.name)}</h1><ul>{sections}</ul>{odd}</main>\n{foot}"
        self._put("/", make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH))
        about_head, about_foot = self._chrome("About", "/about/")
        about = f"{about_head}<main><h1>About</h1><p>A test site.</p></main>{about_foot}"
        self._put("/about/", make_resource(200, HTML, about, weak=True, lm_ts=BASE_EPOCH))

    # ----------------------------------------------------------------- details

    def spell(self, target: str, source: str, k: int) -> str:
        """One of many spellings of a link to ``target`` (an absolute path) on a page at ``source``."""
        o = self.origin
        if not self.spec.link_spellings:
            return o + target
        v = ((k * 2_654_435_761) >> 7) % 12  # spread spellings evenly whatever the ids' residues
        if v == 0:
            return o + target
        if v == 1:
            return o + target + "?utm_source=newsletter&amp;utm_medium=email"
        if v == 2:
            return target + "#comments"
        if v == 3:
            return "HTTP://" + self.netloc.upper() + target  # upper-case scheme and host
        if v in (4, 5):
            src_dir = source.split("?", 1)[0].rsplit("/", 1)[0] or "/"
            rel = posixpath.relpath(target, src_dir)
            if target.endswith("/"):
                rel += "/"
            return ("./" + rel) if v == 5 and not rel.startswith("..") else rel
        if v == 6:
            return target + "?utm_campaign=related&amp;ref=sidebar"
        if v == 7:
            return target + "?ref=sidebar&amp;utm_campaign=related"  # the same query, permuted
        if v == 8:
            return "//" + self.netloc + target
        if v == 9:
            head, _, tail = target.rstrip("/").rpartition("/")
            return o + head + "/./" + tail + ("/" if target.endswith("/") else "")
        if v == 10:
            return "  " + o + target + " "
        return o + target.replace("-", "%2D", 1)

    def detail(self, page: PageModel) -> Resource:
        cached = self._details.get(page.id)
        if cached is not None and cached[0] == (page.version, page.style):
            return cached[1]
        res = self._render_detail(page)
        self._details[page.id] = ((page.version, page.style), res)
        return res

    def _render_detail(self, page: PageModel) -> Resource:
        rng = self.model._rng("text", page.id, page.version)
        title = self._title(page)
        url = self.origin + page.path
        desc = _sentences(rng.choices, rng.randint, 1)
        related_ids = []
        pool = [i for i in self.model.linkable if i != page.id and i < max(page.id, self.model.initial_pages)]
        link_rng = self.model._rng("links", page.id)
        if pool:
            related_ids = link_rng.sample(pool, min(8, len(pool)))
        related = "".join(
            f'<li><a href="{self.spell(self.model.pages[i].path, page.path, page.id + j)}">'
            f"{escape(self._title(self.model.pages[i]))}</a></li>"
            for j, i in enumerate(related_ids)
        )
        jsonld = json.dumps(
            {
                "@context": "https://schema.org",
                "@type": "Article",
                "headline": title,
                "description": desc,
                "datePublished": w3c_date(page.published_ts),
                "dateModified": w3c_date(page.modified_ts),
                "author": {"@type": "Person", "name": f"Author {page.id % 17}"},
                "publisher": {"@type": "Organization", "name": self.spec.name},
                "articleSection": page.topic,
                "mainEntityOfPage": url,
            }
        )
        head_extra = (
            f'<meta name="description" content="{escape(desc)}">\n<link rel="canonical" href="{url}">\n'
            f'<meta property="og:title" content="{escape(title)}">\n'
            f'<script type="application/ld+json">{jsonld}</script>\n'
        )
        head, foot = self._chrome(f"{title} | {self.spec.name}", page.path, head_extra)
        top = (
            f'{head}<div class="ad" id="ad-top">Sponsored · impression {TOKEN}</div>\n'
            f"<main>\n<article>\n<h1>{escape(title)}</h1>\n"
            f'<p class="byline">By Author {page.id % 17} · <time datetime="{w3c_date(page.published_ts)}">'
            f"{time.strftime('%d %B %Y', time.gmtime(page.published_ts))}</time></p>\n"
        )
        bottom = f'</article>\n<aside class="related"><h2>Related</h2><ul>{related}</ul></aside>\n</main>\n{foot}'
        paragraphs = []
        budget = page.size - len(top) - len(bottom)
        while budget > 0:
            p = _sentences(rng.choices, rng.randint, rng.randint(3, 6))
            paragraphs.append(f"<p>{p}</p>")
            budget -= len(p) + 8
        # A restyle (``PageModel.style``) changes bytes outside the article only (after the paragraphs are sized):
        # a new payload, the same main text.
        promo = f'<div class="promo" data-edition="{page.style}">Edition {page.style}</div>\n' if page.style else ""
        html = top + "\n".join(paragraphs) + "\n" + bottom.replace("</main>\n", "</main>\n" + promo, 1)
        # Weak: the ad block differs per request; the validator tracks the main content (page version).
        etag = f'W/"p{page.id}v{page.version}' + (f's{page.style}"' if page.style else '"')
        return make_resource(200, HTML, html, etag=etag, lm_ts=page.modified_ts)

    # ----------------------------------------------------------------- traps

    def trap(self, path: str, query: str) -> Resource | None:
        """Infinite URL spaces: calendar, facets, repeating segments (session ids are links, see _chrome)."""
        m = _CAL_RE.fullmatch(path)
        if m:
            year, month = int(m.group(1)), int(m.group(2))
            if not 1 <= month <= 12:
                return None
            ny, nm = (year + 1, 1) if month == 12 else (year, month + 1)
            py, pm = (year - 1, 12) if month == 1 else (year, month - 1)
            head, foot = self._chrome(f"Archive {year}-{month:02d}", path)
            days = " ".join(f'<a href="/calendar/{year}/{month}?day={d}">{d}</a>' for d in range(1, 29, 3))
            html = (
                f"{head}<main><h1>Archive {year}-{month:02d}</h1><p>{days}</p>"
                f'<a rel="prev" href="/calendar/{py}/{pm:02d}">Previous</a> '
                f'<a rel="next" href="/calendar/{ny}/{nm:02d}">Next month</a></main>{foot}'
            )
            return make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
        if path == "/shop" or path == "/shop/":
            params = dict(kv.partition("=")[::2] for kv in query.split("&") if kv) if query else {}
            links = []
            for i, (facet, values) in enumerate(FACETS.items()):
                for j, value in enumerate(values):
                    combo = dict(params)
                    combo[facet] = value
                    items = list(combo.items())
                    if (i + j) % 2:
                        items.reverse()  # the same combination, another parameter order
                    links.append(f'<a href="/shop?{"&amp;".join(f"{k}={v}" for k, v in items)}">{value}</a>')
            page_n = int(params.get("page", "1")) if params.get("page", "1").isdigit() else 1
            nxt = dict(params)
            nxt["page"] = str(page_n + 1)
            links.append(f'<a rel="next" href="/shop?{"&amp;".join(f"{k}={v}" for k, v in nxt.items())}">More</a>')
            head, foot = self._chrome("Shop", path)
            html = f"{head}<main><h1>Shop</h1><p>{' '.join(links)}</p></main>{foot}"
            return make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
        if _REPEAT_RE.fullmatch(path):
            head, foot = self._chrome("Sections", path)
            html = f'{head}<main><h1>Sections</h1><a href="a/b/">More sections</a></main>{foot}'
            return make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
        return None


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
