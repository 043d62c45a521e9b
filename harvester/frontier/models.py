"""The frontier's tables as typed declarative models; the schema itself only changes through ``migrations/``.

No queries here (the ``FrontierStore`` concerns speak SQL). Rows are kept compact because ``urls`` grows to millions:
times are ``timestamptz`` on PostgreSQL but integer microseconds on SQLite (8 bytes instead of a 26-byte ISO string).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator, TypeEngine

from harvester.runtime import aware

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
"""Constraint names come from here, never from autogenerate's defaults (STYLE.md §3)."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_fromtimestamp = datetime.fromtimestamp

Id = BigInteger().with_variant(Integer(), "sqlite")
"""64-bit ids on PostgreSQL; on SQLite ``INTEGER PRIMARY KEY`` so the id is the rowid (no extra column)."""


def to_epoch_us(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken to be UTC."""
    delta = aware(value) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_FLOAT_EXACT_US = 2**32 * 1_000_000
"""Below this many microseconds from the epoch (about 136 years either way) ``value / 1e6`` is within 0.25 µs of
the true instant, so ``fromtimestamp``'s rounding to the microsecond gives it back exactly."""


def from_epoch_us(value: int) -> datetime:
    """The instant ``value`` microseconds after the epoch, UTC-aware. ``fromtimestamp`` on a float is about twice
    as fast as ``EPOCH + timedelta(...)`` (a claim converts a thousand of these); dates past its exact range take
    the slow path."""
    if -_FLOAT_EXACT_US < value < _FLOAT_EXACT_US:
        return _fromtimestamp(value / 1e6, UTC)
    return EPOCH + timedelta(microseconds=value)


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC instant: ``timestamptz`` on PostgreSQL, integer microseconds on SQLite."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return to_epoch_us(value)
        return aware(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, int):
            return from_epoch_us(value)
        assert isinstance(value, datetime)
        return aware(value)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Host(Base):
    """One origin (``scheme://host[:port]``): robots state, politeness state, host lease and counters."""

    __tablename__ = "hosts"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    origin: Mapped[str] = mapped_column(String(300), unique=True)
    robots_status: Mapped[int | None] = mapped_column(SmallInteger)
    robots_body: Mapped[str | None] = mapped_column(Text)
    robots_etag: Mapped[str | None] = mapped_column(String(300))
    robots_last_modified: Mapped[str | None] = mapped_column(String(100))
    robots_fetched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    robots_expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    robots_error: Mapped[str | None] = mapped_column(String(40))
    robots_url: Mapped[str | None] = mapped_column(Text)
    """The URL that answered with ``robots_body`` and issued its validators (robots.txt's redirect target)."""
    robots_judged: Mapped[str | None] = mapped_column(String(64))
    """The fingerprint of the robots.txt rules the host's stored URLs were last judged by (``RobotsRules.fingerprint``;
    migration 0019): rules read that differ have its URLs judged again (``Refusals.rejudge_urls``)."""
    crawl_delay_s: Mapped[float | None] = mapped_column(Float)
    request_rate_s: Mapped[float | None] = mapped_column(Float)
    concurrency_limit: Mapped[int | None] = mapped_column(SmallInteger)
    next_allowed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    blocked_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    parked_reason: Mapped[str | None] = mapped_column(String(200))
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    lastmod_checks: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    lastmod_hits: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    lastmod_reasks: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    """304s that contradicted a lastmod newer than our copy, asked again in full (``revisit.reask_304``) ..."""
    lastmod_reasks_changed: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    """... and how many of those full answers brought a changed page (the lastmod was right, the 304 wrong)."""
    reasks_tested_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    """When a re-ask or a probe of this record was last decided (migration 0022): a run that began before it has
    tested the host already, resumed after a kill too (``phases.reasks``)."""
    counters: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    moved_to: Mapped[str | None] = mapped_column(String(300))
    """The origin this seed host's homepage redirects to: part of the crawl's scope from then on."""


class Source(Base):
    """A place URLs were found (``sitemap:https://h/sitemap.xml``); urls refer to it by id, not by label."""

    __tablename__ = "sources"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    label: Mapped[str] = mapped_column(String(2100), unique=True)
    kind: Mapped[str] = mapped_column(String(20))


HOOK_FAILED_ROWS = text("last_error_class = 'hook_failed'")
"""URLs whose last page the extractor hook failed on (``ErrorClass.HOOK_FAILED``), as written in the partial index
and in the queries that must use it (a bound parameter would not match the index's predicate on SQLite)."""


MOVED_ROWS = "state = 'done' AND last_status IN (301, 308)"
"""URLs whose last answer was a permanent redirect (``rules.revisit.PERMANENT_REDIRECTS``): ``moved`` to a reader
(``status``, ``export``), ``done`` to the frontier, which asks them at their revisit (``ix_urls_moved``)."""

MISSING_ROWS = "state = 'gone' AND content_hash IS NULL"
"""URLs that answered 404/410 and were never stored (no content hash): ``missing`` to a reader (a broken link, not a
deletion: ``status``, a cycle's counts), ``gone`` to the frontier (``ix_urls_missing``)."""

RECHECK_ROWS = "state IN ('failed', 'duplicate')"
"""URLs neither queued nor done for good: asked again at their recheck time (``ix_urls_recheck``)."""


class Url(Base):
    """One canonical URL and its crawl cycle: the URL is ``hosts.origin || path`` (path = everything after the
    origin). The first source is ``source_id``; further ones are in url_sources. A QUEUED URL waits in ``queue``
    unless it is leased (``leases``): claims never write this table, whose rows are scattered (see Queue)."""

    __tablename__ = "urls"
    __table_args__ = (
        # "Seen" is this index: the origin lives once in hosts, so keys stay short (bytes per URL, insert rate).
        UniqueConstraint("host_id", "path"),
        # Finished URLs whose revisit is due, without walking every finished URL of a host.
        # Partial on both databases: ``add_postgresql_predicates`` gives PostgreSQL the same WHERE (below).
        Index("ix_urls_revisit", "host_id", "next_fetch_at", sqlite_where=text("state = 'done'")),
        Index("ix_urls_content_hash", "content_hash", sqlite_where=text("content_hash IS NOT NULL")),
        # The duplicates of one URL, re-pointed when it is demoted to a duplicate itself (rare, so partial: the
        # million URLs that are no one's duplicate cost nothing here).
        Index("ix_urls_duplicate_of", "duplicate_of", sqlite_where=text("duplicate_of IS NOT NULL")),
        # The URLs whose page the extractor hook failed on, asked again at each run's start (``due_hook_retries``):
        # partial, so a run finds the few without reading every finished URL. 0009.
        Index("ix_urls_hook_failed", "host_id", sqlite_where=HOOK_FAILED_ROWS),
        # Finished URLs counted per host, kind and state by an index-only walk (``stats``); queued ones are
        # counted in ``queue`` and ``leases``, so adding a URL pays nothing for it (migration 0010).
        Index("ix_urls_finished", "host_id", "kind", "state", sqlite_where=text("state <> 'queued'")),
        # Failed URLs and duplicates whose recheck is due, queued at each extraction's start (``requeue_rechecks``):
        # partial, the few of them without the finished rest. The query repeats this WHERE word for word. 0014.
        Index("ix_urls_recheck", "host_id", "next_fetch_at", sqlite_where=text(RECHECK_ROWS)),
        # Moved URLs counted per host and kind apart from the live ones, missing ones apart from the gone ones
        # (``stats``): partial, the few of them. The queries repeat these WHEREs word for word. 0018.
        Index("ix_urls_moved", "host_id", "kind", "state", "last_status", sqlite_where=text(MOVED_ROWS)),
        Index("ix_urls_missing", "host_id", "kind", "state", "content_hash", sqlite_where=text(MISSING_ROWS)),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    path: Mapped[str] = mapped_column(String(2048))
    canonical_version: Mapped[int] = mapped_column(SmallInteger, default=1, server_default=text("1"))
    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"))
    source_id: Mapped[int | None] = mapped_column(ForeignKey("sources.id"))
    kind: Mapped[str] = mapped_column(String(12))
    state: Mapped[str] = mapped_column(String(12))
    score: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    depth: Mapped[int] = mapped_column(SmallInteger, default=0, server_default=text("0"))
    first_seen: Mapped[datetime] = mapped_column(UtcDateTime)
    last_seen: Mapped[datetime] = mapped_column(UtcDateTime)
    lastmod: Mapped[datetime | None] = mapped_column(UtcDateTime)
    changefreq: Mapped[str | None] = mapped_column(String(10))
    priority: Mapped[float | None] = mapped_column(Float)
    next_fetch_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    revisit_s: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(SmallInteger, default=0, server_default=text("0"))
    last_error_class: Mapped[str | None] = mapped_column(String(30))
    last_error: Mapped[str | None] = mapped_column(String(500))
    etag: Mapped[str | None] = mapped_column(String(300))
    last_modified: Mapped[str | None] = mapped_column(String(100))
    content_hash: Mapped[str | None] = mapped_column(String(128))
    last_status: Mapped[int | None] = mapped_column(SmallInteger)
    last_fetched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    changed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    gone_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    final_url: Mapped[str | None] = mapped_column(String(2048))
    duplicate_of: Mapped[int | None] = mapped_column(ForeignKey("urls.id"))
    fetch_path: Mapped[str | None] = mapped_column(String(2048))
    """What to request after the origin when it is not ``path``: the query in the site's own order."""
    lastmod_until: Mapped[datetime | None] = mapped_column(UtcDateTime)
    """The end of the period ``lastmod`` (its start) names when it is of reduced precision ("2026-12-09": the
    next midnight); NULL for a moment. Whether the lastmod may announce a change after our last fetch is judged by
    it (``revisit.lastmod_predicts_change``)."""


class QueueEntry(Base):
    """A QUEUED URL that nobody holds, in claim order: per host and kind, best score first, then id.

    Claiming used to flip ``urls.state`` in place, and the best URLs of a host sit on scattered table pages:
    a claim of 1,000 dirtied ~1,000 pages (30-50 ms on SQLite). Here a claim deletes adjacent rows of this small
    clustered table and inserts into ``leases``: a few pages. ``rank`` is ``-urls.score`` so that one ascending
    key order serves both databases (PostgreSQL primary keys have no DESC). ``due_at`` is the back-off of a
    retried URL (None: due now). Kept in step with ``urls`` by the frontier alone, like an index: no foreign
    keys, so a bulk insert pays no parent lookups for it.
    """

    __tablename__ = "queue"
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 -- SQLAlchemy reads it once, never mutated

    host_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(12), primary_key=True)
    rank: Mapped[float] = mapped_column(Float, primary_key=True)
    url_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    due_at: Mapped[datetime | None] = mapped_column(UtcDateTime)


QUEUE_COUNTS = Table(
    "queue_counts", Base.metadata,
    Column("host_id", Id, nullable=False),
    Column("kind", String(12), nullable=False),
    Column("n", BigInteger, nullable=False),
    Index("ix_queue_counts", "host_id", "kind"),
)
"""Queue entries per host and kind: the sum of a host and kind's ``n`` (``harvester status``, without walking the
queue). Kept by triggers on ``queue`` (migration 0017): one row per host and kind on SQLite, a row per statement's
net change on PostgreSQL, summed by ``fold_queue_counts``. No primary key: on PostgreSQL rows are only appended."""


class Lease(Base):
    """A URL handed to one worker until ``lease_until``; its ``urls.state`` stays QUEUED meanwhile.

    Only in-flight claims live here (thousands, not millions), so the table stays a few pages and is scanned
    whole by the rare owner/expiry queries instead of carrying secondary indexes that every claim would pay for.
    Like ``queue``, kept by the frontier alone and without foreign keys: their per-row checks were 40% of a
    claim on PostgreSQL.
    """

    __tablename__ = "leases"

    url_id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=False)
    host_id: Mapped[int] = mapped_column(Id)
    owner: Mapped[str] = mapped_column(String(200))
    lease_until: Mapped[datetime] = mapped_column(UtcDateTime)


