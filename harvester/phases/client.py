"""The polite client a phase fetches through: built over the frontier (robots.txt persisted there, the site's
scope on every hop), or the one a cycle shares between its two phases (``CycleState.shared``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext

from harvester.fetch.engine import PoliteClient
from harvester.frontier import FrontierStore
from harvester.phases.cycle_state import CycleState
from harvester.phases.handover import Shared
from harvester.phases.host_policy import PolicyKeeper
from harvester.phases.runs import open_store
from harvester.records import ErrorClass, RobotsState
from harvester.rules.admission import Site
from harvester.runtime import db
from harvester.settings import Settings
from harvester.site_profile import SiteProfile


class StoreRobots:
    """robots.txt persistence for the fetch engine, over the synchronous store."""

    def __init__(self, store: FrontierStore) -> None:
        self._store = store

    async def load_robots(self, origin: str) -> RobotsState | None:
        state = await db(self._store.load_robots, origin)
        if state is not None and state.error_class is ErrorClass.ADDRESS_REFUSED:
            return None  # the verdict of an earlier run's address policy, not a fact about the host: ask again
        return state

    async def save_robots(self, state: RobotsState) -> None:
        await db(self._store.save_robots, state)


def polite_client(store: FrontierStore, settings: Settings, profile: SiteProfile, site: Site) -> PoliteClient:
    """The one polite client of a task: per-host limits, robots.txt persisted in the frontier, scope on hops, and
    the address policy with the profile's allowance and its seeds' addresses. The seeds are handed in the form every
    URL is fetched in: a host written with percent-escapes (RFC 3986 §3.2.2) is resolved decoded, as fetched."""
    return PoliteClient(
        settings,
        user_agent=profile.user_agent,
        per_host_limit=profile.per_host_limit,
        min_delay_s=profile.min_delay_s,
        robots_store=StoreRobots(store),
        in_scope=site.in_scope,
        canonicalize=lambda url: site.fetch_form(url) or url,
        seeds=[form for form in map(site.fetch_form, profile.seeds) if form is not None],
        allow_addresses=profile.allow_addresses,
    )


def phase_client(shared: Shared | None, store: FrontierStore, settings: Settings, profile: SiteProfile,
            site: Site) -> AbstractAsyncContextManager[PoliteClient]:
    """The phase's client: the cycle's shared one (closed by the cycle), else one of its own."""
    return nullcontext(shared.client) if shared is not None else polite_client(store, settings, profile, site)


@asynccontextmanager
async def shared_politeness(cycle: CycleState, settings: Settings, profile: SiteProfile) -> AsyncIterator[None]:
    """Give ``cycle`` one polite client for both phases in this loop (``CycleState.shared``), with its own store
    (robots.txt and host policies outlive either phase's), closed when the body ends."""
    async with open_store(settings) as store:
        site = Site(settings, profile)
        site.add_moved(await db(store.moved_hosts))
        async with polite_client(store, settings, profile, site) as client:
            shared = Shared(client, PolicyKeeper(store, client), asyncio.get_running_loop(), [site])
            client.set_scope(shared.in_scope)
            cycle.shared = shared
            try:
                yield
            finally:
                cycle.shared = None
                await shared.policies.aclose()
