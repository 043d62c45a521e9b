"""A database server that goes away while a frontier is opened is unavailable, not a frontier without a schema.

Beside two busy loops, a harvest whose PostgreSQL stopped for 10 s ended with "database ... is at schema revision
none (empty), this harvester needs 0017: run `harvester db upgrade`": a store opened during the outage read its
revision as the server shut down, and the failed read was taken for a missing revision. Here the server ends the
connection (``pg_terminate_backend``, as a shutdown does) just before the revision is read.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from harvester.frontier import FrontierStore, migrate
from harvester.settings import Settings

pytestmark = pytest.mark.postgres


def test_a_connection_the_server_ended_is_no_missing_revision(pg_url: str) -> None:
    FrontierStore.open(Settings(database_url=pg_url), upgrade=True).close()
    engine = create_engine(pg_url, poolclass=NullPool)
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    try:
        with engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()  # control
            conn.rollback()
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            conn.rollback()

            def end_it_first(conn_: object, cursor: object, statement: str, *args: object) -> None:
                if "alembic_version" in statement and statement.lstrip().upper().startswith("SELECT VERSION_NUM"):
                    with psycopg.connect(dsn, autocommit=True) as other:  # as a server shutting down does
                        other.execute("SELECT pg_terminate_backend(%s)", (pid,))

            event.listen(engine, "before_cursor_execute", end_it_first)
            with pytest.raises(DBAPIError):
                migrate.current_revision(conn)
    finally:
        engine.dispose()