class UrlSource(Base):
    """Further provenance of a URL beyond its first source: (url, source) pairs, WITHOUT ROWID on SQLite."""

    __tablename__ = "url_sources"
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 -- SQLAlchemy reads it once, never mutated

    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"), primary_key=True)
    source_id: Mapped[int] = mapped_column(ForeignKey("sources.id"), primary_key=True)


class RobotsRefusal(Base):
    """A URL of its host that discovery found and robots.txt refuses now: never stored in ``urls``, never asked.
    One row per URL and document naming it (counted once per URL); dropped when robots.txt allows it again or the
    document, read again, no longer names it (``Refusals``). 0016, keyed by the document too since 0019."""

    __tablename__ = "robots_refusals"
    __table_args__ = {"sqlite_with_rowid": False}  # noqa: RUF012 -- SQLAlchemy reads it once, never mutated

    host_id: Mapped[int] = mapped_column(ForeignKey("hosts.id"), primary_key=True)
    path: Mapped[str] = mapped_column(String(2048), primary_key=True)
    """The canonical URL after its host's origin, as ``urls.path``."""
    source_id: Mapped[int] = mapped_column(Id, primary_key=True)
    """The ``sources`` row of the document that named it (its provenance label); 0: named before 0019 recorded
    which (dropped once the host's documents were all read since). A document read in full replaces its rows."""
    judged: Mapped[str | None] = mapped_column(String(2048))
    """The site's spelling robots.txt judged (the fetch form), when it differs from the canonical URL."""
    found_at: Mapped[datetime] = mapped_column(UtcDateTime)


