"""The end of the period a reduced-precision sitemap lastmod names (``urls.lastmod_until``; NULL for a moment).

``urls.lastmod`` is the period's start: "2026-12-09" stored as midnight. The skip rule of a host whose lastmods
proved truthful compared that start with our last fetch, so a page edited that day after our fetch read as
unchanged and was completed without a request (review47). It judges by this end now; NULL on rows stored before
(they are judged by their start, as then, until their sitemap is read again).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0025'
down_revision: str | None = '0024'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""


def upgrade() -> None:
    # A nullable ADD COLUMN without a default on both dialects: no table copy, no row written.
    op.add_column('urls', sa.Column('lastmod_until', TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('urls') as batch:
        batch.drop_column('lastmod_until')
