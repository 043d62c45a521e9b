"""Claims move out of ``urls``: a clustered ``queue`` of claimable URLs and a small ``leases`` table.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03

A claim used to flip ``urls.state`` to 'leased' in place; the best URLs of a host sit on scattered pages, so a
claim of 1,000 URLs dirtied ~1,000 table pages and moved 1,000 ``ix_urls_claim`` entries (30-50 ms on SQLite).
Now QUEUED URLs nobody holds are rows of ``queue`` (per host and kind, best score first) and a claim moves
adjacent rows of it into ``leases``. ``ix_urls_claim`` and the per-URL lease columns go. No worker may run during
the upgrade: URLs leased at that moment go back to the queue, as an expired lease would.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""64-bit ids on PostgreSQL; INTEGER (the rowid where it is the primary key) on SQLite."""

TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('queue',
    sa.Column('host_id', ID, autoincrement=False, nullable=False),
    sa.Column('kind', sa.String(length=12), nullable=False),
    sa.Column('rank', sa.Float(), nullable=False),
    sa.Column('url_id', ID, autoincrement=False, nullable=False),
    sa.Column('due_at', TS, nullable=True),
    sa.PrimaryKeyConstraint('host_id', 'kind', 'rank', 'url_id', name=op.f('pk_queue')),
    sqlite_with_rowid=False
    )
    op.create_table('leases',
    sa.Column('url_id', ID, autoincrement=False, nullable=False),
    sa.Column('host_id', ID, autoincrement=False, nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('lease_until', TS, nullable=False),
    sa.PrimaryKeyConstraint('url_id', name=op.f('pk_leases'))
    )
    op.execute("UPDATE urls SET state = 'queued' WHERE state = 'leased'")
    op.execute(
        "INSERT INTO queue (host_id, kind, rank, url_id, due_at)"
        " SELECT host_id, kind, -score, id, next_fetch_at FROM urls WHERE state = 'queued'"
    )
    op.drop_index('ix_urls_claim', table_name='urls')
    # Plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35): neither column is indexed or constrained, and a batch
    # copy of ``urls`` would have to drop a table that others reference.
    op.drop_column('urls', 'lease_until')
    op.drop_column('urls', 'lease_owner')


def downgrade() -> None:
    op.add_column('urls', sa.Column('lease_owner', sa.String(length=200), nullable=True))
    op.add_column('urls', sa.Column('lease_until', TS, nullable=True))
    op.execute(
        "UPDATE urls SET state = 'leased',"
        " lease_owner = (SELECT owner FROM leases WHERE leases.url_id = urls.id),"
        " lease_until = (SELECT lease_until FROM leases WHERE leases.url_id = urls.id)"
        " WHERE id IN (SELECT url_id FROM leases)"
    )
    op.create_index('ix_urls_claim', 'urls', ['host_id', 'state', sa.literal_column('score DESC'), 'id'], unique=False)
    op.drop_table('leases')
    op.drop_table('queue')