class Document(Base):
    """A discovery document (robots, sitemap, feed, listing) as last fetched, for conditional re-fetches."""

    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    url: Mapped[str] = mapped_column(String(2048), unique=True)
    kind: Mapped[str] = mapped_column(String(20))
    status: Mapped[int | None] = mapped_column(SmallInteger)
    etag: Mapped[str | None] = mapped_column(String(300))
    last_modified: Mapped[str | None] = mapped_column(String(100))
    content_hash: Mapped[str | None] = mapped_column(String(128))
    fetched_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    next_fetch_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    url_count: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    error: Mapped[str | None] = mapped_column(String(500))
    children: Mapped[list[str] | None] = mapped_column(JSON)
    read_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    """The last full read (a 200 parsed; ``fetched_at`` moves on a 304 too): what it named then and does not name
    now vanished from it."""
    refusals_read: Mapped[bool | None] = mapped_column(Boolean)
    """Its robots.txt refusals were recorded at its last full read (``robots_refusals``); NULL for one read before
    0019, asked once without validators where robots.txt refuses anything."""


class Body(Base):
    """One payload as the site served it, stored once whatever URLs and versions serve it (``digest``: sha256 of
    the bytes, hex), zlib-compressed. Rows are never updated; a page version points here."""

    __tablename__ = "bodies"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    size: Mapped[int] = mapped_column(Integer)
    body: Mapped[bytes] = mapped_column(LargeBinary)


