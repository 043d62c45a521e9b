"""``harvester status`` counts queued URLs per host without walking the queue (issue 32): ``queue_counts``.

Kept by triggers on ``queue``, in the transaction that changes it, so it is as true as the queue itself under
concurrent workers and after a crash, whichever statement moves an entry (claims, admissions, releases, retries,
revisits): no code path can forget it. The sum of a host and kind's rows is its number of queue entries.

SQLite (writers serialized): one row per host and kind, moved by each entry a row trigger sees. PostgreSQL
(concurrent writers): a statement trigger appends each statement's net change per host and kind, so two workers
never wait on one counter row (nor deadlock over two); ``fold_queue_counts`` sums the rows from time to time.
Counting 900,000 queue entries took 76 ms per ``status`` at 1,000,000 URLs.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

SQLITE_TRIGGERS = (
    """CREATE TRIGGER queue_counted_in AFTER INSERT ON queue BEGIN
    INSERT INTO queue_counts (host_id, kind, n) SELECT NEW.host_id, NEW.kind, 0
        WHERE NOT EXISTS (SELECT 1 FROM queue_counts WHERE host_id = NEW.host_id AND kind = NEW.kind);
    UPDATE queue_counts SET n = n + 1 WHERE host_id = NEW.host_id AND kind = NEW.kind;
END""",
    """CREATE TRIGGER queue_counted_out AFTER DELETE ON queue BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE host_id = OLD.host_id AND kind = OLD.kind;
END""",
    """CREATE TRIGGER queue_counted_moved AFTER UPDATE OF host_id, kind ON queue BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE host_id = OLD.host_id AND kind = OLD.kind;
    INSERT INTO queue_counts (host_id, kind, n) SELECT NEW.host_id, NEW.kind, 0
        WHERE NOT EXISTS (SELECT 1 FROM queue_counts WHERE host_id = NEW.host_id AND kind = NEW.kind);
    UPDATE queue_counts SET n = n + 1 WHERE host_id = NEW.host_id AND kind = NEW.kind;
END""",
)

POSTGRES_FUNCTIONS = (
    """CREATE FUNCTION queue_counted_in() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, count(*) FROM new_rows GROUP BY host_id, kind;
    RETURN NULL;
END $$""",
    """CREATE FUNCTION queue_counted_out() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, -count(*) FROM old_rows GROUP BY host_id, kind;
    RETURN NULL;
END $$""",
    """CREATE FUNCTION queue_counted_moved() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, sum(n) FROM (
        SELECT host_id, kind, 1 AS n FROM new_rows UNION ALL SELECT host_id, kind, -1 FROM old_rows) m
    GROUP BY host_id, kind HAVING sum(n) <> 0;
    RETURN NULL;
END $$""",
)

POSTGRES_TRIGGERS = (
    "CREATE TRIGGER queue_counted_in AFTER INSERT ON queue REFERENCING NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION queue_counted_in()",
    "CREATE TRIGGER queue_counted_out AFTER DELETE ON queue REFERENCING OLD TABLE AS old_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION queue_counted_out()",
    # Every UPDATE (transition tables take no column list): a rank's update nets nothing and appends nothing.
    "CREATE TRIGGER queue_counted_moved AFTER UPDATE ON queue"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_counted_moved()",
)


def upgrade() -> None:
    op.create_table(
        'queue_counts',
        sa.Column('host_id', ID, nullable=False),
        sa.Column('kind', sa.String(length=12), nullable=False),
        sa.Column('n', sa.BigInteger(), nullable=False),
    )
    op.create_index('ix_queue_counts', 'queue_counts', ['host_id', 'kind'], unique=False)
    if op.get_bind().dialect.name == "sqlite":
        for statement in SQLITE_TRIGGERS:
            op.execute(statement)
    else:
        # A worker still running the old code during the upgrade may write the queue meanwhile: a row it commits
        # after the fill's snapshot but before the triggers exist was counted by neither, and the counts stayed
        # short by it for good. The lock waits for writers in flight (the fill then sees their rows) and holds
        # the next ones back until this transaction, triggers and fill together, commits.
        op.execute("LOCK TABLE queue IN SHARE ROW EXCLUSIVE MODE")
        for statement in (*POSTGRES_FUNCTIONS, *POSTGRES_TRIGGERS):
            op.execute(statement)
    # After the triggers, in their transaction (SQLite: one writer at a time, the whole upgrade its transaction).
    op.execute("INSERT INTO queue_counts (host_id, kind, n) SELECT host_id, kind, count(*) FROM queue"
               " GROUP BY host_id, kind")


def downgrade() -> None:
    for name in ('queue_counted_in', 'queue_counted_out', 'queue_counted_moved'):
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + ("" if op.get_bind().dialect.name == "sqlite" else " ON queue"))
        if op.get_bind().dialect.name != "sqlite":
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.drop_index('ix_queue_counts', table_name='queue_counts')
    op.drop_table('queue_counts')
