"""A 304 that contradicts a lastmod newer than our copy is asked again in full, as far as the host's record allows.

Some hosts keep an ETag across edits (a template's) and answer 304 to a page their sitemap dates after our copy;
others stamp every lastmod with the moment of the request and answer 304 truthfully. ``Reasks`` holds one
extraction worker's view of each host's record (``hosts.lastmod_reasks``): which URLs were asked again in this run,
which answers are still to come, and which hosts were probed though their 304s are believed. ``ExtractWork`` asks it
once per answer (``settle``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from harvester.records import ClaimedUrl, Completion, FetchResult, UrlState
from harvester.rules import revisit
from harvester.runtime import db, utcnow

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.phases.completions import CompletionBatcher


class Reasks:
    """One extraction worker's re-asks of contradicting 304s, per host, against the host's stored record."""

    def __init__(self, store: FrontierStore, writer: CompletionBatcher, counters: Counter[str],
                 run_id: int | None = None) -> None:
        self._store = store
        self._run_id = run_id
        self._run_start: datetime | None = None
        """When this run began (its row's ``started_at``: a rerun after a kill resumes the row, and the time)."""
        self._writer = writer
        """Where this run's re-asks and their findings go, to be added to the host's record with the next batch."""
        self._counters = counters
        self._tallies: dict[str, tuple[int, int]] = {}
        """Per host (re-asks, changed): the stored tally plus this run's answers (``revisit.reask_304``)."""
        self._reasking: dict[int, str] = {}
        """URLs asked again in full after a contradicting 304 whose answer has not come yet -> their host."""
        self._reasked: set[int] = set()
        """URLs asked again so in this run: at most one extra request each."""
        self._probed: set[str] = set()
        """Hosts whose contradicting 304s are believed and one of which was asked again in this run all the same."""

    async def open(self, origin: str) -> None:
        """A host leased by this worker: its stored record, read once per run. A host whose record was tested since
        this run began (``hosts.reasks_tested_at``: before a kill -9 that this rerun resumes the run of, or by
        another worker of the run) is tested for the run: its 304s the record believes are believed, no probe on
        top. Kept in the process only, the rerun asked one more page again in full than the uninterrupted run."""
        if origin not in self._tallies:
            self._tallies[origin] = await db(self._store.reask_tally, origin)
            if self._run_id is not None:
                if self._run_start is None:
                    self._run_start = await db(self._store.run_started_at, self._run_id)
                tested = await db(self._store.reasks_tested_at, origin)
                if tested is not None and self._run_start is not None and tested >= self._run_start:
                    self._probed.add(origin)

    def settle(self, claimed: ClaimedUrl, result: FetchResult, completion: Completion,
               predicted: bool | None) -> tuple[Completion, bool | None]:
        """The answer's completion and the lastmod's prediction for the truthfulness tally, once re-asks are
        accounted for: the full answer to a re-asked 304 (or a failure, which tells nothing) is a finding for the
        host's record; a 304 that contradicts the lastmod (``revisit.contradicts_304``: a lastmod surely newer
        than our copy, not merely ``predicted`` to be) may drop the validators so the URL is asked again."""
        if claimed.id in self._reasking:
            host = self._reasking.pop(claimed.id)
            if result.ok:
                predicted = self._answered(host, completion.changed)
        elif (result.not_modified and completion.state is UrlState.DONE
              and revisit.contradicts_304(claimed.lastmod, claimed.last_fetched_at, claimed.last_modified)
              and self._may_reask(claimed)):
            completion = replace(completion, forget_validators=True, next_fetch_at=utcnow())
        return completion, predicted

    def _may_reask(self, claimed: ClaimedUrl) -> bool:
        """A 304 contradicts a lastmod newer than our copy: ask the URL again without validators (due now, with none
        kept), at most once in this run, where the host's record allows (``revisit.reask_304``), and once a run on a
        host whose 304s are believed, so its record keeps being tested."""
        host = claimed.host
        if claimed.id in self._reasked:
            return False
        asked, found = self._tallies.get(host, (0, 0))
        # Judged on the re-asks whose answers could have come: those of this run still on their way are not yet
        # evidence either way, but they spend the probes (a burst of 304s read before the first answer is asked
        # up to ``REASK_PROBES``, then believed until answers come).
        pending = sum(1 for waiting in self._reasking.values() if waiting == host)
        if revisit.reask_304(asked, found, pending=pending):
            self._counters["contradicting_304s_reasked"] += 1
            self._probed.add(host)  # a host re-asked in this run has had its record tested: no probe on top
        elif host not in self._probed:
            self._probed.add(host)
            self._counters["contradicting_304s_probed"] += 1
        else:
            self._counters["contradicting_304s_believed"] += 1
            return False
        self._reasked.add(claimed.id)
        self._reasking[claimed.id] = host
        # Counted when decided, with the 304 that drops the validators, not when the full answer comes: an answer
        # asked in a later run (a page budget spent, a stop) or never still counts, as no change, so a host that
        # stamps its lastmods is judged after ``REASK_PROBES`` re-asks, never re-asked every other day.
        self._tallies[host] = (asked + 1, found)
        self._writer.note_reask(host, asked=1, tested=utcnow())
        return True

    def _answered(self, host: str, changed: bool) -> bool:
        """The full answer to a re-asked 304 came: the host's record learns whether the lastmod was right (the page
        changed). Returns the lastmod's prediction for the truthfulness tally: a change, the lastmod announced it."""
        if changed:  # the re-ask itself was counted when it was decided (``_may_reask``)
            asked, found = self._tallies.get(host, (0, 0))
            self._tallies[host] = (asked, found + 1)
            self._writer.note_reask(host, changed=1)
        return True
