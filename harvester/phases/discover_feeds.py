"""The feeds of one host: found by the other steps and offered to the reader (``FeedQueue``, the one channel between
discovery's steps), read incrementally (RFC 5005 pages and archives), a feed that repeats another recognised."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from harvester.discovery.feeds import FeedDoc, numbered_successors, parse_feed
from harvester.phases.discover_context import ANY_MEDIA_TYPE, HostContext
from harvester.records import (
    DiscoveredUrl,
    DocumentState,
    FetchResult,
    Source,
    origin_of,
    provenance,
)
from harvester.rules import feed_pages, revisit
from harvester.rules.revisit_documents import unreadable_count
from harvester.runtime import aware, db, settle, utcnow

if TYPE_CHECKING:
    from harvester.rules.admission import Site

logger = logging.getLogger(__name__)

MAX_FEED_ENTRIES_REMEMBERED = 200_000
"""Entry URLs of this run's feeds kept per host to recognise a feed that repeats another; beyond it, none is."""


class FeedQueue:
    """Feeds found by any step of a host's discovery (a seed, a sitemap that is a feed, a listing page's links),
    waiting for the feed reader: the one channel between the steps. Each feed is offered once a run."""

    def __init__(self, site: Site) -> None:
        self._site = site
        self._waiting: deque[str] = deque()
        self._seen: set[str] = set()
        self._found: list[str] = []
        """Feeds offered since the listing crawl last wrote a page: written with it, so a kill cannot lose them."""

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def offer(self, url: str) -> None:
        """Queue ``url`` for the reader when it is in scope and new in this run."""
        canonical = self._site.canonicalize(url)
        if canonical is None or canonical in self._seen or not self._site.in_scope(canonical):
            return
        if self._site.profile.use_feeds:
            self._found.append(canonical)
        self._seen.add(canonical)
        self._waiting.append(canonical)

    def take_found(self) -> list[str]:
        """The feeds found since the last call (the listing crawl writes them with the page it completes)."""
        found, self._found = self._found, []
        return found

    def next(self) -> str | None:
        """The feed waiting longest, or None."""
        return self._waiting.popleft() if self._waiting else None


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


@dataclass(frozen=True, slots=True)
class _Guess:
    """A feed page asked ahead, its answer, and its read when it was read and recorded as it came in."""

    result: FetchResult
    read: _FeedRead | None = None


class _Ahead:
    """Fetches of guessed feed pages under way: taken when a page names one, cancelled when the walk ends."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[_Guess]] = {}

    def __contains__(self, url: str) -> bool:
        return url in self._tasks

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def ask(self, url: str, fetch: Coroutine[Any, Any, _Guess]) -> None:
        self._tasks[url] = asyncio.ensure_future(fetch)

    @staticmethod
    def start(fetch: Coroutine[Any, Any, _Guess]) -> asyncio.Task[_Guess]:
        return asyncio.ensure_future(fetch)

    def take(self, url: str) -> asyncio.Task[_Guess] | None:
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


class _Walked:
    """The entries a feed's walk has read so far (their dates, the largest page): what ``pages_after_next`` reads
    to bound the guesses to the pages the feed is estimated to have left (``rules.feed_pages``)."""

    def __init__(self) -> None:
        self.dates: list[datetime | None] = []
        self.per_page = 0

    def read(self, page: _FeedRead) -> None:
        self.dates += page.dates
        self.per_page = max(self.per_page, len(page.doc.entries))

    def pages_after_next(self, host: HostContext) -> int:
        """Pages worth asking past the one the walk reads next: the estimate, or the window when none is made."""
        left = feed_pages.pages_after_next(self.dates, self.per_page, host.sitemap_dates)
        if left is None:
            return MAX_FEED_PAGES_AHEAD
        if left < MAX_FEED_PAGES_AHEAD:
            host.counters["feed_guesses_bounded_by_sitemap_dates"] += 1
        return left


def _always(read: _FeedRead) -> bool:
    """A first read's walk takes every page."""
    return True


def _fresh_only(read: _FeedRead) -> bool:
    """A resumed walk reads on while a page holds only URLs first found after the head's read in this run."""
    return read.admitted > 0 and read.fresh >= read.admitted


