"""Each robots.txt refusal with the document that named it (``robots_refusals.source_id``), and whether a
document's refusals were recorded (``documents.refusals_read``).

With one row per URL, a refused URL that no document names any more stayed counted for ever (only a robots.txt
that allowed it again dropped it), and refusals were held in memory (up to 100,000 a host) until the host's
discovery ended, so a kill -9 lost them until the documents were read again. Keyed by the naming document too,
a document read in full replaces its own refusals, written as they are found.

The rows kept from 0016 name no document: ``source_id`` 0, dropped for a host once each of its documents was read
in full since this upgrade. ``refusals_read`` is NULL for the documents read before it (0016 started empty and
filled only from documents read in full after it, so a re-crawl of 304s counted none): such a document is asked
once without its validators where robots.txt refuses anything, and its refusals recorded.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""


def upgrade() -> None:
    op.add_column('documents', sa.Column('refusals_read', sa.Boolean(), nullable=True))
    # A new key: the table is made anew under its own name (and its constraints' names, which PostgreSQL keeps
    # per schema for the primary key's index), the 0016 rows copied over.
    op.rename_table('robots_refusals', 'robots_refusals_0016')
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('ALTER TABLE robots_refusals_0016 RENAME CONSTRAINT pk_robots_refusals TO pk_robots_refusals_0016')
    _create(with_source=True)
    op.execute("INSERT INTO robots_refusals (host_id, path, source_id, judged, found_at)"
               " SELECT host_id, path, 0, judged, found_at FROM robots_refusals_0016")
    op.drop_table('robots_refusals_0016')


def _create(*, with_source: bool) -> None:
    op.create_table(
        'robots_refusals',
        sa.Column('host_id', ID, nullable=False),
        sa.Column('path', sa.String(length=2048), nullable=False),
        *([sa.Column('source_id', ID, nullable=False)] if with_source else []),
        sa.Column('judged', sa.String(length=2048), nullable=True),
        sa.Column('found_at', TS, nullable=False),
        sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_robots_refusals_host_id_hosts')),
        sa.PrimaryKeyConstraint('host_id', 'path', *(['source_id'] if with_source else []),
                                name=op.f('pk_robots_refusals')),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.rename_table('robots_refusals', 'robots_refusals_0018')
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('ALTER TABLE robots_refusals_0018 RENAME CONSTRAINT pk_robots_refusals TO pk_robots_refusals_0018')
    _create(with_source=False)
    op.execute("INSERT INTO robots_refusals (host_id, path, judged, found_at)"
               " SELECT host_id, path, MIN(judged), MIN(found_at) FROM robots_refusals_0018 GROUP BY host_id, path")
    op.drop_table('robots_refusals_0018')
    with op.batch_alter_table('documents') as batch:
        batch.drop_column('refusals_read')
