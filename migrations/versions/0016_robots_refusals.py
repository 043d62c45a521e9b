"""The URLs robots.txt refuses, one row per URL and host (``robots_refusals``): the count ``harvester status`` showed
was the last discovery's refusals, each as often as a source named it, and none when its sitemaps answered 304.

Empty at upgrade: the next discovery that reads a document naming a refused URL fills it.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""


def upgrade() -> None:
    op.create_table(
        'robots_refusals',
        sa.Column('host_id', ID, nullable=False),
        sa.Column('path', sa.String(length=2048), nullable=False),
        sa.Column('judged', sa.String(length=2048), nullable=True),
        sa.Column('found_at', TS, nullable=False),
        sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_robots_refusals_host_id_hosts')),
        sa.PrimaryKeyConstraint('host_id', 'path', name=op.f('pk_robots_refusals')),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table('robots_refusals')
