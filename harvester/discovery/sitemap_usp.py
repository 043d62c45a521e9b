"""ultimate-sitemap-parser as a second parser of sitemap bytes: the differential reference the tests hold the own
parsers to (never its fetcher: synchronous and unconditional)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from harvester.discovery.sitemap_model import (
    XML_ENCODING,
    SitemapDoc,
    SitemapEntry,
    clean_text,
    lastmod_period,
    utc,
    validated_entries,
)
from harvester.discovery.sitemap_xml import add_child, finish_index, news_dict
from harvester.settings import DiscoverySettings

# --- ultimate-sitemap-parser -------------------------------------------------------------------------------


def decode_xml(body: bytes) -> str:
    """``body`` as text for usp (which takes ``str``): BOM, then the XML declaration, then UTF-8."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if body.startswith(bom):
            return body.decode(codec, errors="replace").lstrip("\ufeff")
    declared = XML_ENCODING.match(body[:200])
    codec = declared.group(1).decode("ascii") if declared else "utf-8"
    try:
        return body.decode(codec, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


class _Period(datetime):
    """A lastmod as usp's parser hands it back here: the start of the period its text names, and that period's end
    (``until``, None for a moment)."""

    until: datetime | None = None

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # usp pickles a sitemap's pages to a temporary file: datetime's own pickling would drop ``until``.
        return _period, (self.isoformat(), self.until)


def _period(moment: str, until: datetime | None) -> _Period:
    start = datetime.fromisoformat(moment)
    period = _Period(start.year, start.month, start.day, start.hour, start.minute, start.second, start.microsecond,
                     tzinfo=start.tzinfo)
    period.until = until
    return period


def _w3c_date(date_string: str) -> datetime | None:
    """usp's ``parse_iso8601_date``, replaced: its fallback (dateutil's ``parse``) fills a reduced-precision date's
    missing parts from today, so "2026-12" read on 7 December was 2026-12-07 and "2026" 2026-12-07 too. The project's
    parser reads the start of the period named, and keeps its end."""
    start, until = lastmod_period(date_string)
    return None if start is None else _period(start.isoformat(), until)


def parse_usp(body: bytes, url: str, settings: DiscoverySettings) -> SitemapDoc:
    import usp.fetch_parse
    from usp.objects.sitemap import (
        AbstractIndexSitemap,
        InvalidSitemap,
        PagesAtomSitemap,
        PagesRSSSitemap,
        PagesXMLSitemap,
    )
    from usp.tree import sitemap_from_str

    usp.fetch_parse.parse_iso8601_date = _w3c_date  # type: ignore[attr-defined]  # the one usp's <lastmod> reads

    parsed = sitemap_from_str(decode_xml(body))
    doc = SitemapDoc(url=url, kind="unknown", entries=iter(()), parser="usp")
    if isinstance(parsed, AbstractIndexSitemap):
        doc.kind = "index"
        for child in parsed.sub_sitemaps:
            add_child(doc, clean_text(child.url), None, settings.max_sitemap_urls)
            if doc.over_limit:
                break
        finish_index(doc, 0)
        return doc
    if isinstance(parsed, InvalidSitemap):
        doc.problem(f"usp: {parsed.reason}")
        return doc
    doc.kind = (
        "urlset"
        if isinstance(parsed, PagesXMLSitemap)
        else "rss"
        if isinstance(parsed, PagesRSSSitemap)
        else "atom"
        if isinstance(parsed, PagesAtomSitemap)
        else "unknown"
    )
    doc.entries = validated_entries(doc, (_from_usp(page) for page in parsed.pages), settings.max_sitemap_urls)
    return doc


def _from_usp(page: Any) -> SitemapEntry:
    story = page.news_story
    news = None
    if story is not None:
        news = news_dict(
            title=story.title,
            publish_date=story.publish_date,
            publication_name=story.publication_name,
            publication_language=story.publication_language,
            access=story.access,
            genres=list(story.genres),
            keywords=list(story.keywords),
            stock_tickers=list(story.stock_tickers),
        )
    images = [loc for image in page.images or () if (loc := clean_text(image.loc))]
    return SitemapEntry(
        loc=page.url,
        # usp hands back "" (not None) for an empty <lastmod></lastmod>.
        lastmod=utc(page.last_modified) if isinstance(page.last_modified, datetime) else None,
        lastmod_until=getattr(page.last_modified, "until", None),
        changefreq=getattr(page.change_frequency, "value", None),  # "" for an empty element, as lastmod
        priority=float(page.priority) if page.priority is not None else None,
        news=news,
        images=images or (),
    )
