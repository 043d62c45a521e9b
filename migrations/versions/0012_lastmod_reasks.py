"""A host's record of 304s that contradicted its lastmod (issue: a 304 believed against a newer lastmod).

``hosts.lastmod_reasks``: 304s to conditional requests whose URL's lastmod was newer than our copy, asked again
without validators; ``hosts.lastmod_reasks_changed``: how many of those full answers brought a changed page. A host
whose re-asks keep finding the page unchanged stamps its lastmods (today's date on every URL): its 304s are believed
again; one whose re-asks found changes keeps having its contradicting 304s asked again (``revisit.reask_304``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('hosts', sa.Column('lastmod_reasks', sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.add_column('hosts', sa.Column('lastmod_reasks_changed', sa.Integer(), server_default=sa.text('0'),
                                     nullable=False))


def downgrade() -> None:
    op.drop_column('hosts', 'lastmod_reasks_changed')
    op.drop_column('hosts', 'lastmod_reasks')
