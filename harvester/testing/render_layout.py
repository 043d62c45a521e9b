"""The test web's page layout: the chrome every HTML page of a site shares, its paths, the many spellings of a
link to one of its pages, and the Last-Modified its aggregate documents carry from one rebuild to the next."""

from __future__ import annotations

import posixpath
from html import escape

from harvester.testing.resources import TOKEN, Resource, make_resource
from harvester.testing.sites import BASE_EPOCH, DAY_S, HostSpec, PageModel, SiteModel

STYLE = (
    "body{font-family:Georgia,serif;margin:0;color:#222}header,footer{background:#f4f4f4;padding:1em}"
    "nav a{margin-right:1em}main{max-width:46em;margin:auto;padding:1em}.ad{border:1px dashed #aaa;"
    "padding:.5em;margin:1em 0;font-size:.8em}aside{font-size:.9em}footer{font-size:.8em;color:#555}"
)


class Layout:
    """How one site's pages look and link to each other. Reads the site's model (``ServedSite`` changes it);
    holds nothing that changes."""

    def __init__(self, spec: HostSpec, model: SiteModel, origin: str) -> None:
        self.spec = spec
        self.model = model
        self.origin = origin
        self.netloc = origin.split("://", 1)[1]

    def sitemap_paths(self) -> list[str]:
        n = self.spec.sitemap_children
        return [f"/sitemaps/pages-{i + 1}.xml" + (".gz" if i == 0 and n > 1 else "") for i in range(n)]

    def feed_paths(self) -> dict[str, str]:
        return {kind: f"/feeds/{kind}.xml" for kind in self.spec.feeds}

    def listing_path(self, topic: str, n: int = 1) -> str:
        return f"/topics/{topic}/" + ("" if n == 1 else f"?order=recent&page={n}")

    def title(self, p: PageModel) -> str:
        return p.slug.replace("-", " ").capitalize()

    def chrome(self, title: str, path: str, head_extra: str = "") -> tuple[str, str]:
        """Header (with nav) and footer boilerplate shared by every HTML page."""
        nav = " ".join(
            f'<a href="{self.spell_listing(t, 1, i)}">{t.capitalize()}</a>' for i, t in enumerate(self.model.topics)
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

    def spell_listing(self, topic: str, n: int, k: int) -> str:
        canonical = self.listing_path(topic, n)
        if not self.spec.link_spellings:
            return self.origin + canonical
        if n == 1:
            return (canonical, self.origin + canonical, f"/topics/{topic}")[k % 2] if k % 5 else canonical
        if k % 2:
            return f"/topics/{topic}/?page={n}&amp;order=recent"  # permuted query
        return escape(canonical)

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


class Carried:
    """The Last-Modified of each aggregate document (sitemap, feed, listing page) across rebuilds: the one state
    they share, owned here."""

    def __init__(self, model: SiteModel) -> None:
        self.model = model
        self._carried: dict[str, tuple[str | None, float | None]] = {}

    def _now_ts(self) -> int:
        """Noon of the current day: later than every page change of that day (those happen before 06:00)."""
        return BASE_EPOCH + self.model.day * DAY_S + 43_200

    def carry(self, path: str, ctype: str, body: str | bytes, first_lm: float, *, weak: bool = False) -> Resource:
        """Last-Modified of an aggregate is the time of its last content change: kept while the ETag is
        unchanged, else moved to now; so If-Modified-Since never misses a change."""
        prev = self._carried.get(path)
        lm = prev[1] if prev and prev[1] is not None else first_lm
        res = make_resource(200, ctype, body, weak=weak, lm_ts=lm)
        if prev is not None and prev[0] != res.etag:
            res = make_resource(200, ctype, body, weak=weak, lm_ts=float(self._now_ts()))
        self._carried[path] = (res.etag, res.lm_ts)
        return res