class Page(Base):
    """One stored version of a URL: a payload it served that differs from its previous version's (the payload
    digest decides, not the main text), with what extraction kept. ``change`` says how it differs from the
    version before: ``new`` (none before), ``changed`` (main text differs), ``restyled`` (bytes only)."""

    __tablename__ = "pages"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"), index=True)
    fetched_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    status: Mapped[int] = mapped_column(SmallInteger)
    final_url: Mapped[str] = mapped_column(String(2048))
    content_type: Mapped[str | None] = mapped_column(String(200))
    etag: Mapped[str | None] = mapped_column(String(300))
    last_modified: Mapped[str | None] = mapped_column(String(100))
    content_hash: Mapped[str] = mapped_column(String(128))
    canonical_url: Mapped[str | None] = mapped_column(String(2048))
    title: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    language: Mapped[str | None] = mapped_column(String(40))
    jsonld: Mapped[list[Any] | None] = mapped_column(JSON)
    fields: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))  # NULL: the hook failed
    robots: Mapped[str | None] = mapped_column(String(40))
    """The robots directives that applied to us, comma-separated (``noindex,nofollow``); '' for none; NULL for a
    page stored before they were recorded."""
    body_id: Mapped[int] = mapped_column(ForeignKey("bodies.id"))
    body_size: Mapped[int] = mapped_column(Integer)
    change: Mapped[str | None] = mapped_column(String(10))
    """``new``, ``changed`` or ``restyled`` (records.ChangeKind); NULL for a version stored before 0008."""
    hook_error: Mapped[dict[str, str] | None] = mapped_column(JSON(none_as_null=True))
    """Why the extractor hook failed on this version (``class``, ``message``; ``fields`` then NULL); NULL when it
    did not (or none ran). Since 0009."""
    encoding: Mapped[str | None] = mapped_column(String(40))
    """The codec its text was decoded with (``PageRecord.encoding``): the same payload decoded otherwise (its charset
    label fixed) is a new version. NULL when no text was read, and for a version stored before 0024."""


