"""Which fetches logged the validators their answer carried (``fetches.validators_logged``): true on a row written
since, NULL on one logged before, whose answer is taken to have carried its version's (``pages.etag``,
``last_modified``), read so by the export rather than copied onto every row.

Migration 0021 copied them onto every fetch that served a version: on PostgreSQL, 87 s and a fetch log grown from
400 MB to 957 MB for 3 million fetches, in one transaction holding every row. 0021 no longer writes them; a store
that ran it before has them already (NULL here reads the version's, the same values), and the fetches it logged
between 0021 and this one are read as their version's too.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0023'
down_revision: str | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable ADD COLUMN without a default on both dialects: no table copy, no row written.
    op.add_column('fetches', sa.Column('validators_logged', sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('fetches') as batch:
        batch.drop_column('validators_logged')
