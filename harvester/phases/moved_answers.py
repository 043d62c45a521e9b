"""The answers of permanent redirects, kept for their targets: a target queued as a URL of its own is recorded
from the answer its old address already got, instead of being downloaded a second time."""

from __future__ import annotations

from dataclasses import replace

from harvester.records import FetchResult

MOVED_ANSWERS_BYTES = 32 * 2**20
"""Bodies of permanent redirects' targets kept until the target is claimed (oldest dropped past this)."""


class MovedAnswers:
    """Canonical target URL -> the answer its permanent redirect gave, oldest first. In memory and bounded
    (``MOVED_ANSWERS_BYTES``): a target claimed by another worker, or after a restart, is simply fetched."""

    def __init__(self, limit_bytes: int = MOVED_ANSWERS_BYTES) -> None:
        self._answers: dict[str, FetchResult] = {}
        self._bytes = 0
        self._limit = limit_bytes

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
