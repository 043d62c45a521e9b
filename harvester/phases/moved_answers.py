"""The answers of permanent redirects and their targets, so a run asks a target once, as its own URL would be
asked: a permanent redirect to a URL already read in the run, or to one the frontier holds (it has a request of its
own, conditional when it has validators: now, or at its own revisit), or to one on a host this worker does not
hold (its holder asks it), is recorded from the redirect's own answer, not followed; one to a URL the frontier has
never seen, on a host of this worker, is followed, and its answer kept for the target's own claim, which records it
from that answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from harvester.records import FetchResult
from harvester.rules.revisit import is_permanent_move
from harvester.runtime import db

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore

MOVED_ANSWERS_BYTES = 32 * 2**20
"""Bodies of permanent redirects' targets kept until the target is claimed (oldest dropped past this)."""

FOLLOWED_WAIT_S = 30.0
"""The longest a redirect waits for another redirect's answer to the same target (the default fetch deadline)."""

READ_URLS_KEPT = 200_000
"""URLs read in a run that ``ReadUrls`` remembers (the older half is dropped at a time past this): ~16 MB at most."""


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class ReadUrls:
    """Canonical URLs whose own answer (a 2xx, or a 304 to a conditional request) this worker holds from this run.
    Kept as ``hash()`` values (this process's: nothing leaves it), in two generations of half ``limit`` each, so a
    long run stays bounded; a URL forgotten (or never seen by this worker) has its redirects followed, as ever."""

    def __init__(self, limit: int = READ_URLS_KEPT) -> None:
        self._now: set[int] = set()
        self._before: set[int] = set()
        self._half = max(1, limit // 2)

    def add(self, url: str) -> None:
        if len(self._now) >= self._half:
            self._before, self._now = self._now, set()
        self._now.add(hash(url))

    def __contains__(self, url: str) -> bool:
        key = hash(url)
        return key in self._now or key in self._before


class MovedAnswers:
    """Canonical target URL -> the answer its permanent redirect gave, oldest first, and the URLs read in this run
    (``ReadUrls``). In memory and bounded (``MOVED_ANSWERS_BYTES``): a target claimed by another worker, or after a
    restart, is simply fetched. ``canonicalize`` gives a URL's frontier key (``Site.canonicalize``); ``store``
    says which keys the frontier holds."""

    def __init__(self, canonicalize: Callable[[str], str | None], store: FrontierStore,
                 limit_bytes: int = MOVED_ANSWERS_BYTES, followed_wait_s: float = FOLLOWED_WAIT_S,
                 holds: Callable[[str], bool] = lambda _origin: True) -> None:
        self._answers: dict[str, FetchResult] = {}
        self._bytes = 0
        self._limit = limit_bytes
        self._canonicalize = canonicalize
        self._store = store
        self._following: dict[str, tuple[str, asyncio.Event]] = {}
        """Source key -> the target key its permanent redirect is being followed to, and the event set once that
        answer is noted (``answered``)."""
        self._read = ReadUrls()
        self.followed_wait_s = followed_wait_s
        self._holds = holds
        """Whether this worker holds an origin's lease (``HostHolds.holds``): only there is a target's claim
        its own, to take the kept answer."""

    def answered(self, url: str, result: FetchResult) -> None:
        """``url`` (its key) got ``result``: noted at once, before the host's next request, which may be the
        target's own or another redirect to it. A page's own answer makes it read; a permanent move followed to a
        2xx makes its target read, and keeps that answer for the target's claim."""
        following = self._following.pop(url, None)
        try:
            self._note(url, result)
        finally:
            if following is not None:
                following[1].set()  # a redirect to the same target waiting for this answer goes on

    def _note(self, url: str, result: FetchResult) -> None:
        if result.unfollowed or result.error_class is not None:
            return
        if not result.redirects:
            if result.ok or (result.not_modified and result.sent_validators):
                self._read.add(url)
            return
        if result.ok and is_permanent_move(result):
            target = self._canonicalize(result.final_url)
            if target is not None:
                self._read.add(target)
                self.keep(target, result)

    async def asked_alone(self, source: str, url: str) -> bool:
        """Whether ``url`` (as requested), the target of a permanent redirect from ``source`` (a key), is asked on
        its own, so the redirect is not followed: read in this run, or a URL of the frontier (due in this run, maybe
        in flight beside the redirect, or left to its own revisit, conditional when it has validators: following
        the redirect would ask it a second time, or in full). While another redirect is being followed to it, its
        answer is waited for (a request on the same host, within this fetch's deadline): read then, it was kept for
        the target's claim, which must not come before it does. A target that is ``source`` itself (the site's
        spelling of its own key) is followed."""
        key = self._canonicalize(url)
        if key is None or key == source:
            return False
        if not self._holds(_origin(key)):
            # Another worker's host (or nobody's): the target, queued by the redirect's record, is claimed and
            # asked by that host's holder, who never sees an answer kept here. Followed, it was asked twice
            # (tests/phases/test_redirect_across_workers.py). A held target last found moved is made due.
            await db(self._store.held_target, key)
            return True
        if await self._read_once_followed(key) or await db(self._store.held_target, key):
            return True
        if await self._read_once_followed(key):  # another redirect to it may have been followed meanwhile
            return True
        self._following[source] = (key, asyncio.Event())
        return False

    async def _read_once_followed(self, key: str) -> bool:
        """Whether ``key`` was read in this run, once every redirect being followed to it now has its answer. A
        redirect whose fetch ended with no answer noted (a stop at its hop's slot, a lapsed lease, a cancel) never
        sets its event: it is waited for ``followed_wait_s`` at most (a fetch's own deadline), then forgotten."""
        while waits := [(source, noted) for source, (target, noted) in self._following.items() if target == key]:
            source, noted = waits[0]
            try:
                await asyncio.wait_for(noted.wait(), self.followed_wait_s)
            except TimeoutError:
                if self._following.get(source, (key, None))[1] is noted:
                    del self._following[source]
        return key in self._read

    def keep(self, target: str, result: FetchResult) -> None:
        answer = replace(result, url=target, final_url=target, redirects=(), redirect_statuses=())
        self.take(target)  # many old addresses may lead to one target: the newest answer is kept
        self._answers[target] = answer
        self._bytes += len(answer.body or b"")
        while self._bytes > self._limit and self._answers:
            dropped = self._answers.pop(next(iter(self._answers)))
            self._bytes -= len(dropped.body or b"")

    def take(self, target: str) -> FetchResult | None:
        """The answer kept for ``target`` (None: none), no longer kept."""
        answer = self._answers.pop(target, None)
        if answer is not None:
            self._bytes -= len(answer.body or b"")
        return answer
