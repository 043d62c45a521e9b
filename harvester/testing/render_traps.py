"""The test web's traps: infinite URL spaces (a calendar, faceted shop pages, repeating segments) a crawler must
not walk into forever; session ids are links on every page (``Layout.chrome``)."""

from __future__ import annotations

import re

from harvester.testing.render_layout import Layout
from harvester.testing.resources import HTML, Resource, make_resource
from harvester.testing.sites import BASE_EPOCH

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


def trap(layout: Layout, path: str, query: str) -> Resource | None:
    """Infinite URL spaces: calendar, facets, repeating segments (session ids are links, see ``Layout.chrome``)."""
    m = _CAL_RE.fullmatch(path)
    if m:
        year, month = int(m.group(1)), int(m.group(2))
        if not 1 <= month <= 12:
            return None
        ny, nm = (year + 1, 1) if month == 12 else (year, month + 1)
        py, pm = (year - 1, 12) if month == 1 else (year, month - 1)
        head, foot = layout.chrome(f"Archive {year}-{month:02d}", path)
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
        head, foot = layout.chrome("Shop", path)
        html = f"{head}<main><h1>Shop</h1><p>{' '.join(links)}</p></main>{foot}"
        return make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
    if _REPEAT_RE.fullmatch(path):
        head, foot = layout.chrome("Sections", path)
        html = f'{head}<main><h1>Sections</h1><a href="a/b/">More sections</a></main>{foot}'
        return make_resource(200, HTML, html, weak=True, lm_ts=BASE_EPOCH)
    return None
