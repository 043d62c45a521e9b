"""The duplicates of a URL are found by an index, so a URL demoted to a duplicate (the site names another URL as
canonical) hands its own duplicates on to the new holder in the same transaction.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_urls_duplicate_of', 'urls', ['duplicate_of'], unique=False,
                    sqlite_where=sa.text('duplicate_of IS NOT NULL'),
                    postgresql_where=sa.text('duplicate_of IS NOT NULL'))


def downgrade() -> None:
    op.drop_index('ix_urls_duplicate_of', table_name='urls')
