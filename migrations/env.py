"""Alembic environment: runs migrations on a caller's connection (``config.attributes["connection"]``).

Configured in code by ``harvester.frontier.migrate`` (no alembic.ini needed); ``render_as_batch`` on SQLite so
ALTERs become table copies there. Never builds Settings or reads the environment.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from harvester.frontier.models import add_postgresql_predicates, metadata

config = context.config
add_postgresql_predicates()  # what autogenerate compares and renders names PostgreSQL's partial indexes too


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        # Plain `alembic -x url=...` use, for developers; the harvester always passes a connection.
        url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
        if not url:
            raise RuntimeError("no connection: pass one via config.attributes['connection'] or -x url=...")
        engine = create_engine(url)
        with engine.connect() as conn:
            _run(conn)
        engine.dispose()
        return
    _run(connection)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # type: ignore[attr-defined]
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
