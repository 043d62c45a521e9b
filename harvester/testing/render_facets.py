"""The test web's faceted listings (``HostSpec.facets``): filter links on every listing page, one filter page per
value listing the topic's items that carry it, and presentation links answered with the plain listing."""

from __future__ import annotations

from html import escape

from harvester.testing.render_layout import Layout
from harvester.testing.resources import HTML, Resource, make_resource
from harvester.testing.sites import BASE_EPOCH, LISTING_FACETS

PRESENTATION_LINKS = ("sort=price", "view=grid", "per_page=48")
"""Links of every faceted listing page that only re-present it (sorted, as a grid, longer pages)."""


def facet_query(query: str) -> tuple[str, str] | None:
    """The (name, value) of the filter a listing query selects, or None (a plain listing, maybe re-presented)."""
    for piece in query.split("&"):
        name, _, value = piece.partition("=")
        if name in LISTING_FACETS and value in LISTING_FACETS[name]:
            return name, value
    return None


class FacetPages:
    """One site's filter pages and the filter links of its listing pages."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.spec = layout.spec
        self.model = layout.model

    def nav(self, topic: str) -> str:
        """The filter and presentation links of a faceted listing page ("" on a host without facets)."""
        if not self.spec.facets:
            return ""
        base = self.layout.listing_path(topic)
        groups = [
            f"<li>{name}: " + " ".join(f'<a href="{base}?{name}={value}">{value}</a>' for value in values) + "</li>"
            for name, values in LISTING_FACETS.items()
        ]
        shown = " ".join(f'<a href="{base}?{query}">{query.partition("=")[2]}</a>' for query in PRESENTATION_LINKS)
        return f'<aside class="filters"><ul>{"".join(groups)}</ul><p>Show: {shown}</p></aside>\n'

    def build(self) -> dict[tuple[str, str, str], Resource]:
        """(topic, filter name, value) -> the filter page ({} on a host without facets)."""
        pages: dict[tuple[str, str, str], Resource] = {}
        if not self.spec.facets:
            return pages
        for topic in self.model.topics:
            for name, values in LISTING_FACETS.items():
                for value in values:
                    pages[(topic, name, value)] = self._facet_page(topic, name, value)
        return pages

    def _facet_page(self, topic: str, name: str, value: str) -> Resource:
        path = f"{self.layout.listing_path(topic)}?{name}={value}"
        items = self.model.facet_items(topic, name, value)
        head, foot = self.layout.chrome(f"{topic.capitalize()} — {name} {value}", path)
        rows = "\n".join(
            f'<li><a href="{self.layout.spell(p.path, path, p.id)}">{escape(self.layout.title(p))}</a></li>'
            for p in items
        )
        html = (
            f'{head}<main><h1>{topic.capitalize()}: {escape(value)}</h1>\n{self.nav(topic)}'
            f'<ul class="list">\n{rows}\n</ul></main>\n{foot}'
        )
        first = max((p.modified_ts for p in items), default=BASE_EPOCH)
        return make_resource(200, HTML, html, weak=True, lm_ts=first)
