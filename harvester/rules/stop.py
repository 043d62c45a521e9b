"""When an extraction run stops: after a round that added no work due now, and after the backed-off retries it
is worth waiting for. Pure: the run feeds it numbers (did the round add URLs, when is the next retry due, how
many completions are settled) and it answers "again now", "wait this long" or "stop"."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LINK_ROUNDS = 50
"""Extraction rounds one run spends on pages found by links and redirects of the rounds before (each round is
one level of links deeper); deeper ones are left to the next run."""

RETRY_WAIT_MAX_S = 30.0
"""Extraction waits this long at most for the next backed-off retry before it ends and leaves them to the next run."""

RETRY_WAIT_TOTAL_S = 120.0
"""All of one extraction's waits for backed-off retries, together, stay within this."""

HOLD_POLL_S = 1.0
"""While work is due on hosts other workers hold (or discovery has yet to hand over), a run looks again this often."""


@dataclass(slots=True)
class StopRule:
    """The stop rule of one extraction run, fed after each round of ``run_hosts``.

    Links and redirect targets found on the pages land in the frontier when their completions are written, after
    their host may have found its queue empty: they are fetched in this run, by another round at once, while a
    round adds URLs (the frontier's growth is bounded by the per-host budgets) and at most ``max_link_rounds``
    times. Retryable failures come back after a short back-off: the run waits for them rather than leave them to
    the next scheduled run, while the next is due within ``retry_wait_max_s`` and the waits add up to
    ``retry_wait_total_s`` at most. Every round after a wait spends an attempt of each URL it fetches, so the waits
    end with the attempts; rounds that settle nothing (URLs handed back unfetched by a parked host) end them after
    ``max_idle_rounds`` (the URLs' ``max_attempts``).
    """

    max_idle_rounds: int
    max_link_rounds: int = MAX_LINK_ROUNDS
    retry_wait_max_s: float = RETRY_WAIT_MAX_S
    retry_wait_total_s: float = RETRY_WAIT_TOTAL_S
    rounds: int = 0
    idle_rounds: int = 0
    last_settled: int = -1
    waited_s: float = 0.0
    held_rounds: int = 0
    """Rounds started after a wait for hosts held elsewhere: they follow no links of the round before."""

    def again_now(self, *, added_urls: bool) -> bool:
        """After a round: True when its pages added URLs and link rounds remain (the caller then checks that
        some are due before it runs another round)."""
        if self.held_rounds:
            self.held_rounds -= 1
        else:
            self.rounds += 1
        return added_urls and self.rounds < self.max_link_rounds

    def hold_s(self, *, held_elsewhere: int, handing_over: bool, claimable: int = 0,
               settled: int | None = None) -> float | None:
        """When the run would end: seconds to wait before another round, or None (the run is over).

        ``claimable``: hosts with work due that this worker may lease now (a dead holder's, released or run out
        since the round looked): another round at once. ``held_elsewhere``: hosts with work due (and budget left)
        that other live workers hold now; ``handing_over``: discovery of this cycle is still running, so hosts are
        still to be handed over. Either way the run is not done: it waits and looks again, instead of leaving work
        to whoever holds it and ending (a holder that dies loses its lease after ``store.lease_s``, and its hosts
        come back). Claimable hosts that rounds settle nothing on (``settled``, as in ``wait_s``) stop counting
        after ``max_idle_rounds`` such rounds. The wait spends no link round."""
        if claimable:
            self.idle_rounds = self.idle_rounds + 1 if settled == self.last_settled else 0
            self.last_settled = -1 if settled is None else settled
            if self.idle_rounds < self.max_idle_rounds:
                self.held_rounds += 1
                return 0.0
        if not held_elsewhere and not handing_over:
            return None
        self.held_rounds += 1
        return HOLD_POLL_S

    def wait_s(self, *, next_due_in_s: float | None, settled: int) -> float | None:
        """Seconds to wait for the next backed-off retry before another round, or None: the run is over.

        ``next_due_in_s``: when the soonest claimable URL comes due (None: nothing will); ``settled``: completions
        written in this run so far, bar URLs handed back unfetched."""
        if next_due_in_s is None:
            return None
        gap = max(0.0, next_due_in_s)
        if gap > self.retry_wait_max_s or self.waited_s + gap > self.retry_wait_total_s:
            return None
        self.idle_rounds = self.idle_rounds + 1 if settled == self.last_settled else 0
        self.last_settled = settled
        if self.idle_rounds >= self.max_idle_rounds:
            return None
        self.waited_s += gap
        return gap