class FeedReader:
    """The feeds of one host: taken from its ``FeedQueue`` one at a time, each read newest page first, a feed that
    repeats another recognised (by the entries of the feeds read before it in this run)."""

    def __init__(self, host: HostContext, feeds: FeedQueue) -> None:
        self.host = host
        self.feeds = feeds
        self._docs_seen: set[str] = set()
        """Feed documents (heads, pages, archives) read in this run."""
        self._entries: set[str] = set()
        """Entry URLs of the feeds read in this run (up to ``MAX_FEED_ENTRIES_REMEMBERED``)."""
        self._beside: asyncio.Task[None] | None = None
        """The reader of queued feeds while the listing crawl runs (``read_beside``)."""

    async def read_queued(self) -> None:
        """Read every feed queued, and those queued meanwhile."""
        while (url := self.feeds.next()) is not None:
            await self._feed(url)

    def read_beside(self) -> None:
        """Read the queued feeds beside the listing crawl, one feed at a time (a feed's mirror is told by what
        the feeds before it listed). A paged feed and a listing's pagination are each a chain of requests, each
        waiting on the one before: side by side they take the longer chain's time, not the sum, and the host's
        limit still bounds both (one polite client). Called again after each batch of listing pages: a reader
        that finished is started again for the feeds queued since."""
        host = self.host
        if self.feeds and host.site.profile.use_feeds and (self._beside is None or self._beside.done()):
            if self._beside is not None:
                self._beside.result()  # a failed read surfaces here, not lost with its task
            self._beside = asyncio.get_running_loop().create_task(self.read_queued(), name=f"feeds {host.origin}")

    async def caught_up(self) -> None:
        """Wait until every feed queued so far is read."""
        while self._beside is not None:
            task, self._beside = self._beside, None
            await task
            self.read_beside()  # queued after that reader's last look

    async def stop(self, *, cancel: bool) -> None:
        """End the reader beside the listing crawl, which failed (``cancel``) or met the process's stop
        (``runtime.request_stop``). On a stop the reader is not cancelled: it sends no request any more (each meets
        ``check_stop`` first), but a document it holds (answered, being parsed or written) or has on the wire is
        recorded, so the rerun does not ask it again (cancelled, its answer was lost with it). A cancel meanwhile
        (the stop's grace spent) cancels it."""
        task = self._beside
        if task is None:
            return
        if cancel:
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # cancelled itself, it cancels the reader too

    async def _feed(self, url: str) -> None:
        """A feed head, then its older documents (RFC 5005) while they may hold entries not seen before.

        First read: every ``rel="next"`` page and every ``prev-archive`` archive, up to ``max_feed_pages``. On a
        later read the head comes first (conditionally: a 304 ends it); a next page is read only when the page
        before it held nothing but news (entries dated after our last read of the head, on the server's clock,
        or, undated, URLs new to the frontier), since a feed lists newest first; archives never change
        (RFC 5005 §4), so known ones are walked past without a request and only new ones are read.
        """
        known = await db(self.host.store.get_document, url)
        if known is not None and not self.host.due(known):
            if self._read_in_this_run(known) and known.kind == "feed" and known.children:
                await self._resume(url, known)  # its walk was cut (a kill): the pages it had left
                return
            self.host.counters["documents_skipped"] += 1
            return
        if known is not None and known.kind == "feed_mirror" and self._mirror_fresh(known):
            self.host.counters["feed_mirrors_skipped"] += 1
            return
        last_read = known.fetched_at if known is not None and known.content_hash is not None else None
        rereading = known is not None and known.content_hash is not None
        reference = revisit.http_time(known.last_modified) if known is not None and rereading else None

        def goes_on(read: _FeedRead) -> bool:  # a newest-first feed has nothing new past a page not all news
            return not rereading or read.only_news(reference)

        head = await self._feed_document(url, "feed", known, last_read, goes_on=goes_on)
        if head is None:
            return
        if head.repeats or (known is not None and known.kind == "feed_mirror"):
            # Everything it lists came from another feed of this host in this run (the Atom twin of an RSS
            # feed, a category feed): poll it again only after feed_mirror_recheck_s, and read no older pages.
            # Once a mirror, its head is still read (an Atom twin ordered by `updated` shows edits of old
            # entries, which then differ from the twin's head) but its history is the twin's: never walked.
            self.host.counters["feeds_mirrored"] += 1
            await db(self.host.store.save_document, replace(head.state, kind="feed_mirror"))
            return
        budget = self.host.settings.discovery.max_feed_pages - 1
        page, budget = await self._walk(url, head, budget, last_read=last_read, guessing=not rereading,
                                        goes_on=goes_on)
        archive = head.doc.prev_archive
        while archive is not None and budget > 0 and archive not in self._docs_seen:
            if not self.host.site.in_scope(archive):
                break
            known_archive = await db(self.host.store.get_document, archive)
            if known_archive is not None and known_archive.content_hash is not None:
                self._docs_seen.add(archive)
                self.host.counters["feed_archives_known"] += 1
                archive = known_archive.children[0] if known_archive.children else None
                continue
            budget -= 1
            read = await self._feed_document(archive, "feed_archive", known_archive, None)
            archive = read.doc.prev_archive if read is not None else None
        if budget <= 0 and ((page is not None and page.doc.next_page) or archive is not None):
            most = self.host.settings.discovery.max_feed_pages
            self.host.problem(f"feed {url}: more than {most} documents; rest skipped")

    async def _walk(self, url: str, page: _FeedRead | None, budget: int, *, last_read: datetime | None,
                    guessing: bool, goes_on: Callable[[_FeedRead], bool]) -> tuple[_FeedRead | None, int]:
        """Walk the next pages of feed ``url`` from ``page`` while ``goes_on`` says one may hold news, within
        ``budget`` pages; ``guessing``: a first read, whose numbered pages may be asked ahead. Returns the last page
        read and the budget left."""
        at, ahead = page.state.url if page is not None else url, _Ahead()
        walked = _Walked()
        try:
            while page is not None and page.doc.next_page and budget > 0:
                walked.read(page)
                if not goes_on(page):
                    self.host.counters["feed_pages_not_needed"] += 1
                    break
                target = page.doc.next_page
                if target in self._docs_seen or not self.host.site.in_scope(target):
                    break
                budget -= 1
                page_known = await db(self.host.store.get_document, target)
                asked = ahead.take(target)
                if guessing and asked is None and ahead:
                    # The page named one we did not guess: this feed is not numbered by a constant step. No more
                    # guesses, so an irregular chain costs at most one limit's worth of them; those asked stay
                    # (a later page may still name one) until the walk ends.
                    guessing = False
                if guessing:
                    if asked is None:  # its own request first: the guesses queue behind it for the host's slots
                        asked = ahead.start(self._answer(self._fetch_feed(target, page_known)))
                    self._ask_ahead(ahead, at, target, min(budget, walked.pages_after_next(self.host)))
                page = await self._feed_document(target, "feed_page", page_known, last_read, asked=asked,
                                                 goes_on=goes_on)
                at = target
        except BaseException:
            self._unused_guesses(await ahead.drop(cancel=True))
            raise
        self._unused_guesses(await ahead.drop(cancel=False))
        return page, budget

    def _read_in_this_run(self, known: DocumentState) -> bool:
        return known.fetched_at is not None and aware(known.fetched_at) >= aware(self.host.run_started)

    async def _resume(self, url: str, head: DocumentState) -> None:
        """The head of feed ``url`` was read earlier in this run and its walk went on to a page (its record's
        ``children``) a kill then cut: the pages read since are passed by their records, without a request, and the
        walk goes on from the first one this run has not read, by the rule of the walk cut: every page on a first
        read (that page never read before), else while each page is all news (first found after the head's read).
        Pages past that one read before the kill (guesses, recorded as they came in while the page before them was
        on the wire) are passed by their records too: before, the walk asked each again. Before that, the rerun
        skipped the feed, read in this run, and its later pages waited for the next run."""
        budget = self.host.settings.discovery.max_feed_pages - 1
        target: str | None = head.children[0]
        self._docs_seen.add(url)
        last_read = aware(head.fetched_at) if head.fetched_at is not None else None
        goes_on: Callable[[_FeedRead], bool] | None = None
        while target is not None and budget > 0 and target not in self._docs_seen and self.host.site.in_scope(target):
            budget -= 1
            known = await db(self.host.store.get_document, target)
            self._docs_seen.add(target)
            if known is not None and self._read_in_this_run(known):
                target = known.children[0] if known.children else None  # where its read went on, if it did
                continue
            if goes_on is None:
                self.host.counters["feed_walks_resumed"] += 1
                # The goes-on rule of the read the kill cut: a first read walks every page. Its pages were never
                # read before this run (a reread's went on to pages the first read had read); with _fresh_only a
                # page whose URLs a sitemap had named ended the resumed walk, the pages after it left unread.
                goes_on = _always if known is None or known.content_hash is None else _fresh_only
            page = await self._feed_document(target, "feed_page", known, last_read, goes_on=goes_on)
            if page is None or not page.doc.next_page:
                return
            if not goes_on(page):
                self.host.counters["feed_pages_not_needed"] += 1
                return
            target = page.doc.next_page

    def _unused_guesses(self, count: int) -> None:
        if count:
            self.host.counters["feed_pages_guessed_unused"] += count

    def _fetch_feed(self, url: str, known: DocumentState | None) -> Coroutine[Any, Any, FetchResult]:
        return self.host.client.fetch(url, validators=self.host.validators_for(known),
                                      accept=ANY_MEDIA_TYPE, max_bytes=self.host.settings.discovery.max_feed_bytes)

    def _ask_ahead(self, ahead: _Ahead, at: str, target: str, budget: int) -> None:
        """Ask the pages after ``target`` beside it, when ``at`` → ``target`` stepped one number of the URL: as
        many as the host's limit, within ``budget`` (the page budget, and the pages the sitemaps' dates say are
        left: ``_Walked.pages_after_next``). ``target`` itself is most often a guess already answered, so the next
        ones fill the host's slots; any beyond them wait for a slot as every request does. A paced host
        (Crawl-delay, request rate, a minimum delay) gains nothing from it: never guessed for."""
        gate = self.host.client.gate(origin_of(target))  # the feed's own host: it may be another one in scope
        if gate.interval_s > 0 or gate.crawl_delay_s or gate.request_rate_s:
            return
        for guess in numbered_successors(at, target, min(gate.limit, budget, MAX_FEED_PAGES_AHEAD)):
            if guess not in ahead and guess not in self._docs_seen and self.host.site.in_scope(guess):
                self.host.counters["feed_pages_guessed"] += 1
                ahead.ask(guess, self._read_guess(guess))

    @staticmethod
    async def _answer(fetch: Coroutine[Any, Any, FetchResult]) -> _Guess:
        return _Guess(await fetch)

    async def _read_guess(self, url: str) -> _Guess:
        """A guessed page of a feed read for the first time (``_ask_ahead``): read and recorded as soon as its
        answer is in, not once the walk has read the pages before it (a kill meanwhile asked it again, issue 31).
        Only a feed with entries is: a guess past the last page (a 404, an empty page, a soft 404) is left to the
        walk, which records it only if a page names it."""
        result = await self._fetch_feed(url, None)
        if not result.ok or result.body is None:
            return _Guess(result)
        doc = await asyncio.to_thread(parse_feed, result.body, url=url)
        if not doc.entries:
            return _Guess(result)
        known = await db(self.host.store.get_document, url)
        return _Guess(result, await self._ingest(url, "feed_page", known, None, result, doc, goes_on=_always))

    async def _feed_document(
        self, url: str, kind: str, known: DocumentState | None, last_read: datetime | None,
        *, asked: asyncio.Task[_Guess] | None = None, goes_on: Callable[[_FeedRead], bool] | None = None,
    ) -> _FeedRead | None:
        """Fetch (conditionally) and ingest one feed document; None when it answered 304 or failed.
        ``last_read``: our previous read of the feed, to tell entries found since (None: all are new);
        ``asked``: its fetch, already under way (a guess the page before named, see ``_ask_ahead``), and its read
        when it was read as it came in."""
        self._docs_seen.add(url)
        if asked is None:
            result = await self._fetch_feed(url, known)
        else:
            guess = await asked
            if guess.read is not None:
                return guess.read
            result = guess.result
        return await self._ingest(url, kind, known, last_read, result, goes_on=goes_on)

    async def _ingest(
        self, url: str, kind: str, known: DocumentState | None, last_read: datetime | None, result: FetchResult,
        doc: FeedDoc | None = None, *, goes_on: Callable[[_FeedRead], bool] | None = None,
    ) -> _FeedRead | None:
        """Record one feed document's answer (``_feed_document``); ``doc``: its parse, when made already.
        ``goes_on``: whether the walk reads the page after it; if so, that page is kept in its record
        (``children``), so a rerun of this run after a kill goes on from there (``_resume``)."""
        now = utcnow()
        if known is not None and kind != "feed_archive":
            known = replace(known, children=())  # no page to go on to unless this read says so (``_resume``)
        if result.not_modified and known is not None and unreadable_count(known.error):
            await db(self.host.store.save_document, self.host.failed(url, kind, result, now, known, unusable=True))
            return None
        if result.not_modified and known is not None:
            self.host.counters["feeds_not_modified"] += 1
            await db(self.host.store.save_document, self.host.not_modified(known, now))
            return None
        if not result.ok or result.body is None:
            self.host.failed_document(url, "feed", result)
            await db(self.host.store.save_document, self.host.failed(url, kind, result, now, known))
            return None
        # Off the event loop: feedparser reads a megabyte in about half a second (a malformed one, through its
        # loose parser, in more than one), and every other host's discovery would wait that long.
        if doc is None:
            doc = await asyncio.to_thread(parse_feed, result.body, url=url)
        for problem in doc.problems[:5]:
            self.host.problem(f"feed {url}: {problem}")
        batch: list[DiscoveredUrl] = []
        dates: list[datetime | None] = []
        for entry in doc.entries:
            # Only a modification date (Atom updated, JSON Feed date_modified) is stored as lastmod: an RSS
            # pubDate stays put when the page is edited, so as "lastmod" it would predict "unchanged" forever.
            item = self.host.site.admit(
                entry.link, base=url, source=Source.FEED, where=url, depth=1, now=now, allowed=self.host.rules.allowed,
                lastmod=entry.updated, lastmod_until=entry.updated_until, published=entry.published, trusted=True,
                fetched_at=now,
                report_to=self.host.origin,
            )
            if item is not None:
                batch.append(item)
                dates.append(entry.lastmod)
        await self.host.record_refused(provenance(Source.FEED, url), replace=known is not None and (
            known.content_hash is not None and self.host.rules.refuses_any))
        admitted = len(batch)
        urls = frozenset(item.url for item in batch)
        repeats = bool(urls) and urls <= self._entries
        if len(self._entries) < MAX_FEED_ENTRIES_REMEMBERED:
            self._entries |= urls
        seen_before = await db(self.host.store.known_urls, list(urls), before=last_read) if last_read and urls else ()
        await self.host.urls.add(batch)
        self.host.counters["feeds_parsed" if kind == "feed" else "feed_pages_parsed"] += 1
        revisit_s = self.host.settings.discovery.feed_revisit_s
        state = DocumentState(
            url=url, kind=kind, status=result.status, etag=result.etag, last_modified=result.last_modified,
            content_hash=hashlib.sha256(result.body).hexdigest(), fetched_at=now, read_at=now,
            next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit), url_count=len(doc.entries),
            # An archive leads to the one before it, so a later read can walk past known archives.
            children=(doc.prev_archive,) if kind == "feed_archive" and doc.prev_archive else (),
        )
        # A feed's head is re-read every run: an entry it showed last time and not now has been pushed out by
        # newer ones or deleted, and one conditional request tells which. Pages past the head shift every day.
        vanished = self.host.vanished(Source.FEED, url, known, now) if kind == "feed" else None
        read = _FeedRead(doc=doc, admitted=admitted, fresh=admitted - len(seen_before), dates=tuple(dates),
                         state=state, repeats=repeats)
        if kind in ("feed", "feed_page") and doc.next_page and goes_on is not None and goes_on(read):
            read = replace(read, state=replace(state, children=(doc.next_page,)))
        rechecked = await db(self.host.store.save_document, read.state, vanished=vanished)
        self.host.counters["urls_vanished_rechecked"] += rechecked
        return read

    def _mirror_fresh(self, known: DocumentState) -> bool:
        """A feed found to repeat another is skipped until our last read of it is ``feed_mirror_recheck_s`` old."""
        if known.fetched_at is None:
            return False
        age_s = (utcnow() - aware(known.fetched_at)).total_seconds()
        return age_s < self.host.settings.discovery.feed_mirror_recheck_s

