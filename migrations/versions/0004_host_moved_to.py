"""A seed host that redirects its homepage to another origin records where it moved (``hosts.moved_to``), so that
origin is in the crawl's scope in every later phase and run.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('hosts', sa.Column('moved_to', sa.String(length=300), nullable=True))


def downgrade() -> None:
    op.drop_column('hosts', 'moved_to')
