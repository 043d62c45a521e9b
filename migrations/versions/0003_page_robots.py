"""Pages record the robots directives that applied to us (``noindex``, ``nofollow``), from ``<meta>`` tags and
``X-Robots-Tag``, so a consumer of the export can tell which pages a site asked not to be indexed.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-04

A nullable column: pages stored before it have none (NULL: not recorded), which is not the same as none applying.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('pages', sa.Column('robots', sa.String(length=40), nullable=True))


def downgrade() -> None:
    op.drop_column('pages', 'robots')
