"""Phase one, ``discover``: robots.txt, sitemaps, feeds and listing pages of each host into the frontier.

Idempotent and resumable from the database alone: a rerun of a run skips the documents it already processed and
keeps its listing-page crawl in the frontier (leased, completed with its outlinks in one transaction). Each host's
walk is ``discover_host.HostDiscovery`` over its ``discover_context.HostContext``; this module runs the hosts and
gathers their results.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from harvester.errors import Interrupted
from harvester.frontier import FrontierStore
from harvester.phases.client import phase_client
from harvester.phases.cycle_state import CycleState
from harvester.phases.discover_context import HostContext
from harvester.phases.discover_host import HostDiscovery, discover_hosts
from harvester.phases.host_policy import PolicyKeeper
from harvester.phases.results import PhaseResult
from harvester.phases.runs import recover_leases, teach_classifier
from harvester.rules.admission import Site
from harvester.runtime import db, utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile


async def discover(
    store: FrontierStore,
    settings: Settings,
    profile: SiteProfile,
    *,
    hosts: Sequence[str] | None = None,
    run_id: int | None = None,
    refresh: bool = False,
    cycle: CycleState | None = None,
) -> PhaseResult:
    """Phase one for ``hosts`` (default: the profile's seed hosts), concurrently, each politely.

    A rerun with the same ``run_id`` skips every document already processed in that run; ``refresh`` asks
    for documents whose revisit time has not come yet too (conditionally, so unchanged ones answer 304).
    ``cycle`` (``phases.cycle_state``): each host discovered is handed to the cycle's extraction at once, through
    the cycle's polite client when it runs in this loop.
    """
    ready = cycle.handover if cycle is not None else None
    site = Site(settings, profile)
    site.add_moved(await db(store.moved_hosts))
    origins = list(hosts) if hosts else site.origins
    started = await db(store.run_started_at, run_id) if run_id is not None else None
    await recover_leases(store)
    # A rerun skips the sitemaps it already processed, so it would not relearn their detail shapes and would
    # classify the same links differently (as listings) after a crash: learn them from the frontier first.
    await teach_classifier(store, site)
    result = PhaseResult(phase="discover")
    shared = cycle.polite(site) if cycle is not None else None
    async with phase_client(shared, store, settings, profile, site) as client:
        policies = shared.policies if shared is not None else PolicyKeeper(store, client)

        beside = ready is not None and shared is not None  # one gate for both phases: they may overlap on a host
        listed = functools.partial(ready.hand_over, beside=True) if beside and ready is not None else None

        running: dict[str, HostContext] = {}  # the hosts being discovered (``discover_hosts``: a few at a time)
        robots: dict[str, Callable[[str], bool]] = {}  # each host's robots.txt as this run read it

        def make(origin: str) -> HostDiscovery:
            host = running[origin] = HostContext(
                store, settings, site, client, origin, run_id=run_id, run_started=started or utcnow(),
                refresh=refresh, policies=policies, beside=shared.owners if shared is not None else frozenset())
            return HostDiscovery(host, listed=listed)

        def read(host: HostContext) -> None:
            if host.robots is not None:
                robots[host.origin] = host.robots.allowed

        def finished(item: HostDiscovery) -> None:
            result.counters.update(item.counters)
            result.problems.extend(item.problems)
            read(running.pop(item.host.origin, item.host))
            if ready is not None:
                ready.hand_over(item.homes())

        try:
            await discover_hosts(client, origins, make, finished, at_once=settings.politeness.max_active_hosts)
        except Interrupted:  # the stopped hosts recorded what they read: so are the URLs it named that were refused
            for host in running.values():
                read(host)
            await _keep_refused(store, robots)
            raise
        finally:
            if shared is None:
                await policies.aclose()
        await _keep_refused(store, robots)
        # Not the hosts another call discovers (``_others_hosts``): the client may be the cycle's, shared by a task
        # per host, and every task listing every host's tally made a two-host site's table count each twice.
        theirs = _others_hosts(origins, site)
        for origin, diag in client.diagnostics().items():
            if origin not in theirs:
                result.hosts[origin] = diag.as_dict()
    # One host at a time, each live report dropped as its summary is made: the run is over for them, and holding
    # every host's report and its summary at once was the peak of a wide run (issue 22: 2,000 hosts).
    while site.reports:
        origin = next(iter(site.reports))
        result.reports[origin] = site.reports.pop(origin).to_dict()
    site.forget_learned()
    return result


def _others_hosts(origins: list[str], site: Site) -> set[str]:
    """The hosts another discovery of the site reports (the site's other origins, and where they moved), which a
    discovery of ``origins`` leaves out of its table. Everything else it may have asked stays in: its origins,
    where they moved, and other hosts its sitemaps are on (sitemaps.org cross-submission: a CDN), whose requests
    and failures vanished from the table when it listed only its origins and their moves (review47b)."""
    mine = {*origins, *(site.moved[origin] for origin in origins if origin in site.moved)}
    others = [origin for origin in site.origins if origin not in mine]
    return {*others, *(site.moved[origin] for origin in others if origin in site.moved)} - mine


async def _keep_refused(store: FrontierStore, robots: dict[str, Callable[[str], bool]]) -> None:
    """Per host whose robots.txt this run read, drop the refused URLs it allows again
    (``FrontierStore.keep_refused``): what ``harvester status`` counts, true on a re-crawl whose documents answer
    304. The refusals themselves were written as each document was read (``HostContext.record_refused``)."""
    for origin, allowed in robots.items():
        await db(store.keep_refused, origin, allowed)
