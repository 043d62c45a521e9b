"""The User-Agent a run sent (``runs.user_agent``): the WARC export wrote the exporting process's configured one
into every request record and the warcinfo, whatever the harvest had sent.

NULL for the runs before it: their requests' User-Agent was not recorded, and the export says so rather than
guessing.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table copy.
    op.add_column('runs', sa.Column('user_agent', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('user_agent')
