"""The test web's detail pages: an article per page version, rendered the first time it is asked and kept until
the page changes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from html import escape

from harvester.testing.render_layout import Layout
from harvester.testing.resources import HTML, TOKEN, Resource, make_resource, w3c_date
from harvester.testing.sites import WORDS, PageModel


def _sentences(rng_choices: Callable[..., list[str]], randint: Callable[[int, int], int], n: int) -> str:
    out = []
    for _ in range(n):
        words = " ".join(rng_choices(WORDS, k=randint(8, 22)))
        out.append(words[0].upper() + words[1:] + ".")
    return " ".join(out)


class Details:
    """One site's detail pages, each version rendered once (the cache is this object's own)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.spec = layout.spec
        self.model = layout.model
        self.origin = layout.origin
        self._details: dict[int, tuple[tuple[int, int], Resource]] = {}

    def page(self, page: PageModel) -> Resource:
        cached = self._details.get(page.id)
        if cached is not None and cached[0] == (page.version, page.style):
            return cached[1]
        res = self._render(page)
        self._details[page.id] = ((page.version, page.style), res)
        return res

    def _render(self, page: PageModel) -> Resource:
        rng = self.model._rng("text", page.id, page.version)
        title = self.layout.title(page)
        url = self.origin + page.path
        desc = _sentences(rng.choices, rng.randint, 1)
        related_ids = []
        pool = [i for i in self.model.linkable if i != page.id and i < max(page.id, self.model.initial_pages)]
        link_rng = self.model._rng("links", page.id)
        if pool:
            related_ids = link_rng.sample(pool, min(8, len(pool)))
        related = "".join(
            f'<li><a href="{self.layout.spell(self.model.pages[i].path, page.path, page.id + j)}">'
            f"{escape(self.layout.title(self.model.pages[i]))}</a></li>"
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
        head, foot = self.layout.chrome(f"{title} | {self.spec.name}", page.path, head_extra)
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
