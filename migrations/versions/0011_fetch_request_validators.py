"""The fetch log keeps what each request carried (``fetches.conditional``, ``if_none_match``,
``if_modified_since``), so the WARC export writes each request record's validators as they went out.

Validators were kept per stored version only, and the export rebuilt each request's from the version before: a
request sent without them (the first after the extractor hook failed on a page) or with a new ETag the server gave
the same bytes was recorded with the wrong headers. The values ride on the fetch row the completion writes anyway:
no extra statement per page.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

Nullable columns: a fetch logged before 0011 has none (``conditional`` NULL), and the export rebuilds its request
record's validators from the version before, as it did.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMNs on both dialects: no table copy, however many fetches are logged.
    op.add_column('fetches', sa.Column('conditional', sa.Boolean(), nullable=True))
    op.add_column('fetches', sa.Column('if_none_match', sa.String(length=300), nullable=True))
    op.add_column('fetches', sa.Column('if_modified_since', sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('fetches') as batch:
        batch.drop_column('if_modified_since')
        batch.drop_column('if_none_match')
        batch.drop_column('conditional')
