"""Initial schema: hosts, sources, urls (+ url_sources), documents, pages, runs, fetches.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Hand-checked against harvester/frontier/models.py; tests/frontier/test_migrations.py proves autogenerate finds
no difference on SQLite and PostgreSQL. Self-contained: the column types are spelled out here, not imported.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""64-bit ids on PostgreSQL; INTEGER PRIMARY KEY (the rowid) on SQLite."""

TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")
"""timestamptz on PostgreSQL; integer microseconds since the epoch on SQLite (models.UtcDateTime)."""

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('documents',
    sa.Column('id', ID, nullable=False),
    sa.Column('url', sa.String(length=2048), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=True),
    sa.Column('etag', sa.String(length=300), nullable=True),
    sa.Column('last_modified', sa.String(length=100), nullable=True),
    sa.Column('content_hash', sa.String(length=128), nullable=True),
    sa.Column('fetched_at', TS, nullable=True),
    sa.Column('next_fetch_at', TS, nullable=True),
    sa.Column('url_count', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('error', sa.String(length=500), nullable=True),
    sa.Column('children', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_documents')),
    sa.UniqueConstraint('url', name=op.f('uq_documents_url'))
    )
    op.create_table('hosts',
    sa.Column('id', ID, nullable=False),
    sa.Column('origin', sa.String(length=300), nullable=False),
    sa.Column('robots_status', sa.SmallInteger(), nullable=True),
    sa.Column('robots_body', sa.Text(), nullable=True),
    sa.Column('robots_etag', sa.String(length=300), nullable=True),
    sa.Column('robots_last_modified', sa.String(length=100), nullable=True),
    sa.Column('robots_fetched_at', TS, nullable=True),
    sa.Column('robots_expires_at', TS, nullable=True),
    sa.Column('robots_error', sa.String(length=40), nullable=True),
    sa.Column('crawl_delay_s', sa.Float(), nullable=True),
    sa.Column('request_rate_s', sa.Float(), nullable=True),
    sa.Column('concurrency_limit', sa.SmallInteger(), nullable=True),
    sa.Column('next_allowed_at', TS, nullable=True),
    sa.Column('blocked_until', TS, nullable=True),
    sa.Column('parked_reason', sa.String(length=200), nullable=True),
    sa.Column('failures', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('lease_owner', sa.String(length=200), nullable=True),
    sa.Column('lease_until', TS, nullable=True),
    sa.Column('lastmod_checks', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('lastmod_hits', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('counters', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_hosts')),
    sa.UniqueConstraint('origin', name=op.f('uq_hosts_origin'))
    )
    op.create_table('runs',
    sa.Column('id', ID, nullable=False),
    sa.Column('phase', sa.String(length=20), nullable=False),
    sa.Column('started_at', TS, nullable=False),
    sa.Column('finished_at', TS, nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('profile', sa.JSON(), nullable=True),
    sa.Column('counters', sa.JSON(), nullable=True),
    sa.Column('owner', sa.String(length=200), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_runs'))
    )
    op.create_table('sources',
    sa.Column('id', ID, nullable=False),
    sa.Column('label', sa.String(length=2100), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sources')),
    sa.UniqueConstraint('label', name=op.f('uq_sources_label'))
    )
    op.create_table('urls',
    sa.Column('id', ID, nullable=False),
    sa.Column('path', sa.String(length=2048), nullable=False),
    sa.Column('canonical_version', sa.SmallInteger(), server_default=sa.text('1'), nullable=False),
    sa.Column('host_id', ID, nullable=False),
    sa.Column('source_id', ID, nullable=True),
    sa.Column('kind', sa.String(length=12), nullable=False),
    sa.Column('state', sa.String(length=12), nullable=False),
    sa.Column('score', sa.Float(), server_default=sa.text('0'), nullable=False),
    sa.Column('depth', sa.SmallInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('first_seen', TS, nullable=False),
    sa.Column('last_seen', TS, nullable=False),
    sa.Column('lastmod', TS, nullable=True),
    sa.Column('changefreq', sa.String(length=10), nullable=True),
    sa.Column('priority', sa.Float(), nullable=True),
    sa.Column('next_fetch_at', TS, nullable=True),
    sa.Column('revisit_s', sa.Float(), nullable=True),
    sa.Column('attempts', sa.SmallInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('last_error_class', sa.String(length=30), nullable=True),
    sa.Column('last_error', sa.String(length=500), nullable=True),
    sa.Column('etag', sa.String(length=300), nullable=True),
    sa.Column('last_modified', sa.String(length=100), nullable=True),
    sa.Column('content_hash', sa.String(length=128), nullable=True),
    sa.Column('last_status', sa.SmallInteger(), nullable=True),
    sa.Column('last_fetched_at', TS, nullable=True),
    sa.Column('changed_at', TS, nullable=True),
    sa.Column('gone_at', TS, nullable=True),
    sa.Column('final_url', sa.String(length=2048), nullable=True),
    sa.Column('duplicate_of', ID, nullable=True),
    sa.Column('lease_owner', sa.String(length=200), nullable=True),
    sa.Column('lease_until', TS, nullable=True),
    sa.ForeignKeyConstraint(['duplicate_of'], ['urls.id'], name=op.f('fk_urls_duplicate_of_urls')),
    sa.ForeignKeyConstraint(['host_id'], ['hosts.id'], name=op.f('fk_urls_host_id_hosts')),
    sa.ForeignKeyConstraint(['source_id'], ['sources.id'], name=op.f('fk_urls_source_id_sources')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_urls')),
    sa.UniqueConstraint('host_id', 'path', name=op.f('uq_urls_host_id_path'))
    )
    op.create_index('ix_urls_claim', 'urls', ['host_id', 'state', sa.literal_column('score DESC'), 'id'], unique=False)
    op.create_index('ix_urls_content_hash', 'urls', ['content_hash'], unique=False, sqlite_where=sa.text('content_hash IS NOT NULL'), postgresql_where=sa.text('content_hash IS NOT NULL'))
    op.create_index('ix_urls_revisit', 'urls', ['host_id', 'next_fetch_at'], unique=False, sqlite_where=sa.text("state = 'done'"), postgresql_where=sa.text("state = 'done'"))
    op.create_table('pages',
    sa.Column('id', ID, nullable=False),
    sa.Column('url_id', ID, nullable=False),
    sa.Column('fetched_at', TS, nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=False),
    sa.Column('final_url', sa.String(length=2048), nullable=False),
    sa.Column('content_type', sa.String(length=200), nullable=True),
    sa.Column('etag', sa.String(length=300), nullable=True),
    sa.Column('last_modified', sa.String(length=100), nullable=True),
    sa.Column('content_hash', sa.String(length=128), nullable=False),
    sa.Column('canonical_url', sa.String(length=2048), nullable=True),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('language', sa.String(length=40), nullable=True),
    sa.Column('jsonld', sa.JSON(), nullable=True),
    sa.Column('fields', sa.JSON(), nullable=True),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.Column('body_size', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['url_id'], ['urls.id'], name=op.f('fk_pages_url_id_urls')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_pages'))
    )
    op.create_index(op.f('ix_pages_fetched_at'), 'pages', ['fetched_at'], unique=False)
    op.create_index(op.f('ix_pages_url_id'), 'pages', ['url_id'], unique=False)
    op.create_table('url_sources',
    sa.Column('url_id', ID, nullable=False),
    sa.Column('source_id', ID, nullable=False),
    sa.ForeignKeyConstraint(['source_id'], ['sources.id'], name=op.f('fk_url_sources_source_id_sources')),
    sa.ForeignKeyConstraint(['url_id'], ['urls.id'], name=op.f('fk_url_sources_url_id_urls')),
    sa.PrimaryKeyConstraint('url_id', 'source_id', name=op.f('pk_url_sources')),
    sqlite_with_rowid=False
    )
    op.create_table('fetches',
    sa.Column('id', ID, nullable=False),
    sa.Column('url_id', ID, nullable=False),
    sa.Column('run_id', ID, nullable=True),
    sa.Column('fetched_at', TS, nullable=False),
    sa.Column('status', sa.SmallInteger(), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('bytes', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('error_class', sa.String(length=30), nullable=True),
    sa.Column('page_id', ID, nullable=True),
    sa.ForeignKeyConstraint(['page_id'], ['pages.id'], name=op.f('fk_fetches_page_id_pages')),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], name=op.f('fk_fetches_run_id_runs')),
    sa.ForeignKeyConstraint(['url_id'], ['urls.id'], name=op.f('fk_fetches_url_id_urls')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_fetches'))
    )
    op.create_index(op.f('ix_fetches_fetched_at'), 'fetches', ['fetched_at'], unique=False)
    op.create_index(op.f('ix_fetches_run_id'), 'fetches', ['run_id'], unique=False)
    op.create_index(op.f('ix_fetches_url_id'), 'fetches', ['url_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_fetches_url_id'), table_name='fetches')
    op.drop_index(op.f('ix_fetches_run_id'), table_name='fetches')
    op.drop_index(op.f('ix_fetches_fetched_at'), table_name='fetches')
    op.drop_table('fetches')
    op.drop_table('url_sources')
    op.drop_index(op.f('ix_pages_url_id'), table_name='pages')
    op.drop_index(op.f('ix_pages_fetched_at'), table_name='pages')
    op.drop_table('pages')
    op.drop_index('ix_urls_revisit', table_name='urls', sqlite_where=sa.text("state = 'done'"), postgresql_where=sa.text("state = 'done'"))
    op.drop_index('ix_urls_content_hash', table_name='urls', sqlite_where=sa.text('content_hash IS NOT NULL'), postgresql_where=sa.text('content_hash IS NOT NULL'))
    op.drop_index('ix_urls_claim', table_name='urls')
    op.drop_table('urls')
    op.drop_table('sources')
    op.drop_table('runs')
    op.drop_table('hosts')
    op.drop_table('documents')
