"""The feeds of one host: read incrementally (RFC 5005 pages and archives), a feed that repeats another recognised."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from harvester.discovery.feeds import FeedDoc, numbered_successors, parse_feed
from harvester.phases.discover_base import (
    ANY_MEDIA_TYPE,
    MAX_FEED_ENTRIES_REMEMBERED,
    DiscoveryBase,
    unreadable_count,
)
from harvester.records import (
    DiscoveredUrl,
    DocumentState,
    FetchResult,
    Source,
    Validators,
    origin_of,
)
from harvester.rules import revisit
from harvester.runtime import aware, db, settle, utcnow

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _FeedRead:
    """One feed document read and ingested: its parse and what its entries were to the frontier."""

    doc: FeedDoc
    admitted: int
    fresh: int
    """Admitted entries first found after our previous read of the feed (all of them on a first read)."""
    dates: tuple[datetime | None, ...]
    state: DocumentState
    repeats: bool
    """Every admitted entry had already come from another feed document of this host in this run."""

    def only_news(self, reference: datetime | None) -> bool:
        """Whether every admitted entry is news: dated after ``reference`` (our last read of the feed, on the
        server's clock) when it and every date are known, else first found after our last read. Then older
        entries may follow on the next page; otherwise a newest-first feed has nothing new beyond this one."""
        if self.admitted == 0:
            return False
        if reference is not None and all(d is not None for d in self.dates):
            return all(d is not None and d > reference for d in self.dates)
        return self.fresh >= self.admitted


MAX_FEED_PAGES_AHEAD = 4
"""Pages of a numbered feed asked ahead of the one being read: at most this many, and never past the host's limit
(each guess past the last page is a request for nothing)."""


class _Ahead:
    """Fetches of guessed feed pages under way: taken when a page names one, cancelled when the walk ends."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[FetchResult]] = {}

    def __contains__(self, url: str) -> bool:
        return url in self._tasks

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def ask(self, url: str, fetch: Coroutine[Any, Any, FetchResult]) -> None:
        self._tasks[url] = asyncio.ensure_future(fetch)

    @staticmethod
    def start(fetch: Coroutine[Any, Any, FetchResult]) -> asyncio.Task[FetchResult]:
        return asyncio.ensure_future(fetch)

    def take(self, url: str) -> asyncio.Task[FetchResult] | None:
        return self._tasks.pop(url, None)

    async def drop(self, *, cancel: bool) -> int:
        """End what no page named (a guess past the last page, or off a chain that changed its numbering), so none
        outlives the walk; returns how many were asked for nothing. A walk that ended normally lets them finish:
        a request cancelled in flight frees its slot at once while the server may still be answering it, so the
        host would see one more than its limit. A walk that failed or is being stopped cancels them."""
        tasks: list[asyncio.Task[Any]] = list(self._tasks.values())
        self._tasks.clear()
        await settle(tasks, cancel=cancel)
        return len(tasks)


class FeedReading(DiscoveryBase):
    """Feeds: queued as found, read newest page first, a feed that repeats another recognised."""

    async def _drain_feeds(self) -> None:
        while self._feeds:
            await self._feed(self._feeds.popleft())

    async def _feed(self, url: str) -> None:
        """A feed head, then its older documents (RFC 5005) while they may hold entries not seen before.

        First read: every ``rel="next"`` page and every ``prev-archive`` archive, up to ``max_feed_pages``. On a
        later read the head comes first (conditionally: a 304 ends it); a next page is read only when the page
        before it held nothing but news (entries dated after our last read of the head, on the server's clock,
        or, undated, URLs new to the frontier), since a feed lists newest first; archives never change
        (RFC 5005 §4), so known ones are walked past without a request and only new ones are read.
        """
        known = await db(self.store.get_document, url)
        if known is not None and not self._due(known):
            self.counters["documents_skipped"] += 1
            return
        if known is not None and known.kind == "feed_mirror" and self._mirror_fresh(known):
            self.counters["feed_mirrors_skipped"] += 1
            return
        last_read = known.fetched_at if known is not None and known.content_hash is not None else None
        head = await self._feed_document(url, "feed", known, last_read)
        if head is None:
            return
        if head.repeats or (known is not None and known.kind == "feed_mirror"):
            # Everything it lists came from another feed of this host in this run (the Atom twin of an RSS
            # feed, a category feed): poll it again only after feed_mirror_recheck_s, and read no older pages.
            # Once a mirror, its head is still read (an Atom twin ordered by `updated` shows edits of old
            # entries, which then differ from the twin's head) but its history is the twin's: never walked.
            self.counters["feeds_mirrored"] += 1
            await db(self.store.save_document, replace(head.state, kind="feed_mirror"))
            return
        rereading = known is not None and known.content_hash is not None
        reference = revisit.http_time(known.last_modified) if known is not None and rereading else None
        budget = self.settings.discovery.max_feed_pages - 1
        page: _FeedRead | None = head
        at, ahead = url, _Ahead()
        guessing = not rereading  # a first read takes every page: the next ones may be asked beside this one
        try:
            while page is not None and page.doc.next_page and budget > 0:
                if rereading and not page.only_news(reference):
                    self.counters["feed_pages_not_needed"] += 1
                    break
                target = page.doc.next_page
                if target in self._feed_docs_seen or not self.site.in_scope(target):
                    break
                budget -= 1
                page_known = await db(self.store.get_document, target)
                asked = ahead.take(target)
                if guessing and asked is None and ahead:
                    # The page named one we did not guess: this feed is not numbered by a constant step. No more
                    # guesses, so an irregular chain costs at most one limit's worth of them; those asked stay
                    # (a later page may still name one) until the walk ends.
                    guessing = False
                if guessing:
                    if asked is None:  # its own request first: the guesses queue behind it for the host's slots
                        asked = ahead.start(self._fetch_feed(target, page_known))
                    self._ask_ahead(ahead, at, target, budget)
                page = await self._feed_document(target, "feed_page", page_known, last_read, asked=asked)
                at = target
        except BaseException:
            self._unused_guesses(await ahead.drop(cancel=True))
            raise
        self._unused_guesses(await ahead.drop(cancel=False))
        archive = head.doc.prev_archive
        while archive is not None and budget > 0 and archive not in self._feed_docs_seen:
            if not self.site.in_scope(archive):
                break
            known_archive = await db(self.store.get_document, archive)
            if known_archive is not None and known_archive.content_hash is not None:
                self._feed_docs_seen.add(archive)
                self.counters["feed_archives_known"] += 1
                archive = known_archive.children[0] if known_archive.children else None
                continue
            budget -= 1
            read = await self._feed_document(archive, "feed_archive", known_archive, None)
            archive = read.doc.prev_archive if read is not None else None
        if budget <= 0 and ((page is not None and page.doc.next_page) or archive is not None):
            self._problem(f"feed {url}: more than {self.settings.discovery.max_feed_pages} documents; rest skipped")

    def _unused_guesses(self, count: int) -> None:
        if count:
            self.counters["feed_pages_guessed_unused"] += count

    def _fetch_feed(self, url: str, known: DocumentState | None) -> Coroutine[Any, Any, FetchResult]:
        return self.client.fetch(url, validators=known.validators if known else Validators(), accept=ANY_MEDIA_TYPE,
                                 max_bytes=self.settings.discovery.max_feed_bytes)

    def _ask_ahead(self, ahead: _Ahead, at: str, target: str, budget: int) -> None:
        """Ask the pages after ``target`` beside it, when ``at`` → ``target`` stepped one number of the URL: as
        many as the host's limit, within the page budget (``target`` itself is most often a guess already
        answered, so the next ones fill the host's slots; any beyond them wait for a slot as every request
        does). A paced host (Crawl-delay, request rate, a minimum delay) gains nothing from it: never guessed for."""
        gate = self.client.gate(origin_of(target))  # the feed's own host: it may be another one in scope
        if gate.interval_s > 0 or gate.crawl_delay_s or gate.request_rate_s:
            return
        for guess in numbered_successors(at, target, min(gate.limit, budget, MAX_FEED_PAGES_AHEAD)):
            if guess not in ahead and guess not in self._feed_docs_seen and self.site.in_scope(guess):
                self.counters["feed_pages_guessed"] += 1
                ahead.ask(guess, self._fetch_feed(guess, None))

    async def _feed_document(
        self, url: str, kind: str, known: DocumentState | None, last_read: datetime | None,
        *, asked: asyncio.Task[FetchResult] | None = None,
    ) -> _FeedRead | None:
        """Fetch (conditionally) and ingest one feed document; None when it answered 304 or failed.
        ``last_read``: our previous read of the feed, to tell entries found since (None: all are new);
        ``asked``: its fetch, already under way (a guess the page before named, see ``_ask_ahead``)."""
        assert self.rules is not None
        self._feed_docs_seen.add(url)
        result = await (asked if asked is not None else self._fetch_feed(url, known))
        now = utcnow()
        if result.not_modified and known is not None and unreadable_count(known.error):
            await db(self.store.save_document, self._failed(url, kind, result, now, known, unusable=True))
            return None
        if result.not_modified and known is not None:
            self.counters["feeds_not_modified"] += 1
            await db(self.store.save_document, self._refetched(known, now))
            return None
        if not result.ok or result.body is None:
            self._failed_document(url, "feed", result)
            await db(self.store.save_document, self._failed(url, kind, result, now, known))
            return None
        # Off the event loop: feedparser reads a megabyte in about half a second (a malformed one, through its
        # loose parser, in more than one), and every other host's discovery would wait that long.
        doc = await asyncio.to_thread(parse_feed, result.body, url=url)
        for problem in doc.problems[:5]:
            self._problem(f"feed {url}: {problem}")
        batch: list[DiscoveredUrl] = []
        dates: list[datetime | None] = []
        for entry in doc.entries:
            # Only a modification date (Atom updated, JSON Feed date_modified) is stored as lastmod: an RSS
            # pubDate stays put when the page is edited, so as "lastmod" it would predict "unchanged" forever.
            item = self.site.admit(
                entry.link, base=url, source=Source.FEED, where=url, depth=1, now=now, allowed=self.rules.allowed,
                lastmod=entry.updated, published=entry.published, trusted=True, fetched_at=now,
                report_to=self.origin,
            )
            if item is not None:
                batch.append(item)
                dates.append(entry.lastmod)
        admitted = len(batch)
        urls = frozenset(item.url for item in batch)
        repeats = bool(urls) and urls <= self._feed_entries
        if len(self._feed_entries) < MAX_FEED_ENTRIES_REMEMBERED:
            self._feed_entries |= urls
        seen_before = await db(self.store.known_urls, list(urls), before=last_read) if last_read and urls else ()
        await self._flush(batch)
        self.counters["feeds_parsed" if kind == "feed" else "feed_pages_parsed"] += 1
        revisit_s = self.settings.discovery.feed_revisit_s
        state = DocumentState(
            url=url, kind=kind, status=result.status, etag=result.etag, last_modified=result.last_modified,
            content_hash=hashlib.sha256(result.body).hexdigest(), fetched_at=now, read_at=now,
            next_fetch_at=revisit.due_at(now, revisit_s, self.settings.revisit), url_count=len(doc.entries),
            # An archive leads to the one before it, so a later read can walk past known archives.
            children=(doc.prev_archive,) if kind == "feed_archive" and doc.prev_archive else (),
        )
        # A feed's head is re-read every run: an entry it showed last time and not now has been pushed out by
        # newer ones or deleted, and one conditional request tells which. Pages past the head shift every day.
        vanished = self._vanished(Source.FEED, url, known, now) if kind == "feed" else None
        self.counters["urls_vanished_rechecked"] += await db(self.store.save_document, state, vanished=vanished)
        return _FeedRead(doc=doc, admitted=admitted, fresh=admitted - len(seen_before), dates=tuple(dates),
                         state=state, repeats=repeats)

    def _mirror_fresh(self, known: DocumentState) -> bool:
        """A feed found to repeat another is skipped until our last read of it is ``feed_mirror_recheck_s`` old."""
        if known.fetched_at is None:
            return False
        age_s = (utcnow() - aware(known.fetched_at)).total_seconds()
        return age_s < self.settings.discovery.feed_mirror_recheck_s

    # -- documents ----------------------------------------------------------------------------------------------
