"""A URL remembers the spelling to request when it differs from its key: the key sorts the query (two spellings,
one entry), but servers may read parameters in order and robots.txt rules are written against the URL as the
site publishes it. NULL (nearly every row) means "request the key itself".

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('urls') as batch:
        batch.add_column(sa.Column('fetch_path', sa.String(2048), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('urls') as batch:
        batch.drop_column('fetch_path')
