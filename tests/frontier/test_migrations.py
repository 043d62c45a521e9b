"""Schema path: models and migrations agree, auto-upgrade only for the embedded default, clear errors otherwise."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, create_engine, text

from harvester.errors import SchemaOutOfDate, StoreError
from harvester.frontier import FrontierStore, migrate
from harvester.frontier.models import metadata
from harvester.settings import DEFAULT_DATABASE_URL, Settings


def _diff(url: str, target: MetaData = metadata) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn)
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            return list(compare_metadata(context, target))
    finally:
        engine.dispose()


def test_autogenerate_finds_no_diff(db_url: str) -> None:
    assert _diff(db_url) == []
    if db_url.startswith("sqlite"):
        path = db_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            (ddl,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'queue'").fetchone()
        assert "WITHOUT ROWID" in ddl  # the queue is clustered on its key: a claim reads and deletes adjacent rows


def test_upgrade_from_0001_moves_queued_and_leased_urls_into_the_queue(db_url: str) -> None:
    """0002 keeps every URL claimable: queued ones enter the queue, leased ones go back to it (no worker runs
    during a migration), finished ones stay out."""
    engine = create_engine(db_url)
    t0 = "1735689600000000" if db_url.startswith("sqlite") else "'2025-01-01 00:00:00+00'"  # as each stores it
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0001")
            conn.exec_driver_sql("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits)"
                                 " VALUES (1, 'https://a.test', 0, 0, 0)")
            for url_id, state, score in ((1, "queued", 2.0), (2, "leased", 5.0), (3, "done", 9.0)):
                conn.exec_driver_sql(
                    "INSERT INTO urls (id, path, host_id, kind, state, score, first_seen, last_seen)"
                    f" VALUES ({url_id}, '/{url_id}', 1, 'detail', '{state}', {score}, {t0}, {t0})"
                )
        with engine.begin() as conn:
            migrate.upgrade(conn)
            queue = conn.exec_driver_sql("SELECT url_id, rank FROM queue ORDER BY host_id, kind, rank").all()
            states = dict(conn.exec_driver_sql("SELECT id, state FROM urls").all())
    finally:
        engine.dispose()
    assert [tuple(row) for row in queue] == [(2, -5.0), (1, -2.0)]
    assert states == {1: "queued", 2: "queued", 3: "done"}


def test_autogenerate_compare_can_fail(sqlite_url: str) -> None:
    """Control: a model change that the migration lacks is reported."""
    changed = MetaData()
    for table in metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["documents"].append_column(Column("extra_column_for_test", Integer))
    diff = _diff(sqlite_url, changed)
    assert any(entry[0] == "add_column" for entry in diff if isinstance(entry, tuple))


def test_embedded_default_sqlite_auto_upgrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FrontierStore.open(Settings(database_url=DEFAULT_DATABASE_URL)) as store:
        assert store.stats().total == 0
    assert (tmp_path / ".harvester" / "harvester.db").is_file()
    with FrontierStore.open(Settings(database_url=DEFAULT_DATABASE_URL), upgrade=False) as store:
        assert store.stats().total == 0


def test_a_new_empty_sqlite_file_is_set_up(sqlite_url: str) -> None:
    # Nothing in it to migrate with care: `harvester harvest --db sqlite:///new.db` just works.
    with FrontierStore.open(Settings(database_url=sqlite_url)) as store:
        assert store.stats().total == 0
    with FrontierStore.open(Settings(database_url=sqlite_url), upgrade=False) as store:  # now at head: opens
        assert store.stats().total == 0


def test_an_older_sqlite_file_is_not_upgraded_silently(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        migrate.upgrade(conn, "0001")
    engine.dispose()
    with pytest.raises(SchemaOutOfDate, match="harvester db upgrade"):
        FrontierStore.open(Settings(database_url=sqlite_url))
    with FrontierStore.open(Settings(database_url=sqlite_url), upgrade=True) as store:
        assert store.stats().total == 0
    with FrontierStore.open(Settings(database_url=sqlite_url)) as store:  # now at head: opens
        assert store.stats().total == 0


@pytest.mark.postgres
def test_empty_postgres_raises_schema_out_of_date_with_masked_url(pg_url: str) -> None:
    with_password = pg_url.replace("postgres@", "postgres:s3cret@")
    with pytest.raises(SchemaOutOfDate) as err:
        FrontierStore.open(Settings(database_url=with_password))
    message = str(err.value)
    assert "harvester db upgrade" in message
    assert "s3cret" not in message
    assert "***" in message
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        assert store.url_display == pg_url
    with FrontierStore.open(Settings(database_url=pg_url)) as store:
        assert store.stats().total == 0


def test_unsupported_dialect_is_named(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="mysql"):
        FrontierStore.open(Settings(database_url="mysql://u:p@127.0.0.1/x"))


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    """``head_revision`` reads the chain from the scripts' text so that opening a database imports no Alembic."""
    from harvester.frontier import migrate

    assert migrate.head_revision() == migrate._alembic_head()


