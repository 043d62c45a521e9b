"""A discovery document remembers when it was last read in full (a 200 parsed), apart from when it was last
asked (a 304 too): the URLs it named then and does not name now are the ones that vanished from it, and are
re-checked in the run that sees it (``FrontierStore.save_document``'s ``vanished``).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('documents') as batch:
        batch.add_column(sa.Column('read_at', TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('documents') as batch:
        batch.drop_column('read_at')
