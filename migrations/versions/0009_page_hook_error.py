"""A page the extractor hook failed on is stored like any other, with the hook's error on its version
(``pages.hook_error``: the exception's class and message), so the payload, validators and change label the site
served are kept and exported, and a fixed hook's next run repairs the version; ``ix_urls_hook_failed`` finds the
URLs each run asks again for that.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06

A nullable column: versions stored before it carry none (before 0009 a page the hook failed on was not stored).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN on both dialects: no table copy, however many pages are stored.
    op.add_column('pages', sa.Column('hook_error', sa.JSON(), nullable=True))
    # Before 0009 a page the hook failed on left its URL failed or queued, not done: such URLs are in this index
    # but never made due by it (``due_hook_retries`` takes done URLs); they come back when their retry is due.
    op.create_index('ix_urls_hook_failed', 'urls', ['host_id'], unique=False,
                    sqlite_where=sa.text("last_error_class = 'hook_failed'"),
                    postgresql_where=sa.text("last_error_class = 'hook_failed'"))


def downgrade() -> None:
    op.drop_index('ix_urls_hook_failed', table_name='urls')
    with op.batch_alter_table('pages') as batch:
        batch.drop_column('hook_error')
