"""The sitemap walk of one host: robots.txt's sitemaps (or known paths), indexes and children, asked conditionally and
resumably; what a file's body becomes in the frontier is ``sitemap_entries``'."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from datetime import datetime
from typing import Any, NamedTuple

from harvester.errors import Interrupted
from harvester.phases.discover_context import ANY_MEDIA_TYPE, HostContext
from harvester.phases.discover_feeds import FeedQueue
from harvester.phases.sitemap_entries import SitemapEntries
from harvester.records import (
    DocumentState,
    ErrorClass,
    FetchResult,
    Source,
    origin_of,
    provenance,
)
from harvester.rules import revisit, revisit_documents
from harvester.rules.revisit_documents import absent_count, unreadable_count
from harvester.runtime import aware, check_stop, db, settle, utcnow

logger = logging.getLogger(__name__)

SITEMAPS_AHEAD = 1
"""Sitemaps robots.txt names asked while the seed's answer is awaited (most often the index). With the one file
the walk asks ahead, a host holds at most two sitemap answers at once: the one being read and the next."""


CROSS_HOST_SITEMAPS = 10
"""Sitemap files on other hosts (sitemaps.org cross-submission: robots.txt naming a file on a CDN or another
domain, and that index's children there) read per host per run. Each is fetched under its own host's robots.txt
and limit, and only its entries in this crawl's scope are kept; the bound keeps a hostile robots.txt (which once
had up to ``max_sitemaps_per_host`` files fetched) from aiming more than a few requests at third parties."""


SITEMAP_DEADLINE_TIMEOUTS = 10
"""A sitemap's whole-fetch deadline (``max_sitemap_bytes`` at ``sitemap_min_rate_bytes_s``) is at most this many
times ``http.timeout_s`` (30 s at least): 300 s by default. Without it a larger size limit or a lower rate floor
held a drip-fed host's slot for hours per file (review)."""

REDIRECT_KIND = "redirect"
"""The document kind of a sitemap URL that answered with a redirect: its ``children`` hold the target, which later
runs ask directly (conditionally, with the target's own validators) until the record is due again
(``sitemap_redirect_recheck_s``). Asking the old URL each run sent its validators to the redirect and none to the
target, which then answered in full every run."""


class _Ahead(NamedTuple):
    """A sitemap asked ahead: read (its children, as ``SitemapWalk._sitemap`` returns them) or ``held`` (what we
    hold of it and its answer, for the walk to read)."""

    children: list[tuple[str, datetime | None]] | None
    held: tuple[DocumentState | None, FetchResult] | None


