"""The fetch log keeps the validators each stored answer carried (``fetches.etag``, ``last_modified``), so a 200
that repeated a stored version byte for byte with a new ETag or Last-Modified is archived with them.

Validators were kept per stored version only: the WARC export's identical-payload revisit of such an answer carried
the earlier version's headers, and JSONL's ``etag`` / ``last_modified`` kept the old values while the site served
new ones (the stranger's trial, stop 46). ``ix_fetches_page_id`` finds a version's latest answer for the export.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07

A fetch logged before 0021 that served a version takes that version's validators (the best the store knew): read so
(``fetches.validators_logged`` NULL, migration 0023), not written here. Written, a backfill rewrote every fetch that
served a version in one transaction: 87 s and a table grown from 400 MB to 957 MB for 3 million fetches on
PostgreSQL, the log locked meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0021'
down_revision: str | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both dialects: no table copy.
    op.add_column('fetches', sa.Column('etag', sa.String(length=300), nullable=True))
    op.add_column('fetches', sa.Column('last_modified', sa.String(length=100), nullable=True))
    op.create_index('ix_fetches_page_id', 'fetches', ['page_id'])


def downgrade() -> None:
    op.drop_index('ix_fetches_page_id', table_name='fetches')
    with op.batch_alter_table('fetches') as batch:
        batch.drop_column('last_modified')
        batch.drop_column('etag')
