"""FrontierStore: the durable frontier (SQLite or PostgreSQL) as one object for callers, built from one object per
concern over one ``base.Database``.

Each public method is one transaction keeping one invariant (``complete_many`` writes outcomes, pages, fetches
and outlinks together or not at all). Synchronous and thread safe (one Engine, a pooled connection per call):
async callers use ``asyncio.to_thread``. Never fetches, never parses pages, never builds Settings.
"""
from __future__ import annotations

from types import TracebackType
from typing import Self

from harvester.frontier.base import Database
from harvester.frontier.check import Check
from harvester.frontier.counted import Counted
from harvester.frontier.cycles import Cycles
from harvester.frontier.departures import Departures
from harvester.frontier.discovered import Discovered
from harvester.frontier.documents import Documents
from harvester.frontier.holders import Holders
from harvester.frontier.hosts import Hosts
from harvester.frontier.keys import Keys
from harvester.frontier.outcomes import Outcomes
from harvester.frontier.queue import Queue
from harvester.frontier.refusals import Refusals
from harvester.frontier.reports import Reports
from harvester.frontier.runs import Runs
from harvester.frontier.url_lookups import UrlLookups
from harvester.owners import Liveness
from harvester.settings import Settings

__all__ = ["FrontierStore"]


class FrontierStore:
    """The frontier: URLs, hosts, documents, pages, fetches and runs. Build it with ``FrontierStore.open``.

    One object for callers, one object per concern behind it, each in its own module and owning its own state
    over one shared ``Database`` (engine, dialect, transaction; fixed once open): ``discovered`` (upserts),
    ``queue`` (claims and leases), ``outcomes`` (completions), ``documents``, ``hosts``, ``refusals`` (what
    robots.txt refuses), ``cycles``, ``runs``, ``reports``, ``check`` (a damaged file). A concern that needs
    another is handed it (``outcomes`` writes outlinks through ``discovered``); the two caches live in ``keys``
    (host and source ids, for ``discovered``, ``hosts`` and ``refusals``) and ``queue`` (source kinds).

    The methods callers use are the concerns' own, named here: ``store.claim`` is ``store.queue.claim``. Read
    the concern's module for what one does."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.settings = db.settings
        keys = Keys(db)
        self.discovered = discovered = Discovered(db, keys)
        self.documents = documents = Documents(db)
        self.outcomes = outcomes = Outcomes(db, discovered, documents)
        self.holders = holders = Holders(db)
        self.queue = queue = Queue(db, keys)
        self.hosts = hosts = Hosts(db, keys)
        self.refusals = refusals = Refusals(db, keys)
        self.cycles = cycles = Cycles(db)
        self.runs = runs = Runs(db, cycles)
        self.check = check = Check(db)
        counted = Counted(db)
        self.reports = reports = Reports(db, check)
        self.iter_departures = Departures(db).iter_departures

        # The names callers use, by concern: a caller never needs to know which concern answers.
        self.add_discovered = discovered.add_discovered
        self.lookups = lookups = UrlLookups(db)
        self.known_urls = lookups.known_urls
        self.first_sources = lookups.first_sources
        self.url_id = lookups.url_id
        self.held_target = lookups.held_target
        self.sources_of = lookups.sources_of
        self.sample_urls = lookups.sample_urls
        self.holds_kind = lookups.holds_kind

        self.get_document = documents.get_document
        self.host_documents = documents.host_documents
        self.save_document = documents.save_document
        self.last_read_at = documents.last_read_at

        self.complete = outcomes.complete
        self.complete_many = outcomes.complete_many
        self.duplicates_of = holders.duplicates_of
        self.content_holders = holders.content_holders
        self.declared_canonicals = holders.declared_canonicals
        self.due_hook_retries = outcomes.due_hook_retries
        self.requeue_rechecks = outcomes.requeue_rechecks

        self.claim_hosts = queue.claim_hosts
        self.renew_hosts = queue.renew_hosts
        self.release_hosts = queue.release_hosts
        self.claim = queue.claim
        self.release = queue.release
        self.requeue_expired = queue.requeue_expired
        self.lease_owners = queue.lease_owners
        self.leased_per_owner = queue.leased_per_owner
        self.release_owner = queue.release_owner
        self.host_holders = queue.host_holders
        self.make_due = queue.make_due
        self.url_high_water = queue.url_high_water
        self.due_count = queue.due_count
        self.next_due_at = queue.next_due_at
        self.unfinished = queue.unfinished
        self.sharing = queue.sharing
        self.fetched_since = queue.fetched_since
        self.due_on = queue.due_on

        self.ensure_hosts = hosts.ensure_hosts
        self.host_origins = hosts.host_origins
        self.load_robots = hosts.load_robots
        self.save_robots = hosts.save_robots
        self.host_policy = hosts.host_policy
        self.host_policies = hosts.host_policies
        self.save_host_policy = hosts.save_host_policy
        self.set_moved_to = hosts.set_moved_to
        self.moved_hosts = hosts.moved_hosts
        self.record_lastmod_check = hosts.record_lastmod_check
        self.add_lastmod_checks = hosts.add_lastmod_checks
        self.lastmod_truthfulness = hosts.lastmod_truthfulness
        self.keep_refused = refusals.keep_refused
        self.name_refused = refusals.name_refused
        self.refused_counts = refusals.refused_counts
        self.rejudge_urls = refusals.rejudge_urls
        self.reask_tally = hosts.reask_tally
        self.reasks_tested_at = hosts.reasks_tested_at

        self.begin_cycle = cycles.begin_cycle
        self.finish_cycle = cycles.finish_cycle
        self.cycle_started_at = cycles.cycle_started_at
        self.last_cycle = cycles.last_cycle
        self.cycle_counts = cycles.cycle_counts
        self.run_fetch_counts = cycles.run_fetch_counts

        self.start_run = runs.start_run
        self.resume_or_start_run = runs.resume_or_start_run
        self.run_started_at = runs.run_started_at
        self.finish_run = runs.finish_run
        self.stop_run = runs.stop_run
        self.last_profile = runs.last_profile
        self.last_run = runs.last_run
        self.get_run = runs.get_run
        self.cycle_runs = runs.cycle_runs
        self.completed_run = runs.completed_run

        self.answered_since = reports.answered_since
        self.state_counts = reports.state_counts
        self.stats = reports.stats
        self.iter_pages = reports.iter_pages
        self.iter_fetches = reports.iter_fetches
        self.request_user_agents = reports.request_user_agents
        self.url_states = reports.url_states
        self.url_info = reports.url_info

        self.integrity = check.integrity
        self.queue_count_drift = counted.queue_count_drift
        self.recount_queue = counted.recount_queue

    @classmethod
    def open(cls, settings: Settings, *, upgrade: bool | None = None, read_only: bool = False) -> Self:
        """The frontier at ``settings.database_url``: ``Database.open`` says how it is opened, upgraded or
        refused."""
        return cls(Database.open(settings, upgrade=upgrade, read_only=read_only))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def upgrade(self) -> None:
        """Alembic upgrade to head (``Database.upgrade``)."""
        self.db.upgrade()

    @property
    def liveness(self) -> Liveness:
        """Which lease and run owners are alive (``owners.Liveness``; PostgreSQL: ``frontier.liveness``)."""
        return self.db.liveness

    @property
    def read_only(self) -> bool:
        """Opened read-only: a SQLite file this process cannot write."""
        return self.db.read_only

    @property
    def url_display(self) -> str:
        """The database URL with any password masked: safe to log and print."""
        return self.db.url_display

    @property
    def dialect(self) -> str:
        """The database's dialect name (``sqlite``, ``postgresql``)."""
        return self.db.dialect.name
