"""The URL whose answer a host's robots.txt state holds (``hosts.robots_url``): robots.txt's redirect target.

Its validators were sent to ``/robots.txt`` and every hop on its origin, and never to the target that issued them
(another origin's ETag reached URLs that never set it, and the target answered in full every day). With the URL
kept, the validators go to that URL alone.

NULL for the states saved before it: whose validators those are is not known, so they are not sent; the next fetch
of each is unconditional and records its URL.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table copy.
    op.add_column('hosts', sa.Column('robots_url', sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('hosts') as batch:
        batch.drop_column('robots_url')
