"""Per-host politeness state carried across runs and phases: back-off, park and learned limit.

A host's persisted ``HostPolicy`` is applied to the polite client before the host's first request in a phase,
and written back when the host's turn ends and whenever a back-off, a park or the learned limit changes, so a
rerun, or the next phase's client, does not ask a host that said Retry-After before that time, leaves a parked
host alone until its park ends, and starts from the limit learned last time. Never decides politeness
(``politeness.HostGate`` does) and never speaks SQL (``FrontierStore`` does).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from harvester.errors import StoreError
from harvester.fetch.politeness import RETRY_AFTER_PARK
from harvester.runtime import aware, db, utcnow

if TYPE_CHECKING:
    from collections.abc import Iterable

    from harvester.fetch.engine import PoliteClient
    from harvester.frontier import FrontierStore
    from harvester.records import HostPolicy

logger = logging.getLogger(__name__)


class PolicyKeeper:
    """Loads and saves host policies for one phase's ``PoliteClient`` (it sets ``client.on_policy_change``).

    Only hosts this keeper loaded are ever written: a gate the client made for some other origin (a redirect
    hop, a sitemap on another host) starts from nothing, and writing it would erase that host's real state.
    A failed write is logged, not raised: the policy is advice for later runs, and a store that fails will
    fail the phase through its completions anyway.
    """

    def __init__(self, store: FrontierStore, client: PoliteClient) -> None:
        self._store = store
        self._client = client
        self._loaded: set[str] = set()
        self._dirty: set[str] = set()
        self._writing: dict[str, asyncio.Task[None]] = {}
        self._known: dict[str, HostPolicy] = {}
        """Per origin, the state the frontier holds as far as this keeper knows (read by ``load``, or last written):
        a write of the same state is skipped. Each write is a transaction, and a run's end (``aclose``) used to write
        every host again, changed or not: 200 transactions at the end of a run over 200 hosts (issue 32)."""
        client.on_policy_change = self.changed

    async def load(self, origin: str) -> str | None:
        """Apply the origin's persisted policy (once per keeper); returns the park reason if it is parked."""
        if origin not in self._loaded:
            policy = await db(self._store.host_policy, origin)
            self._loaded.add(origin)
            if policy is not None:
                self._client.apply_policy(policy)
                self._known[origin] = policy
        return self._client.parked(origin)

    def parked(self, origin: str) -> str | None:
        """The origin's park reason in this phase's client (None: not parked)."""
        return self._client.parked(origin)

    def changed(self, origin: str) -> None:
        """Write the origin's policy soon; a burst of changes while one write is in flight costs one more write."""
        if origin not in self._loaded:
            return
        self._dirty.add(origin)
        if origin not in self._writing:
            task = asyncio.get_running_loop().create_task(self._write(origin), name=f"host policy {origin}")
            self._writing[origin] = task

    async def save(self, origin: str) -> None:
        """The host's turn ended: write its final state now (and wait for it)."""
        self.changed(origin)
        task = self._writing.get(origin)
        if task is not None:
            await asyncio.shield(task)

    async def aclose(self) -> None:
        """Write every loaded host's state and wait for all writes (the phase is ending, however it ends)."""
        for origin in self._loaded:
            self.changed(origin)
        if self._writing:
            await asyncio.gather(*self._writing.values(), return_exceptions=True)

    async def lift_expired(self, origins: Iterable[str]) -> int:
        """Clear parks that have run out on ``origins``, so the frontier hands those hosts out again (a parked
        host is never claimed while its reason is set). Returns how many were lifted."""
        now = utcnow()
        lifted = 0
        policies = await db(self._store.host_policies, list(origins))  # one read, not one per seed host
        for origin, policy in sorted(policies.items()):
            if policy.parked_reason is None:
                continue
            until = policy.blocked_until
            if until is not None and (until if until.tzinfo else until.replace(tzinfo=now.tzinfo)) > now:
                continue
            await db(self._store.save_host_policy, replace(policy, parked_reason=None, blocked_until=None))
            logger.info(
                "park of %s ran out (%s): it gets another chance", origin, policy.parked_reason, extra={"host": origin}
            )
            lifted += 1
        return lifted

    async def _write(self, origin: str) -> None:
        try:
            while origin in self._dirty:
                self._dirty.discard(origin)
                policy = self._client.host_policy(origin)
                if self._known.get(origin) == policy:
                    continue  # the frontier holds this already
                await db(self._store.save_host_policy, policy)
                self._known[origin] = policy
        except StoreError as exc:
            logger.warning(
                "politeness state of %s not saved: %s", origin, exc, extra={"host": origin, "error_class": "storage"}
            )
        finally:
            self._writing.pop(origin, None)


async def end_cycle_parks(store: FrontierStore, origins: Iterable[str]) -> list[str]:
    """A new cycle begins: lift the parks earlier cycles set on ``origins`` by the crawler's own judgement
    (consecutive failures, a Crawl-delay too long, a back-off grown past ``backoff_max_s``), so the host is asked
    again, robots.txt first. Such a park means "not again in this run"; lasting ``park_s`` (24 h) it made the next
    daily run skip the host whenever that run started less than a day after the park, and a one-day fault cost two
    days. A park whose end the server named (a Retry-After) is kept until then. Returns the origins lifted.

    The consecutive-failure count stays: a host still failing is parked again by its first failure."""
    now = utcnow()
    lifted: list[str] = []
    policies = await db(store.host_policies, list(origins))
    for origin, policy in sorted(policies.items()):
        reason = policy.parked_reason
        if reason is None:
            continue
        if reason.startswith(RETRY_AFTER_PARK) and policy.blocked_until is not None \
                and aware(policy.blocked_until) > now:
            continue
        await db(store.save_host_policy, replace(policy, parked_reason=None, blocked_until=None))
        logger.info("park of %s ends with the cycle that set it (%s): it gets another chance", origin, reason,
                    extra={"host": origin})
        lifted.append(origin)
    return lifted
