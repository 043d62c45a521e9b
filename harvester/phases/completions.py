"""Writing extraction's completions: batched into small ``complete_many`` transactions (each URL atomically with its
outlinks), content duplicates marked on the way, and what a failed attempt could not write kept for its retry.

A crash loses at most the completions of the last fraction of a second (``FLUSH_EVERY_S``), whose leases a rerun
reclaims. ``ExtractWork`` (``extract_host``) feeds one ``CompletionBatcher`` per worker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from harvester.errors import InvalidRecord, LeaseLost, StoreError
from harvester.owners import retire_owner
from harvester.records import Completion, DiscoveredUrl, UrlState
from harvester.runtime import db
from harvester.store_results import CompleteResult

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.frontier.hosts import Reasked
    from harvester.phases.cycle_state import Unwritten

logger = logging.getLogger(__name__)

FLUSH_ITEMS = 64
"""Completions written per transaction at most: big enough to amortise a commit, small enough to lose little."""

FLUSH_EVERY_S = 0.25
"""A pending completion waits at most this long before it is written."""

FLUSH_BACKLOG = 4 * FLUSH_ITEMS
"""Completions pending while a write is under way, beyond which ``put`` waits for that write: the database sets
the pace once it cannot keep up, rather than the answers piling up."""

WRITE_ATTEMPTS = 5
WRITE_BACKOFF_S = 0.25
"""A failed completion write is retried after 0.25, 0.5, 1, 2 s: a lock or a database restart is waited out."""


async def write_unwritten(
    store: FrontierStore, unwritten: Unwritten, *, run_id: int | None,
    canonicalize: Callable[[str], str | None] | None = None,
) -> int:
    """Write what an earlier failed attempt of this cycle left behind; raises if the database still fails.
    Content duplicates are marked again first, so a holder a kept page takes over (rel=canonical) is demoted
    with it: the pairs the failed write carried were not kept."""
    written = 0
    batches = unwritten.batches
    while batches:
        # Taken out before the write: two retries of one cycle (its workers' tasks) run at once in one loop, and
        # one reading the batch the other is writing then popping the next would drop that one unwritten.
        owner, items = batches.pop(0)
        try:
            if items:
                marker = CompletionBatcher(store, owner, run_id=run_id, canonicalize=canonicalize)
                items, demote = await marker._mark_duplicates(items)
                await db(store.complete_many, owner, items, run_id=run_id, demote=demote)
        except BaseException:
            batches.insert(0, (owner, items))
            raise
        retire_owner(owner)  # its other leases now return through recover_leases
        written += len(items)
    return written


class CompletionBatcher:
    """Batches completions into ``complete_many`` transactions, marking content duplicates on the way."""

    def __init__(self, store: FrontierStore, owner: str, *, run_id: int | None,
                 canonicalize: Callable[[str], str | None] | None = None) -> None:
        self._store = store
        self._canonicalize = canonicalize or (lambda url: url)
        self._owner = owner
        self._run_id = run_id
        self._pending: list[tuple[Completion, list[DiscoveredUrl]]] = []
        self._first_at = 0.0
        self._lock = asyncio.Lock()
        self._behind: asyncio.Task[None] | None = None
        """The write ``put`` started and left running (``_flush_behind``); ``flush`` waits for it (the lock)."""
        self._failed: Exception | None = None
        self._lastmod: dict[str, tuple[int, int]] = {}
        self._reasks: dict[str, Reasked] = {}
        """Per host, the re-ask decisions and findings of the completions pending: written in their transaction."""
        self.counters: Counter[str] = Counter()

    def take_pending(self) -> list[tuple[Completion, list[DiscoveredUrl]]]:
        items, self._pending = self._pending, []
        return items

    def note_lastmod(self, host: str, *, hit: bool) -> None:
        """One lastmod check (a change seen on a page whose lastmod made a prediction) and whether the lastmod
        announced it; written with the next batch, not a transaction per URL."""
        checks, hits = self._lastmod.get(host, (0, 0))
        self._lastmod[host] = (checks + 1, hits + (1 if hit else 0))

    def note_reask(self, host: str, *, asked: int = 0, changed: int = 0, tested: datetime | None = None) -> None:
        """A 304 that contradicted a newer lastmod, to be asked again (``asked``, decided at ``tested``), or the full
        answer to one that found the page changed (``changed``); written with the completion kept next (``keep``,
        which follows in the same step of the loop), in its transaction (``complete_many``'s ``reasks``)."""
        was_asked, found, when = self._reasks.get(host, (0, 0, None))
        self._reasks[host] = (was_asked + asked, found + changed, tested or when)

    def keep(self, completion: Completion, outlinks: list[DiscoveredUrl]) -> None:
        """Add to the pending batch, synchronously, writing nothing: the next flush writes it, or, failing, keeps it
        (and ``_wind_down`` hands it to the cycle's retry)."""
        if not self._pending:
            self._first_at = time.monotonic()
        self._pending.append((completion, outlinks))

    async def put(self, completion: Completion, outlinks: list[DiscoveredUrl]) -> None:
        """Add to the pending batch, and start its write when it is due, unless a write is already under way (the
        next write takes it: the next put's or the tick's, ``tick``). The write is started, not waited for: a
        record never waits for a batch of answers to be written, its own host's or others', and with it its
        host's next requests (issue 31: the slow host's workers waited for the records of its last answers, each
        held by a write of 64 answers of every host, ``SETTLING_PER_WORKER``). It is written just as soon as
        before, so a kill loses no more. Past ``FLUSH_BACKLOG``, it waits: the database sets the pace. A write
        started here that failed raises at the next put (its batch is pending again), as it did in its record."""
        self.keep(completion, outlinks)
        self._raise_failed()
        if len(self._pending) >= FLUSH_BACKLOG:
            await self.flush()
            return
        due = len(self._pending) >= FLUSH_ITEMS or time.monotonic() - self._first_at >= FLUSH_EVERY_S
        if due and not self._lock.locked() and (self._behind is None or self._behind.done()):
            self._behind = asyncio.get_running_loop().create_task(self._flush_behind(), name="completions write")

    async def _flush_behind(self) -> None:
        """A write no record waits for; what it raised is raised by the next put (``_raise_failed``)."""
        try:
            await self.flush()
        except Exception as exc:  # the batch is pending again (``flush``); a cancel (the run ends) just ends it
            self._failed = exc

    def _raise_failed(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    async def tick(self) -> None:
        """Called periodically so a quiet host's last completions are not held back."""
        if self._pending and time.monotonic() - self._first_at >= FLUSH_EVERY_S:
            await self.flush()

    async def flush(self) -> None:
        """Write what is pending. A passing database fault (a lock, a restart) is waited out a few times, so
        completed fetches are not lost to it; a lasting one raises with the batch kept for the next flush."""
        async with self._lock:
            self._failed = None  # a failed write's batch is pending again: written now, or this raises
            items, self._pending = self._pending, []
            if not items:
                return
            # Taken with the items, in the same step: the decisions noted while this batch is written belong to
            # completions of the next one.
            reasks, self._reasks = self._reasks, {}
            try:
                items, demoted = await self._mark_duplicates(items)
                result = await self._write(items, demoted, reasks)
            except BaseException:
                self._pending[:0] = items
                for host, (asked, changed, tested) in reasks.items():
                    self.note_reask(host, asked=asked, changed=changed, tested=tested)
                raise
            self.counters["duplicate"] += result.demoted
            self.counters["lease_lost"] += result.lost
            if self._lastmod:
                tallies, self._lastmod = self._lastmod, {}
                await db(self._store.add_lastmod_checks, tallies)
            for completion, _ in items:
                # By the state the URL is left in: a failure with a next time (below max_attempts) is queued again.
                failed_for_now = completion.state is UrlState.FAILED and completion.next_fetch_at is not None
                self.counters[UrlState.QUEUED.value if failed_for_now else completion.state.value] += 1

    async def _write(
        self, items: list[tuple[Completion, list[DiscoveredUrl]]], demote: list[tuple[int, int]],
        reasks: dict[str, Reasked] | None = None,
    ) -> CompleteResult:
        for attempt in range(WRITE_ATTEMPTS):
            try:
                return await db(self._store.complete_many, self._owner, items, run_id=self._run_id, demote=demote,
                                reasks=reasks)
            except (InvalidRecord, LeaseLost):
                raise
            except StoreError as exc:
                if attempt + 1 == WRITE_ATTEMPTS:
                    raise
                delay = WRITE_BACKOFF_S * 2**attempt
                logger.warning("completions not written (%s); retrying in %.1f s", exc, delay,
                               extra={"error_class": "storage"})
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _mark_duplicates(
        self, items: list[tuple[Completion, list[DiscoveredUrl]]]
    ) -> tuple[list[tuple[Completion, list[DiscoveredUrl]]], list[tuple[int, int]]]:
        """A page whose main content is already held by another URL is a duplicate; its links are not expanded.

        Which URL holds the content follows the site's rel=canonical where it says: a page that is its own
        canonical, and is what the holder names as canonical, takes the content over, and the holder becomes
        its duplicate (returned as (holder, new holder) pairs, demoted as this batch is written). Otherwise the
        first URL read (the lowest id) keeps it. A content confirmed (``_confirms``: a 304, an unchanged 200) is
        settled by the same rule against every URL holding it (``_settle``): a holder due when the other copy was
        read vouched for nothing then, and both stayed DONE, both in the snapshot."""
        fresh = [c for c, _ in items if c.page is not None and c.content_hash]
        confirmed = {c.url_id: c for c, _ in items if _confirms(c)}
        if not fresh and not confirmed:
            return items, []
        known = await db(
            self._store.duplicates_of, [c.content_hash for c in fresh if c.content_hash],
            exclude_ids=[c.url_id for c in fresh],
        ) if fresh else {}
        settled, demoted = await self._settle(confirmed, {c.url_id for c, _ in items}, known)
        # What each holder's page names as canonical (in canonical form): stored holders from the store, this
        # batch's from the batch.
        canon = self._canonicalize
        declared = {url_id: canon(url) for url_id, url in
                    (await db(self._store.declared_canonicals, list(set(known.values())))).items()}
        position: dict[int, int] = {}
        out: list[tuple[Completion, list[DiscoveredUrl]]] = []
        for completion, outlinks in items:
            digest, page = completion.content_hash, completion.page
            if page is None and completion.url_id in settled:  # a 304 of a copy the rule gives the other URL
                completion = replace(completion, state=UrlState.DUPLICATE, duplicate_of=settled[completion.url_id])
            elif page is None and completion.url_id in confirmed and digest and known.get(digest) == completion.url_id:
                position[completion.url_id] = len(out)  # a 304 keeping the content: a page below may take it over
            if page is not None and digest:
                holder = known.get(digest)
                if holder is None or holder == completion.url_id:
                    known[digest] = completion.url_id
                elif (completion.final_url is None and page.canonical_url is not None  # read at its own address
                      and (here := canon(page.final_url)) is not None and here == canon(page.canonical_url)
                      and declared.get(holder) == here):
                    known[digest] = completion.url_id  # the holder points here: this URL takes the content over
                    if holder in position:  # read in this same batch: not stored yet, simply its duplicate
                        index = position.pop(holder)
                        out[index] = (replace(out[index][0], state=UrlState.DUPLICATE, duplicate_of=completion.url_id,
                                              page=None), [])
                    else:
                        demoted.append((holder, completion.url_id))
                else:
                    completion = replace(completion, state=UrlState.DUPLICATE, duplicate_of=holder, page=None)
                    outlinks = []
                if known[digest] == completion.url_id:
                    position[completion.url_id] = len(out)
                    if page.canonical_url is not None:
                        declared[completion.url_id] = canon(page.canonical_url)
            out.append((completion, outlinks))
        return out, demoted

    async def _settle(
        self, confirmed: dict[int, Completion], batch: set[int], known: dict[str, int]
    ) -> tuple[dict[int, int], list[tuple[int, int]]]:
        """Settle each confirmed content against the URLs holding it now (one indexed lookup for the batch,
        ``FrontierStore.content_holders``): the URL the rule picks (``_keeper``) keeps it, written into ``known``
        for the batch's pages; returns the confirmed URLs that become its duplicates (url id -> keeper) and the
        (holder, keeper) pairs to demote where the keeper is confirmed here. Only holders not due again vouch:
        one due may have changed since (its own answer settles it); a URL of the batch not confirmed is left to
        its own answer."""
        if not confirmed:
            return {}, []
        digests = {c.content_hash for c in confirmed.values() if c.content_hash}
        holders = await db(self._store.content_holders, sorted(digests), sorted(confirmed))
        settled: dict[int, int] = {}
        demoted: list[tuple[int, int]] = []
        for digest, rows in holders.items():
            group = {url_id: url for url_id, url, vouches in rows
                     if url_id in confirmed or (vouches and url_id not in batch)}
            if not any(url_id in confirmed for url_id in group):
                continue  # the confirmed URL is no holder itself (a duplicate asked again)
            keeper = await self._keeper(group, confirmed) if len(group) > 1 else next(iter(group))
            known[digest] = keeper
            for url_id in group:
                if url_id == keeper:
                    continue
                if url_id in confirmed:
                    settled[url_id] = keeper
                elif keeper in confirmed:
                    demoted.append((url_id, keeper))
        return settled, demoted

    async def _keeper(self, group: dict[int, str], confirmed: dict[int, Completion]) -> int:
        """Of URLs holding one content (id -> URL), the one the rule keeps it at: the lowest id, unless that one
        names another of them canonical which names itself so (its page read now, else as stored)."""
        canon = self._canonicalize
        stored = await db(self._store.declared_canonicals, list(group))
        declared: dict[int, str | None] = {url_id: canon(url) for url_id, url in stored.items()}
        for url_id, completion in confirmed.items():
            if url_id in group and completion.page is not None:
                named = completion.page.canonical_url
                declared[url_id] = canon(named) if named is not None else None
        first = min(group)
        for url_id, url in group.items():
            here = canon(url)
            if url_id != first and here is not None and declared.get(url_id) == here == declared.get(first):
                return url_id
        return first


def _confirms(completion: Completion) -> bool:
    """The answer confirms the content its URL held, at its own address: a 304, or a 200 whose main text is the
    one held (a first read, or a changed text, is ``changed``)."""
    return (completion.state is UrlState.DONE and bool(completion.content_hash) and not completion.changed
            and completion.final_url is None and (completion.status == 304 or completion.page is not None))