class Cycle(Base):
    """One crawl cycle (a harvest or a re-crawl) from its first attempt's start to its last attempt's end: a
    resumed or retried cycle keeps its row, so what it reports (``FrontierStore.cycle_counts``) is the whole
    cycle's. ``deferred`` is what it left due when it closed (the budget's, a parked host's)."""

    __tablename__ = "cycles"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    status: Mapped[str] = mapped_column(String(20))
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    deferred: Mapped[int | None] = mapped_column(Integer)
    counts: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """What ``cycle_counts`` read when the cycle finished (every host): they never change after, and reading them
    again from a million fetches took seconds on every ``harvester status``. None while it runs (migration 0010)."""


class Run(Base):
    """One phase run with its profile and counters (the source of artifacts and ``harvester status``), in the
    cycle that was open for its profile when it started (None: a phase run on its own)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    phase: Mapped[str] = mapped_column(String(20))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    status: Mapped[str] = mapped_column(String(20))
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    counters: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    owner: Mapped[str | None] = mapped_column(String(200))
    cycle_id: Mapped[int | None] = mapped_column(ForeignKey("cycles.id"))
    user_agent: Mapped[str | None] = mapped_column(Text)
    """The User-Agent every request of this run carried (one client per run): what the WARC's request records and
    warcinfo say was sent, whatever the exporting process is configured with. NULL for a run started before 0013,
    whose User-Agent nobody recorded."""


class Fetch(Base):
    """One completed URL (200, 304, 404, failure, or completed without a request: ``outcome`` ``unsent``): the
    WARC export and every count of a run or a cycle come from here."""

    __tablename__ = "fetches"

    id: Mapped[int] = mapped_column(Id, primary_key=True)
    url_id: Mapped[int] = mapped_column(ForeignKey("urls.id"), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id"), index=True)
    fetched_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    status: Mapped[int | None] = mapped_column(SmallInteger)
    outcome: Mapped[str] = mapped_column(String(16))
    bytes: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    error_class: Mapped[str | None] = mapped_column(String(30))
    page_id: Mapped[int | None] = mapped_column(ForeignKey("pages.id"), index=True)
    """The version this answer served: a new one, or the stored one it repeated byte for byte, or the URL's own
    stored version a 304 to a conditional request confirmed (NULL for a 304 logged before that was recorded: the
    export then takes the URL's newest version stored at or before it)."""
    change: Mapped[str | None] = mapped_column(String(10))
    """What this answer meant for the URL's stored versions (records.ChangeKind): ``new``, ``changed``,
    ``restyled``, ``same`` (a 200 repeating the stored payload), ``gone`` (404/410 after a stored version) or
    ``missing`` (404/410, never stored); NULL otherwise."""
    conditional: Mapped[bool | None] = mapped_column(Boolean)
    """Whether the request carried a validator (the one that got this answer: a redirect's last hop); NULL when no
    request left, and for a fetch logged before 0011 (the WARC export then takes the version before's)."""
    if_none_match: Mapped[str | None] = mapped_column(String(300))
    """The If-None-Match the request carried, as sent (not the URL's validators now, nor the stored version's)."""
    if_modified_since: Mapped[str | None] = mapped_column(String(100))
    """The If-Modified-Since the request carried, as sent."""
    etag: Mapped[str | None] = mapped_column(String(300))
    """The ETag the answer that served ``page_id`` carried (a 200 repeating a version may bring a new one); for a
    304, the one it left the URL with (its own, else the one kept: RFC 9111 §4.3.4). NULL without a version, or none
    sent. Where ``validators_logged``; else the version's is taken."""
    last_modified: Mapped[str | None] = mapped_column(String(100))
    """The Last-Modified the answer that served ``page_id`` carried, as ``etag``."""
    validators_logged: Mapped[bool | None] = mapped_column(Boolean)
    """True where ``etag`` / ``last_modified`` are as the answer carried them (rows written since migration 0023);
    NULL on a fetch logged before, whose answer is taken to have carried its version's (``pages.etag``,
    ``last_modified``): read so, never copied onto the log (that cost a rewrite of every row)."""


metadata = Base.metadata


def add_postgresql_predicates() -> None:
    """Give every partial index its WHERE for PostgreSQL too: the same predicate as SQLite's.

    Not at import: naming a ``postgresql_*`` argument makes SQLAlchemy load its whole PostgreSQL dialect to check
    it (~25 ms, every driver's module), which a CLI run on SQLite paid at start-up for nothing. Called where a
    PostgreSQL schema is made or compared (a PostgreSQL engine, ``migrations/env.py``); idempotent.
    """
    for table in metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options["sqlite"]["where"]
            if where is not None:
                index.dialect_options["postgresql"]["where"] = where
