"""The robots.txt rules a host's stored URLs were last judged by (``hosts.robots_judged``, a fingerprint).

A URL refused by robots.txt stayed ``disallowed`` for good after robots.txt allowed it again (never asked, out of
the snapshot), and pages harvested before robots.txt refused them stayed ``done`` in the snapshot until they fell
due. When the rules a host's discovery reads differ from the ones recorded here, that host's URLs are judged again
(``FrontierStore.rejudge_urls``). NULL for every host at the upgrade: each host's URLs are judged once, at its
next discovery.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table copy.
    op.add_column('hosts', sa.Column('robots_judged', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('hosts') as batch:
        batch.drop_column('robots_judged')
