"""The encoding a version's text was decoded with (``pages.encoding``): the same payload served under another charset
label (iso-8859-1 fixed to utf-8) is other text, a new version; it was kept as the old one's repeat (stranger47).

NULL on versions stored before: those are compared by their Content-Type instead (``rows.version_change``).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0024'
down_revision: str | None = '0023'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A nullable ADD COLUMN without a default on both dialects: no table copy, no row written.
    op.add_column('pages', sa.Column('encoding', sa.String(length=40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('pages') as batch:
        batch.drop_column('encoding')