class SitemapWalk:
    """The sitemaps of one host: named by robots.txt or seeds (or probed), indexes walked; each answer read in full
    goes to ``SitemapEntries`` (a sitemap that turns out to be a feed is offered to ``feeds`` there)."""

    def __init__(self, host: HostContext, feeds: FeedQueue) -> None:
        self.host = host
        self._documents: set[str] = set()
        """Every sitemap this run names, asks or walks: a urlset that lists one names no page (it was fetched again
        as a page, failed as bad_content_type and stayed queued)."""
        self._entries = SitemapEntries(host, feeds, documents=self._documents)
        """What a sitemap answered in full becomes in the frontier (parsed, admitted, written, recorded)."""
        self._seeds: list[str] = []
        """Seeds that name a sitemap: read as sitemaps robots.txt names are."""
        self._asked: dict[str, asyncio.Task[_Ahead]] = {}
        """Sitemaps asked ahead of the walk (``_ask_sitemap``), each read and recorded as its answer comes in: taken
        when the walk reaches them."""
        self._asked_as: dict[str, tuple[bool, datetime | None]] = {}
        """How each sitemap asked ahead is read (probed, its lastmod in its index), should a stop read it."""
        self._home_known = asyncio.Event()
        """Set once the seed showed whether the site moved (``home_known``): a sitemap asked ahead is read no
        sooner, its entries on the new home being in the scope only from then on."""
        self._reached: set[str] = set()
        """Sitemaps read in this run at the end of another URL's redirect: not asked again directly."""

    def add_seeds(self, urls: list[str]) -> None:
        """Seeds that name a sitemap: asked ahead and walked first, as robots.txt's sitemaps are."""
        self._seeds.extend(urls)

    def ask_ahead(self) -> None:
        """Ask the first sitemaps robots.txt (or a seed) names before the seed's own answer is in: the walk
        (``walk``) waits for that answer (the site may have moved), and they are needed either way."""
        for index, url in enumerate([*self._seeds, *self.host.rules.sitemaps]):
            canonical = self.host.site.canonicalize(url, self.host.origin + "/robots.txt")
            if canonical is not None:
                self._documents.add(canonical)  # before any is read: the first may list the others
            if index >= SITEMAPS_AHEAD:
                continue
            if canonical is not None and self._cross_host_allowed(canonical):
                self._ask_sitemap(canonical, probing=False, dated=None)

    def home_known(self) -> None:
        """The seed has shown whether the site moved (``HostDiscovery``): the sitemaps asked ahead may be read."""
        self._home_known.set()

    def _cross_host_allowed(self, url: str) -> bool:
        """Whether ``url`` is on this host (or where it moved) or, on another host, within the run's bound."""
        return origin_of(url) in self.host.homes() or self.host.counters["sitemaps_cross_host"] < CROSS_HOST_SITEMAPS

    def _ask_sitemap(self, url: str, *, probing: bool, dated: datetime | None) -> None:
        if url not in self._asked:
            self._asked[url] = asyncio.ensure_future(self._read_ahead(url, probing, dated))
            self._documents.add(url)
            self._asked_as[url] = (probing, dated)

    async def walk(self) -> None:
        """Walk the host's sitemaps (robots.txt's and the seeds', else the known paths)."""
        self.home_known()
        try:
            await self._walk_named_sitemaps()
        except Interrupted:
            await self.record_asked()
            raise
        except BaseException:
            await self.drop_asked(cancel=True)
            raise
        await self.drop_asked(cancel=False)

    async def record_asked(self) -> None:
        """The process is stopping (``runtime.request_stop``): the sitemaps asked ahead send no request any more
        (each meets ``check_stop`` first), but those on the wire end, and every answer in is read and recorded as
        the walk would (its validators, its URLs), so the rerun does not ask it again. An index's children are left
        to the rerun, which finds them in the index's record. A cancel meanwhile (the stop's grace spent) cancels
        the rest."""
        asked = list(self._asked.items())
        self.home_known()  # read as the walk would now: a stop waits for nothing more
        try:
            await asyncio.gather(*(task for _, task in asked), return_exceptions=True)
            for url, task in asked:
                if task.cancelled() or task.exception() is not None or task.result().held is None:
                    continue  # read and recorded as it came in, or failed
                probing, dated = self._asked_as.get(url, (False, None))
                with contextlib.suppress(Interrupted):  # it needed a request more (asked before the site moved)
                    await self._sitemap(url, probing, dated)
        finally:
            await self.drop_asked(cancel=True)

    async def drop_asked(self, *, cancel: bool) -> None:
        """End what was asked and never walked to: no task outlives the host. Cancelled only when the walk failed
        or is being stopped: a request cancelled in flight frees its slot while the server may still be
        answering it (``_Ahead.drop``)."""
        tasks: list[asyncio.Task[Any]] = list(self._asked.values())
        self._asked.clear()
        self._asked_as.clear()
        await settle(tasks, cancel=cancel)

    async def _walk_named_sitemaps(self) -> None:
        discovery = self.host.settings.discovery
        # A Sitemap line may be relative ("Sitemap: /sitemap.xml"): resolved against robots.txt's own URL. It may
        # name another host (sitemaps.org cross-submission: a CDN, the bare domain of a www site): robots.txt
        # speaks for the site, so the file is read, through that host's own gate and robots.txt, and its entries
        # are admitted by this crawl's scope as any sitemap's are.
        homes = [(self.host.origin, self.host.rules)]
        if self.host.moved is not None:
            homes.append((self.host.moved, await self.host.client.robots(self.host.moved)))
        named = list(dict.fromkeys([
            *self._seeds,
            *(url for home, rules in homes for line in rules.sitemaps
              if (url := self.host.site.canonicalize(line, home + "/robots.txt"))),
        ]))
        seen: set[str] = set()
        self._documents.update(named)
        read = await self._walk_sitemaps(named, probing=False, seen=seen) if named else 0
        if not read:
            # Known paths are probed only where robots.txt names no sitemap that could be read (usp probes 14 paths
            # regardless).
            if named:
                self.host.problem(f"{self.host.origin}: none of the {len(named)} sitemaps robots.txt names could be "
                                  "read; the known paths are probed instead")
            probes = [home + path for home, _ in homes for path in discovery.known_sitemap_paths]
            await self._walk_sitemaps([url for url in probes if url not in seen], probing=True, seen=seen)

    async def _walk_sitemaps(self, start: list[str], *, probing: bool, seen: set[str]) -> int:
        """Read ``start`` and the indexes' children breadth-first, at most ``max_sitemaps_per_host`` files and
        ``max_sitemap_depth`` levels; returns how many could be read (fetched and parsed, or known unchanged).

        A child is followed when it is in the crawl's scope or on its index's own origin (an index on a CDN lists
        its siblings there); an index cannot send the crawl to a third host."""
        discovery = self.host.settings.discovery
        # (url, depth, lastmod in its index, probed): only the start can be a guess; an index's children are named.
        queue: deque[tuple[str, int, datetime | None, bool]] = deque((url, 1, None, probing) for url in start)
        read, guessed = 0, False
        while queue:
            url, depth, dated, probed = queue.popleft()
            if probed and guessed:
                continue  # a probe found the site's sitemap: the other known paths are guesses no longer needed
            canonical = self.host.site.canonicalize(url)
            if canonical is None or canonical in seen or canonical in self._reached:
                if canonical is not None:
                    self.host.counters["sitemap_loops"] += 1
                continue
            if len(seen) >= discovery.max_sitemaps_per_host:
                self.host.problem(f"{self.host.origin}: more than {discovery.max_sitemaps_per_host} sitemaps; "
                                  "rest skipped")
                break
            if not self._cross_host_allowed(canonical):
                if not self.host.counters["sitemaps_cross_host_skipped"]:
                    self.host.problem(f"{self.host.origin}: more than {CROSS_HOST_SITEMAPS} sitemaps on other hosts; "
                                      "the rest are skipped in this run")
                self.host.counters["sitemaps_cross_host_skipped"] += 1
                continue
            if origin_of(canonical) not in self.host.homes():
                self.host.counters["sitemaps_cross_host"] += 1
            seen.add(canonical)
            self._documents.add(canonical)
            if queue and not queue[0][3] and len(seen) < discovery.max_sitemaps_per_host:
                # The next file is asked while this one is parsed and written: one round trip less per file. Not a
                # guessed path: the one before may redirect to it (/sitemap.xml to /sitemap_index.xml).
                following, _, next_dated, next_probed = queue[0]
                ahead = self.host.site.canonicalize(following)
                if ahead is not None and ahead not in seen and self._cross_host_allowed(ahead):
                    self._ask_sitemap(ahead, probing=next_probed, dated=next_dated)
            children = await self._sitemap(canonical, probed, dated)
            if children is None:
                continue
            read += 1
            guessed = guessed or probed
            home = origin_of(canonical)
            for child, child_lastmod in children:
                if depth >= discovery.max_sitemap_depth:
                    self.host.problem(f"sitemap index {canonical} nests deeper than {discovery.max_sitemap_depth}")
                    break
                if self.host.site.in_scope(child) or origin_of(child) == home:
                    queue.append((child, depth + 1, child_lastmod, False))
                else:
                    self.host.report.add_entry(provenance(Source.SITEMAP, canonical), child, "out_of_scope")
        return read

    async def _sitemap(
        self, url: str, probing: bool, dated: datetime | None
    ) -> list[tuple[str, datetime | None]] | None:
        """Process one sitemap file; returns the children of an index with the lastmod the index gives each
        (known children, undated, when it is unchanged), or None when it could not be read. ``dated``: this
        file's lastmod in its parent index."""
        asked = self._asked.pop(url, None)
        self._asked_as.pop(url, None)
        if asked is None:
            known, result = await self._sitemap_answer(url, probing, dated)
        else:
            ahead = await asked
            if ahead.held is None:
                return ahead.children
            known, result = ahead.held
            if self.host.moved is not None:
                # Asked before the seed showed the site moved: its redirect to the new home was out of the scope
                # then and is in it now.
                known, result = await self._sitemap_answer(url, probing, dated)
        return await self._read(url, probing, dated, known, result)

    async def _read_ahead(self, url: str, probing: bool, dated: datetime | None) -> _Ahead:
        """A sitemap asked ahead of the walk, read and recorded as soon as its answer is in, not once the walk has
        read the file before it (a kill meanwhile asked it again, issue 31). A redirect out of the scope is held
        for the walk, which knows by then whether the seed showed the site moved there."""
        known, result = await self._sitemap_answer(url, probing, dated)
        if result is not None and result.error_class is ErrorClass.OUT_OF_SCOPE:
            return _Ahead(None, (known, result))
        await self._home_known.wait()  # asked beside the seed: its answer, as a rule, came first
        return _Ahead(await self._read(url, probing, dated, known, result), None)

    async def _read(
        self, url: str, probing: bool, dated: datetime | None, known: DocumentState | None, result: FetchResult | None
    ) -> list[tuple[str, datetime | None]] | None:
        """Read and record one sitemap's answer (``_sitemap``)."""
        if result is None:
            if known is not None and known.kind == REDIRECT_KIND:
                self.host.counters["sitemap_redirects_remembered"] += 1
                return [(target, dated) for target in known.children[:1]]  # walked in its place
            # Not asked: not due, or unchanged per its index. Never read (only failures so far): still unreadable
            # until it is due again, so the probes go on.
            return None if known is None or known.content_hash is None else [(c, None) for c in known.children]
        now = utcnow()
        target = self.host.site.canonicalize(result.final_url) if result.redirects else None
        if target is not None and target != url:
            url, known = target, await self._redirected(url, target, result, now)
        if result.not_modified and known is not None and unreadable_count(known.error):
            # The answer its parser refused is unchanged: still unusable, asked again later still.
            await db(self.host.store.save_document, self.host.failed(url, "sitemap", result, now, known, unusable=True))
            return None if known.content_hash is None else [(c, None) for c in known.children]
        if result.not_modified and known is not None:
            self.host.counters["sitemaps_not_modified"] += 1
            self.host.report.add_sitemap(url, known.kind, not_modified=True)
            await db(self.host.store.save_document, self.host.not_modified(known, now))
            return [(child, None) for child in known.children]
        if not result.ok or result.body is None:
            absent = probing and result.status in (404, 410)  # a guess that missed: asked at a growing interval
            if not (probing and result.status == 404):
                self.host.failed_document(url, "sitemap", result)
            await db(self.host.store.save_document, self.host.failed(url, "sitemap", result, now, known, absent=absent))
            return None
        return await self._entries.read(url, result, result.body, probing=probing, known=known, now=now)

    async def _redirected(self, url: str, target: str, result: FetchResult, now: datetime) -> DocumentState | None:
        """``url`` redirected to ``target``: remembered (the next runs ask ``target`` directly) and ``target``
        marked read in this run. Returns what we hold of ``target``: its answer is recorded as its own."""
        status = result.redirect_statuses[0] if result.redirect_statuses else None
        revisit_s = self.host.settings.discovery.sitemap_redirect_recheck_s
        await db(self.host.store.save_document, DocumentState(
            url=url, kind=REDIRECT_KIND, status=status, fetched_at=now, children=(target,),
            next_fetch_at=revisit.due_at(now, revisit_s, self.host.settings.revisit),
        ))
        self._reached.add(target)
        return await db(self.host.store.get_document, target)

    async def _sitemap_answer(
        self, url: str, probing: bool, dated: datetime | None
    ) -> tuple[DocumentState | None, FetchResult | None]:
        """What we hold of ``url`` and its answer now; no answer when no request is due (a document not due
        yet, or one its index dates no later than our copy)."""
        known = await db(self.host.store.get_document, url)
        # A guess that missed waits its growing interval as a guess only: once the site names the path, it is asked
        # (review: a sitemap published at a path probed absent for a month waited up to 16 days more).
        named_now = not probing and known is not None and absent_count(known.error) > 0
        if known is not None and not named_now and not self.host.due(known):
            self.host.counters["documents_skipped"] += 1
            return known, None
        if known is not None and self._unchanged_per_index(known, dated):
            self.host.counters["sitemaps_unchanged_per_index"] += 1
            return known, None
        return known, await self._fetch_sitemap(url, known, retry=not probing)

    async def _fetch_sitemap(self, url: str, known: DocumentState | None, *, retry: bool) -> FetchResult:
        """One sitemap, asked again (``retry``: one a site names, not a probed path) after a transient failure (429,
        5xx, timeout, connection) up to ``politeness.max_attempts`` times: a single 503 must not leave the host
        without its sitemap until the next revisit. The client keeps Retry-After and its back-off between attempts
        (a parked host is refused at once, so no wait outlasts the park); on top of that each retry waits as a
        retried page would (``revisit.retry_delay_s``: doubling, capped by ``backoff_max_s``). Its deadline allows
        ``max_sitemap_bytes`` at ``sitemap_min_rate_bytes_s``, not a page's; one it still hit while the body was
        arriving is not asked again in this run: the same deadline would cut it the same way (the document waits
        a growing interval instead: ``revisit_documents.failed``)."""
        politeness = self.host.settings.politeness
        discovery = self.host.settings.discovery
        timeout_s = self.host.settings.http.timeout_s
        # Bounded whatever the size and rate settings say: a drip feed holds the host's slot no longer than this.
        deadline_s = min(max(timeout_s, discovery.max_sitemap_bytes / discovery.sitemap_min_rate_bytes_s),
                         SITEMAP_DEADLINE_TIMEOUTS * max(timeout_s, 30.0))
        home = origin_of(url)

        def in_scope(hop: str) -> bool:  # a sitemap outside the crawl's scope may redirect on its own host
            return origin_of(hop) == home or self.host.site.in_scope(hop)

        validators, issuer = self.host.validators_for(known), None
        if known is not None and known.kind == REDIRECT_KIND and known.children:
            # A remembered redirect asked again (a refresh, or its record due): the answer that counts is its
            # target's, so the target's own validators go with the request, to the target's hop alone (a redirect
            # that moved elsewhere meanwhile reaches its new target unconditionally, as it must).
            target = await db(self.host.store.get_document, known.children[0])
            if target is not None:
                validators, issuer = self.host.validators_for(target), target.url
        for attempt in range(politeness.max_attempts if retry else 1):
            if attempt:
                check_stop()  # a stopped process sends no request: no wait for one either
                self.host.counters["sitemap_retries"] += 1
                await asyncio.sleep(revisit.retry_delay_s(attempt - 1, None, politeness))
            result = await self.host.client.fetch(
                url, validators=validators, accept=ANY_MEDIA_TYPE, validators_url=issuer,
                max_bytes=discovery.max_sitemap_bytes, in_scope=in_scope, timeout_s=deadline_s,
            )
            if result.error_class not in revisit.RETRYABLE or revisit_documents.cut_while_reading(result):
                break
        return result

    def _unchanged_per_index(self, known: DocumentState, dated: datetime | None) -> bool:
        """The parent index dates this child sitemap no later than our copy (the Last-Modified it was served
        with: both on the server's clock), and our copy is younger than ``sitemap_index_trust_s``: then it needs
        no request at all, even in a refresh. The age bound re-asks it now and then, so an index whose lastmod
        lags behind its children costs at most that much staleness."""
        if dated is None or known.content_hash is None or known.error is not None or known.fetched_at is None:
            return False
        if (not known.refusals_read and self.host.rules.refuses_any) or known.url in self.host.read_in_full:
            return False  # read once for its refusals, or for those allowed again (``HostContext.validators_for``)
        age_s = (utcnow() - aware(known.fetched_at)).total_seconds()
        if age_s >= self.host.settings.discovery.sitemap_index_trust_s:
            return False
        return revisit.newer_than_copy(dated, known.last_modified) is False
