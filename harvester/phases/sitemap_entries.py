"""What one sitemap answered in full becomes in the frontier: parsed off the loop, its entries admitted and written
in batches, then its document state saved, never before its URLs (invariant 5). Apart from the walk
(``discover_sitemaps``: which files, in what order, asked ahead, conditionally, through redirects) because this half
never asks anything: bytes in, the frontier's rows out, the same for a file the walk reached by whatever way."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Iterable
from datetime import datetime
from itertools import islice
from typing import Any

from harvester.discovery.sitemap_model import FEED_UNREAD, SitemapDoc
from harvester.discovery.sitemaps import finish_sitemap, prepare_sitemap
from harvester.errors import ContentRejected, NotASitemap
from harvester.phases.discover_context import HostContext
from harvester.phases.discover_feeds import FeedQueue
from harvester.records import DiscoveredUrl, DocumentState, ErrorClass, FetchResult, Source, UrlKind, provenance
from harvester.rules import revisit, revisit_documents
from harvester.runtime import db
from harvester.store_results import AddResult

logger = logging.getLogger(__name__)

ADMIT_CHUNK = 1_000
"""Sitemap entries admitted per ``Site.admit_published`` call: large enough to spread its per-call costs,
small enough that a 50,000-URL file is never held as records at once."""


class SitemapEntries:
    """One host's sitemap bodies into its frontier. A sitemap that turns out to be a feed is offered to ``feeds``."""

    def __init__(self, host: HostContext, feeds: FeedQueue, *, documents: set[str]) -> None:
        self.host = host
        self.feeds = feeds
        self.documents = documents
        """The sitemaps the walk names, asks or walks (its own set): a urlset listing one names no page."""

    async def read(
        self, url: str, result: FetchResult, body: bytes, *, probing: bool, known: DocumentState | None,
        now: datetime,
    ) -> list[tuple[str, datetime | None]] | None:
        """Parse, admit and record the sitemap ``url`` answered with ``body``; returns an index's children with the
        lastmod it gives each, or None when the file was refused (its refusal recorded)."""
        parsed = await self._parse(url, result, body, probing=probing, known=known, now=now)
        if parsed is None:
            return None
        return await self._record(url, result, body, parsed, known=known, now=now)

    async def _parse(
        self, url: str, result: FetchResult, body: bytes, *, probing: bool, known: DocumentState | None,
        now: datetime,
    ) -> tuple[SitemapDoc, int] | None:
        """The document and how many of its entries were admitted, or None when it was refused (recorded)."""
        try:
            # Inflating, proving and (for a plain urlset) scanning a large file is tens of milliseconds of CPU:
            # in a worker thread, so the other hosts' requests go on meanwhile. lxml's parser, if needed, is made
            # here, on the loop thread that reads its entries.
            settings = self.host.settings.discovery
            prepared = await asyncio.to_thread(prepare_sitemap, body, url=url, settings=settings)
            if isinstance(prepared, SitemapDoc):
                doc = prepared
            else:
                doc = finish_sitemap(prepared, settings=settings, feeds=False)
                if doc.parser == FEED_UNREAD:  # a feed named as a sitemap: feedparser in a thread, as for feeds
                    doc = await asyncio.to_thread(finish_sitemap, prepared, settings=settings)
            if doc.kind in ("rss", "atom"):
                self.feeds.offer(url)
            reread = known is not None and known.content_hash is not None
            return doc, await self._ingest_entries(doc.entries, source=url, fetched_at=now, reread=reread)
        except NotASitemap as exc:
            # A guessed path answered with a page (a soft 404): as good as a 404. A named one is the site's mistake.
            if not probing:
                self.host.problem(str(exc))
            await db(self.host.store.save_document,
                     self.host.failed(url, "sitemap", result, now, known, error=str(exc), unusable=True))
            return None
        except ContentRejected as exc:
            self.host.counters[f"rejected:{ErrorClass.BAD_CONTENT.value}"] += 1
            self.host.problem(f"sitemap {url} refused: {exc}")
            logger.warning(
                "sitemap %s refused: %s", url, exc, extra={"host": self.host.origin, "error_class": "bad_content"}
            )
            await db(self.host.store.save_document,
                     self.host.failed(url, "sitemap", result, now, known, error=str(exc), unusable=True))
            return None

    async def _record(
        self, url: str, result: FetchResult, body: bytes, parsed: tuple[SitemapDoc, int], *,
        known: DocumentState | None, now: datetime,
    ) -> list[tuple[str, datetime | None]]:
        """Report a sitemap read in full and save its state (re-checking what it stopped listing in the same
        transaction); returns an index's children with the lastmod it gives each."""
        doc, count = parsed
        kind = "sitemap_index" if doc.kind == "index" else "sitemap"
        # Only a sitemap read in full before can have stopped listing a URL (on a first read the check would scan
        # the host's every URL for nothing), and only a whole one says what it no longer lists.
        vanished = self.host.vanished(Source.SITEMAP, url, known, now) if doc.kind in ("urlset", "text") and not (
            doc.over_limit or doc.truncated or doc.malformed) else None
        children = [child for child in doc.children if self.host.site.canonicalize(child) != url]
        if len(children) != len(doc.children):
            self.host.counters["sitemap_loops"] += 1
            doc.problem("the index lists itself")
        self.host.counters["sitemaps_parsed"] += 1
        self.host.report.add_sitemap(url, kind, entries=count, over_limit=doc.over_limit, problems=doc.problems)
        if doc.over_limit:  # data left unread: the operator hears of it, not only the report
            self.host.problem(f"{kind.replace('_', ' ')} {url} is over the protocol's limits, only its first part was "
                              f"read: {'; '.join(doc.problems)}")
        elif doc.truncated:  # so is a file that ends early: what it lost is unknown
            self.host.problem(f"{kind.replace('_', ' ')} {url} ends early, only its whole entries were read: "
                              f"{'; '.join(doc.problems)}")
        elif doc.malformed:  # and one the XML parser recovered from: what it passed over is lost
            kept = f"{count} entries kept" if doc.kind != "index" else f"{len(children)} child sitemaps kept"
            self.host.problem(f"{kind.replace('_', ' ')} {url} is broken: {doc.malformed}; {kept}, any after the "
                              "error may be lost")
        elif doc.problems:  # entries of an odd shape (several <loc> in one, a control character refused): said too
            self.host.problem(f"{kind.replace('_', ' ')} {url}: {'; '.join(doc.problems)}")
        revisit_s = revisit_documents.revisit_s(kind, self.host.settings)
        dated_children = [
            (c, doc.child_lastmod.get(child)) for child in children if (c := self.host.site.canonicalize(child))
        ]
        canonical_children = [c for c, _ in dated_children]
        rechecked = await db(
            self.host.store.save_document,
            DocumentState(
                url=url, kind=kind, status=result.status, etag=result.etag, last_modified=result.last_modified,
                content_hash=hashlib.sha256(body).hexdigest(), fetched_at=now, read_at=now,
                next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit), url_count=count,
                children=tuple(canonical_children),
            ),
            vanished=vanished,
        )
        self.host.counters["urls_vanished_rechecked"] += rechecked
        return dated_children

    async def _ingest_entries(self, entries: Iterable[Any], *, source: str, fetched_at: datetime,
                              reread: bool = False) -> int:
        """Stream a sitemap's entries into the frontier in batches; never the whole file's records at once.

        Entries are admitted a chunk at a time (``Site.admit_published``): per-URL call layers, not SQL, are
        what sitemap ingestion spends its time on. One batch is written (in the store's thread, where SQLite
        runs without the GIL) while the next is parsed; every write has landed before this returns, so the
        sitemap's document state is never saved ahead of its URLs. The loop yields to the event loop after
        each chunk, so one large sitemap never stalls the other hosts' timers. The URLs robots.txt refuses are
        written a chunk at a time too (``HostContext.record_refused``; ``reread``: the first replaces what the
        file's previous read named).
        """
        label = provenance(Source.SITEMAP, source)
        replace = reread and self.host.rules.refuses_any
        batch: list[DiscoveredUrl] = []
        count = 0
        size = self.host.settings.discovery.batch_size
        chunk_size = min(size, ADMIT_CHUNK)
        iterator = iter(entries)
        writing: asyncio.Future[AddResult] | None = None
        other_scheme = _other_scheme(source)
        dropped: list[str] = []
        try:
            while chunk := list(islice(iterator, chunk_size)):
                count += len(chunk)
                admitted = self.host.site.admit_published(
                    chunk, where=source, origin=self.host.origin, now=fetched_at, fetched_at=fetched_at,
                    allowed=self.host.rules.allowed,
                )
                if other_scheme and any(e.loc[:len(other_scheme)].lower() == other_scheme for e in chunk):
                    dropped += _dropped_other_scheme(chunk, admitted, other_scheme)
                if any(item.url in self.documents for item in admitted):
                    admitted = [item for item in admitted if item.url not in self.documents]
                self.host.sitemap_dates.add(item.lastmod for item in admitted if item.kind is UrlKind.DETAIL)
                await self.host.record_refused(label, replace=replace)
                replace = False
                batch += admitted
                if len(batch) >= size:
                    if writing is not None:
                        pending, writing = writing, None  # its error, if any, is raised here and only here
                        await pending
                    writing = asyncio.ensure_future(self.host.urls.add(batch))
                    batch = []
                await asyncio.sleep(0)
        except BaseException:
            # The write in flight finishes (no task outlives the host), but the error that stopped the parse,
            # a cancellation included, is the one raised.
            if writing is not None:
                try:
                    await writing
                except Exception as exc:  # logged: the error raised is the one that stopped the parse
                    logger.warning("%s: a write in flight failed too: %s", self.host.origin, exc,
                                   extra={"error_class": "storage"})
            raise
        if writing is not None:
            await writing
        await self.host.urls.add(batch)
        if replace:  # an empty file: what it named before is named no more
            await self.host.record_refused(label, replace=True)
        if dropped:
            self.host.counters[f"rejected:{OTHER_SCHEME}"] += len(dropped)
            self.host.problem(
                f"sitemap {source}: {len(dropped)} entries of another protocol than the sitemap's dropped "
                f"({OTHER_SCHEME}: a sitemap's URLs use its protocol and host, sitemaps.org), e.g. {dropped[0]}")
        return count


OTHER_SCHEME = "out_of_scope:other_scheme"
"""The class of a sitemap entry on the sitemap's own host under the other scheme that the scope refused (an http
sitemap naming https://its-host/x): dropped, no request, counted and said as a problem."""


def _other_scheme(source: str) -> str | None:
    """``https://host/`` for a sitemap at ``http://host/...`` (and the reverse)."""
    scheme, _, rest = source.partition("://")
    other = {"http": "https", "https": "http"}.get(scheme.lower())
    return f"{other}://{rest.partition('/')[0].lower()}/" if other else None


def _dropped_other_scheme(chunk: list[Any], admitted: list[DiscoveredUrl], other: str) -> list[str]:
    """The chunk's entries under ``other`` (the sitemap's host, the other scheme) that admission refused."""
    kept = {item.url for item in admitted if item.url.startswith(other)}
    return [e.loc for e in chunk if e.loc[:len(other)].lower() == other and e.loc not in kept]