def test_opening_an_up_to_date_database_imports_no_alembic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    db = f"sqlite:///{tmp_path / 'h.db'}"
    code = (
        "import sys\nfrom harvester.frontier import FrontierStore\nfrom harvester.settings import Settings\n"
        f"with FrontierStore.open(Settings.load(database_url={db!r})) as store:\n    store.stats()\n"
        "sys.exit('alembic' in sys.modules)"
    )
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings

    with FrontierStore.open(Settings.load(database_url=db), upgrade=True):
        pass
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_a_sqlite_run_never_loads_the_postgresql_dialect(tmp_path: Path) -> None:
    """Naming ``postgresql_where`` in the models loaded SQLAlchemy's whole PostgreSQL dialect at import (~25 ms of a
    CLI run's fixed cost, issue 22); the predicates are added where PostgreSQL is used."""
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'h.db'}"
    FrontierStore.open(Settings.load(database_url=url)).close()  # created and migrated (the scripts name both)
    code = (
        "import sys; from harvester.frontier import FrontierStore; from harvester.settings import Settings\n"
        f"FrontierStore.open(Settings.load(database_url={url!r})).close()\n"
        "import harvester.cli, harvester.cli_runs\n"
        "print(sorted(m for m in sys.modules if m.startswith(('sqlalchemy.dialects.postgresql', 'psycopg'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_a_postgresql_engine_gives_every_partial_index_its_predicate() -> None:
    from harvester.frontier.dialects import make_engine

    make_engine(Settings.load(database_url="postgresql://nobody@127.0.0.1:9/none")).dispose()  # connects to nothing
    partial = [index for table in metadata.tables.values() for index in table.indexes
               if index.dialect_options["sqlite"]["where"] is not None]
    assert len(partial) == 8
    for index in partial:
        assert index.dialect_options["postgresql"]["where"] is index.dialect_options["sqlite"]["where"]


def test_upgrade_to_0008_keeps_every_body_once_by_digest_and_labels_what_was_stored(db_url: str) -> None:
    """0008 moves each stored body into ``bodies`` under its sha256 (two pages with one payload share a row), labels
    a URL's first version new and later ones changed, and fetches with their page's label, 404/410 gone or missing;
    the pages read back byte for byte."""
    import zlib

    engine = create_engine(db_url)
    t0 = "1735689600000000" if db_url.startswith("sqlite") else "'2025-01-01 00:00:00+00'"
    same, other = zlib.compress(b"<p>same</p>"), zlib.compress(b"<p>other</p>")
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0007")
            conn.exec_driver_sql("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits)"
                                 " VALUES (1, 'https://a.test', 0, 0, 0)")
            for url_id in (1, 2, 3):
                conn.exec_driver_sql(
                    "INSERT INTO urls (id, path, host_id, kind, state, score, first_seen, last_seen)"
                    f" VALUES ({url_id}, '/{url_id}', 1, 'detail', 'done', 0, {t0}, {t0})")
            for page_id, url_id, body in ((1, 1, same), (2, 1, other), (3, 2, same)):
                conn.execute(text(
                    "INSERT INTO pages (id, url_id, fetched_at, status, final_url, content_hash, body, body_size)"
                    f" VALUES (:id, :url, {t0}, 200, 'https://a.test/', :hash, :body, 10)"),
                    {"id": page_id, "url": url_id, "hash": f"h{page_id}", "body": body})
            for fetch_id, url_id, status, page_id in ((1, 1, 200, 1), (2, 1, 200, 2), (3, 2, 410, None),
                                                       (4, 3, 404, None)):
                conn.execute(text(
                    "INSERT INTO fetches (id, url_id, fetched_at, status, outcome, bytes, page_id)"
                    f" VALUES (:id, :url, {t0}, :status, 'fetched', 0, :page)"),
                    {"id": fetch_id, "url": url_id, "status": status, "page": page_id})
        # As a user meets it: the store's own engine (foreign keys on, on SQLite) upgrades an existing frontier
        # whose fetches point at its pages; SQLite's table rebuilds must not trip over those keys.
        with FrontierStore.open(Settings(database_url=db_url), upgrade=True):
            pass
        with engine.begin() as conn:
            bodies = conn.exec_driver_sql("SELECT count(*) FROM bodies").scalar_one()
            pages = conn.exec_driver_sql("SELECT id, change FROM pages ORDER BY id").all()
            fetches = conn.exec_driver_sql("SELECT id, change FROM fetches ORDER BY id").all()
    finally:
        engine.dispose()
    assert bodies == 2
    assert [tuple(row) for row in pages] == [(1, "new"), (2, "changed"), (3, "new")]
    assert [tuple(row) for row in fetches] == [(1, "new"), (2, "changed"), (3, "gone"), (4, "missing")]
    with FrontierStore.open(Settings(database_url=db_url), upgrade=False) as store:
        read = [(page.page_id, page.body) for page in store.iter_pages()]
    assert read == [(1, b"<p>same</p>"), (2, b"<p>other</p>"), (3, b"<p>same</p>")]


def test_upgrade_to_0009_keeps_stored_versions_and_gives_them_no_hook_error(db_url: str) -> None:
    """0009 adds ``pages.hook_error``: a version stored before it keeps its fields and carries none (before 0009 a
    page the hook failed on was not stored at all); a version stored after it carries the hook's error."""
    engine = create_engine(db_url)
    t0 = "1735689600000000" if db_url.startswith("sqlite") else "'2025-01-01 00:00:00+00'"
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0008")
            conn.exec_driver_sql("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits)"
                                 " VALUES (1, 'https://a.test', 0, 0, 0)")
            conn.exec_driver_sql("INSERT INTO urls (id, path, host_id, kind, state, score, first_seen, last_seen)"
                                 f" VALUES (1, '/1', 1, 'detail', 'done', 0, {t0}, {t0})")
            conn.execute(text("INSERT INTO bodies (id, digest, size, body) VALUES (1, :digest, 9, :body)"),
                         {"digest": "d" * 64, "body": zlib.compress(b"<p>a</p>")})
            conn.execute(text(
                "INSERT INTO pages (id, url_id, fetched_at, status, final_url, content_hash, fields, body_id,"
                f" body_size, change) VALUES (1, 1, {t0}, 200, 'https://a.test/1', 'h', :fields, 1, 9, 'new')"),
                {"fields": '{"price": 3}'})
        with FrontierStore.open(Settings(database_url=db_url), upgrade=True):
            pass
        with engine.begin() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()
            conn.exec_driver_sql("INSERT INTO pages (id, url_id, fetched_at, status, final_url, content_hash,"
                                 f" hook_error, body_id, body_size, change) VALUES (2, 1, {t0}, 200,"
                                 " 'https://a.test/1', 'h2', '{\"class\": \"KeyError\", \"message\": \"x\"}', 1, 9,"
                                 " 'changed')")
    finally:
        engine.dispose()
    with FrontierStore.open(Settings(database_url=db_url), upgrade=False) as store:
        read = [(page.page_id, page.fields, page.hook_error) for page in store.iter_pages()]
    assert read == [(1, {"price": 3}, None), (2, {}, {"class": "KeyError", "message": "x"})]


def test_upgrade_to_0011_leaves_logged_fetches_without_request_validators(db_url: str) -> None:
    """0011 adds what each request carried to the fetch log: a fetch logged before it has none (``sent`` None, so
    the WARC export rebuilds the request's validators from the version before, as it did); one logged after it
    says what went out, an unconditional GET included ((None, None), not None)."""
    engine = create_engine(db_url)
    t0 = "1735689600000000" if db_url.startswith("sqlite") else "'2025-01-01 00:00:00+00'"
    try:
        with engine.begin() as conn:
            migrate.upgrade(conn, "0010")
            conn.exec_driver_sql("INSERT INTO hosts (id, origin, failures, lastmod_checks, lastmod_hits)"
                                 " VALUES (1, 'https://a.test', 0, 0, 0)")
            conn.exec_driver_sql("INSERT INTO urls (id, path, host_id, kind, state, score, first_seen, last_seen)"
                                 f" VALUES (1, '/1', 1, 'detail', 'done', 0, {t0}, {t0})")
            conn.exec_driver_sql(f"INSERT INTO fetches (id, url_id, fetched_at, status, outcome, bytes) VALUES"
                                 f" (1, 1, {t0}, 304, 'not_modified', 0)")
        with FrontierStore.open(Settings(database_url=db_url), upgrade=True):
            pass
        with engine.begin() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()
            conn.execute(text("INSERT INTO fetches (id, url_id, fetched_at, status, outcome, bytes, conditional,"
                              f" if_none_match) VALUES (2, 1, {t0}, 304, 'not_modified', 0, :yes, '\"e\"'),"
                              f" (3, 1, {t0}, 200, 'fetched', 9, :no, NULL)"), {"yes": True, "no": False})
    finally:
        engine.dispose()
    with FrontierStore.open(Settings(database_url=db_url), upgrade=False) as store:
        read = [(fetch.fetch_id, fetch.sent) for fetch in store.iter_fetches()]
    assert read == [(1, None), (2, ('"e"', None)), (3, (None, None))]
