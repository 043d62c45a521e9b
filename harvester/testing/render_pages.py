"""The test web's aggregate documents of a site: robots.txt, the sitemaps, the topic listings and the home page,
built again each day (``ServedSite.rebuild``)."""

from __future__ import annotations

import gzip
import time
from html import escape
from xml.sax.saxutils import escape as xml_escape

from harvester.testing.render_facets import FacetPages
from harvester.testing.render_layout import Carried, Layout
from harvester.testing.resources import HTML, Resource, make_resource, w3c_date
from harvester.testing.sites import BASE_EPOCH, DISALLOWED_PREFIX, HostSpec, PageModel


def robots_text(spec: HostSpec, origin: str) -> str:
    """The robots.txt of a site as its spec says (also what ``truth`` parses: no server needed)."""
    r = spec.robots
    if r.body is not None:
        return r.body.replace("{origin}", origin)
    disallow = list(r.disallow)
    if spec.disallowed_in_sitemap > 0:
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
    if r.sitemaps and spec.sitemap_children > 0:
        lines += ["", f"Sitemap: {origin}/sitemap_index.xml"]
    return "\n".join(lines) + "\n"


class SitePages:
    """Builds one site's aggregate documents from its model; what they built is the caller's (``ServedSite``)."""

    def __init__(self, layout: Layout, carried: Carried, facets: FacetPages) -> None:
        self.layout = layout
        self.spec = layout.spec
        self.model = layout.model
        self.origin = layout.origin
        self.carried = carried
        self.facets = facets

    def robots(self) -> dict[str, Resource]:
        out: dict[str, Resource] = {}
        r = self.spec.robots
        text = robots_text(self.spec, self.origin)
        if r.status == 200:
            out["/robots.txt"] = make_resource(200, "text/plain; charset=utf-8", text, lm_ts=BASE_EPOCH)
        elif 300 <= r.status < 400:
            target = r.redirect_to or "/robots-moved.txt"
            out["/robots.txt"] = make_resource(r.status, HTML, "moved", headers=(("Location", target),))
            if target.startswith("/"):
                out[target] = make_resource(200, "text/plain; charset=utf-8", text, lm_ts=BASE_EPOCH)
        else:
            out["/robots.txt"] = make_resource(r.status, "text/plain", f"status {r.status}\n")
        return out

    def sitemaps(self) -> dict[str, Resource]:
        out: dict[str, Resource] = {}
        n = self.spec.sitemap_children
        if n <= 0:
            return out
        groups: list[list[PageModel]] = [[] for _ in range(n)]
        for p in self.model.pages:
            if p.live and p.in_sitemap:
                groups[self.model.sitemap_child_of(p)].append(p)
        index_entries = []
        for path, group in zip(self.layout.sitemap_paths(), groups, strict=True):
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
            res = self.carried.carry(path, ctype, body, first)
            out[path] = res
            index_entries.append(
                f"<sitemap><loc>{self.origin}{path}</loc><lastmod>{w3c_date(res.lm_ts or first)}</lastmod></sitemap>"
            )
        index = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            + "\n".join(index_entries)
            + "\n</sitemapindex>\n"
        )
        out["/sitemap_index.xml"] = self.carried.carry("/sitemap_index.xml", "application/xml", index, BASE_EPOCH)
        if self.spec.sitemap_redirect:
            out["/sitemap.xml"] = make_resource(
                301, HTML, "moved", headers=(("Location", "/sitemap_index.xml"),), validators=False)
        return out

    def listings(self) -> dict[str, list[Resource]]:
        listings: dict[str, list[Resource]] = {}
        for topic in self.model.topics:
            base = self.layout.listing_path(topic)
            chunks = self.model.listing_pages(topic)
            out = []
            for i, items in enumerate(chunks, start=1):
                path = self.layout.listing_path(topic, i)
                html = self._listing_html(topic, i, len(chunks), items, path)
                first = max((p.modified_ts for p in items), default=BASE_EPOCH)
                out.append(self.carried.carry(path, HTML, html, first, weak=True))
            listings[base] = out
        return listings

    def _listing_html(self, topic: str, n: int, total: int, items: list[PageModel], path: str) -> str:
        head_extra = ""
        if n < total:
            head_extra += f'<link rel="next" href="{escape(self.layout.listing_path(topic, n + 1))}">\n'
        if n > 1:
            head_extra += f'<link rel="prev" href="{escape(self.layout.listing_path(topic, n - 1))}">\n'
        head, foot = self.layout.chrome(f"{topic.capitalize()} — page {n}", path, head_extra)
        rows = [
            f'<li><a href="{self.layout.spell(p.path, path, p.id + n)}">{escape(self.layout.title(p))}</a> '
            f'<time datetime="{w3c_date(p.published_ts)}">{time.strftime("%d %b %Y", time.gmtime(p.published_ts))}'
            "</time></li>"
            for p in items
        ]
        pager = " ".join(
            f'<a href="{self.layout.spell_listing(topic, i, i + n)}">{i}</a>' if i != n else f"<b>{i}</b>"
            for i in range(1, total + 1)
        )
        if n < total:
            pager += f' <a rel="next" href="{escape(self.layout.listing_path(topic, n + 1))}">Next »</a>'
        return (
            f'{head}<main><h1>{topic.capitalize()}</h1>\n{self.facets.nav(topic)}<ul class="list">\n'
            + "\n".join(rows) + "\n</ul>\n"
            f'<nav class="pagination">{pager}</nav></main>\n{foot}'
        )

    def home(self) -> dict[str, Resource]:
        out: dict[str, Resource] = {}
        head, foot = self.layout.chrome(f"{self.spec.name} — home", "/")
        sections = "".join(
            f'<li><a href="{self.layout.spell_listing(t, 1, i + 3)}">{t.capitalize()} stories</a></li>'
            for i, t in enumerate(self.model.topics)
        )
        odd = '<p><a href="/hostile/">Odd corners of this site</a></p>' if self.spec.hostile else ""
        html = f"{head}<main><h1>Welcome to {escape(self.spec.name)}</h1><ul>{sections}</ul>{odd}</main>\n{foot}"
        out["/"] = make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
        about_head, about_foot = self.layout.chrome("About", "/about/")
        about = f"{about_head}<main><h1>About</h1><p>A test site.</p></main>{about_foot}"
        out["/about/"] = make_resource(200, HTML, about, weak=True, lm_ts=BASE_EPOCH)
        return out
