"""The test web's feeds: RSS, Atom and JSON Feed documents of a site, paged (RFC 5005: pages and archives) as its
spec says."""

from __future__ import annotations

import re
from html import escape

from harvester.testing.render_layout import Carried, Layout
from harvester.testing.resources import Resource, http_date, w3c_date
from harvester.testing.sites import BASE_EPOCH, PageModel


def feed_page_url(head_url: str, n: int) -> str:
    return head_url if n == 1 else f"{head_url}?page={n}"


FEED_QUERY_RE = re.compile(r"(?:^|&)(page|archive)=(\d{1,6})(?:&|$)")


def feed_key(query: str) -> str:
    """The feed document a query names: "" (the head, also ``page=1``), ``page=N`` or ``archive=N``."""
    m = FEED_QUERY_RE.search(query) if query else None
    if m is None or (m.group(1) == "page" and int(m.group(2)) == 1):
        return ""
    return f"{m.group(1)}={int(m.group(2))}"


class FeedDocs:
    """Builds one site's feed documents from its model; what they built is the caller's (``ServedSite``)."""

    def __init__(self, layout: Layout, carried: Carried) -> None:
        self.layout = layout
        self.spec = layout.spec
        self.model = layout.model
        self.origin = layout.origin
        self.carried = carried

    def build(self) -> dict[str, dict[str, Resource]]:
        """Feed path -> its documents by ``feed_key``, per ``HostSpec.feed_paging``: the head lists the newest
        ``feed_entries`` entries."""
        feeds: dict[str, dict[str, Resource]] = {}
        spec = self.spec
        size = spec.feed_entries
        for kind, path in self.layout.feed_paths().items():
            if kind not in ("rss", "atom"):
                continue
            items = self.model.feed_items("updated" if kind == "atom" else "published")
            docs: dict[str, Resource] = {}
            head_url = self.origin + path
            if spec.feed_paging == "next":
                chunks = [items[i : i + size] for i in range(0, len(items), size)] or [[]]
                for n, chunk in enumerate(chunks, start=1):
                    links = [("self", feed_page_url(head_url, n)), ("first", head_url)]
                    if n > 1:
                        links.append(("previous", feed_page_url(head_url, n - 1)))
                    if n < len(chunks):
                        links.append(("next", feed_page_url(head_url, n + 1)))
                    docs["" if n == 1 else f"page={n}"] = self._feed_doc(kind, path, chunk, links, archive=False, key=n)
            elif spec.feed_paging == "archive":
                archives = self.model.feed_archives()
                archived = {p.id for chunk in archives for p in chunk}
                head = items[:size] + [p for p in items[size:] if p.id not in archived]
                links = [("self", head_url)]
                if archives:
                    links.append(("prev-archive", f"{head_url}?archive={len(archives)}"))
                docs[""] = self._feed_doc(kind, path, head, links, archive=False, key=0)
                for j, chunk in enumerate(archives, start=1):
                    links = [("self", f"{head_url}?archive={j}"), ("current", head_url)]
                    if j > 1:
                        links.append(("prev-archive", f"{head_url}?archive={j - 1}"))
                    links.append(("next-archive", f"{head_url}?archive={j + 1}" if j < len(archives) else head_url))
                    docs[f"archive={j}"] = self._feed_doc(kind, path, chunk, links, archive=True, key=-j)
            else:
                docs[""] = self._feed_doc(kind, path, items[:size], [("self", head_url)], archive=False, key=0)
            feeds[path] = docs
        return feeds

    def _feed_doc(
        self, kind: str, path: str, items: list[PageModel], links: list[tuple[str, str]], *, archive: bool, key: int
    ) -> Resource:
        """One RSS 2.0 or Atom document; paging links are RFC 5005 ``atom:link`` elements (in RSS too)."""
        newest = max((p.modified_ts for p in items), default=BASE_EPOCH)
        name = escape(self.spec.name)
        marker = '<fh:archive xmlns:fh="http://purl.org/syndication/history/1.0"/>' if archive else ""
        if kind == "rss":
            atom_links = "".join(f'<atom:link rel="{rel}" href="{escape(href)}"/>' for rel, href in links)
            parts = [
                '<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">'
                "<channel>",
                f"<title>{name} news</title><link>{self.origin}/</link><description>Latest from {name}"
                f"</description><lastBuildDate>{http_date(newest)}</lastBuildDate>{atom_links}{marker}",
            ]
            for p in items:
                link = self.origin + p.path + ("?utm_source=rss&amp;utm_medium=feed" if p.id % 2 else "")
                parts.append(
                    f"<item><title>{escape(self.layout.title(p))}</title><link>{link}</link>"
                    f'<guid isPermaLink="false">{name}-{p.id}</guid><pubDate>{http_date(p.published_ts)}'
                    f"</pubDate><description>Story {p.id} in {p.topic}.</description></item>"
                )
            parts.append("</channel></rss>\n")
            ctype = "application/rss+xml"
        else:
            atom_links = "".join(f'<link rel="{rel}" href="{escape(href)}"/>' for rel, href in links)
            parts = [
                '<?xml version="1.0" encoding="utf-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">',
                f'<title>{name} news</title><link href="{self.origin}/"/>{atom_links}<id>{self.origin}/</id>'
                f"<updated>{w3c_date(newest)}</updated>{marker}",
            ]
            for p in items:
                parts.append(
                    f'<entry><title>{escape(self.layout.title(p))}</title><link href="{self.origin}{p.path}"/>'
                    f"<id>tag:{name},2026:{p.id}</id><published>{w3c_date(p.published_ts)}</published>"
                    f"<updated>{w3c_date(p.modified_ts)}</updated><summary>Story {p.id} in {p.topic}."
                    "</summary></entry>"
                )
            parts.append("</feed>\n")
            ctype = "application/atom+xml"
        body = "\n".join(parts).encode()
        return self.carried.carry(f"{path}#{key}", ctype, body, newest)
