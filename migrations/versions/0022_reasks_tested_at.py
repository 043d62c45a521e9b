"""When a host's record of contradicting 304s was last tested (``hosts.reasks_tested_at``): a re-ask or the probe of
a host whose 304s are believed (``phases.reasks``). A run asks one such 304 again once; kept only in the process, a
kill -9 and the rerun resuming that run forgot it, and the rerun asked another page again in full. NULL for every
host at the upgrade: untested in any run still unfinished.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0022'
down_revision: str | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table copy.
    op.add_column('hosts', sa.Column('reasks_tested_at', TS, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('hosts') as batch:
        batch.drop_column('reasks_tested_at')
