"""Never lose a version, and count a cycle as one: payloads stored once by digest, every version labelled, cycles.

- ``bodies``: each payload once (sha256 hex ``digest``, zlib bytes); ``pages.body`` moves there as ``body_id``, so
  a version is new when its payload is (not only when its main text is) and identical payloads cost one row.
- ``pages.change`` and ``fetches.change``: what a version / an answer meant (new, changed, restyled, same, gone,
  missing), written with it, so every count is read back instead of guessed from timestamps.
- ``cycles`` and ``runs.cycle_id``: a harvest or re-crawl from its first attempt to its last, so a resumed cycle
  reports the whole of it.

Existing data is carried over: each stored body gets its digest (duplicates folded into one row), a URL's first
page is labelled ``new`` and later ones ``changed`` (before 0008 a page was stored only when its main text
changed), and fetches take their page's label, 404/410 ``gone`` or ``missing``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.DateTime(timezone=True).with_variant(sa.BigInteger(), "sqlite")

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500
"""Pages moved per round trip: memory stays flat however many pages are stored."""


def upgrade() -> None:
    op.create_table('cycles',
    sa.Column('id', ID, nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('started_at', TS, nullable=False),
    sa.Column('finished_at', TS, nullable=True),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('profile', sa.JSON(), nullable=True),
    sa.Column('deferred', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cycles'))
    )
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('cycle_id', ID, nullable=True))
        batch.create_foreign_key(op.f('fk_runs_cycle_id_cycles'), 'cycles', ['cycle_id'], ['id'])
    op.create_table('bodies',
    sa.Column('id', ID, nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('body', sa.LargeBinary(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_bodies')),
    sa.UniqueConstraint('digest', name=op.f('uq_bodies_digest'))
    )
    with op.batch_alter_table('pages') as batch:
        batch.add_column(sa.Column('body_id', ID, nullable=True))
        batch.add_column(sa.Column('change', sa.String(length=10), nullable=True))
    _move_bodies()
    op.execute("UPDATE pages SET change = CASE WHEN id = (SELECT min(p.id) FROM pages p WHERE p.url_id = pages.url_id)"
               " THEN 'new' ELSE 'changed' END")
    with op.batch_alter_table('pages') as batch:
        batch.alter_column('body_id', existing_type=ID, nullable=False)
        batch.create_foreign_key(op.f('fk_pages_body_id_bodies'), 'bodies', ['body_id'], ['id'])
        batch.drop_column('body')
    with op.batch_alter_table('fetches') as batch:
        batch.add_column(sa.Column('change', sa.String(length=10), nullable=True))
    op.execute("UPDATE fetches SET change = (SELECT p.change FROM pages p WHERE p.id = fetches.page_id)"
               " WHERE page_id IS NOT NULL")
    op.execute("UPDATE fetches SET change = CASE WHEN EXISTS (SELECT 1 FROM pages p WHERE p.url_id = fetches.url_id)"
               " THEN 'gone' ELSE 'missing' END WHERE status IN (404, 410)")


def _move_bodies() -> None:
    """Each page's body into ``bodies`` under its digest (already compressed: the bytes move as they are). Which
    digests are stored is asked per batch of the database, not held: memory stays flat in the number of pages."""
    conn = op.get_bind()
    last = 0
    while True:
        rows = conn.execute(sa.text("SELECT id, body FROM pages WHERE id > :last ORDER BY id LIMIT :n"),
                            {"last": last, "n": BATCH}).all()
        if not rows:
            return
        digests = [(page_id, hashlib.sha256(zlib.decompress(stored)).hexdigest(), stored) for page_id, stored in rows]
        known = {str(d): int(i) for i, d in conn.execute(
            sa.select(sa.column("id"), sa.column("digest")).select_from(sa.table("bodies"))
            .where(sa.column("digest").in_(sorted({d for _, d, _ in digests}))))}
        for page_id, digest, stored in digests:
            body_id = known.get(digest)
            if body_id is None:
                body_id = int(conn.execute(
                    sa.text("INSERT INTO bodies (digest, size, body) VALUES (:d, :s, :b) RETURNING id"),
                    {"d": digest, "s": len(zlib.decompress(stored)), "b": bytes(stored)},
                ).scalar_one())
                known[digest] = body_id
            conn.execute(sa.text("UPDATE pages SET body_id = :b WHERE id = :p"), {"b": body_id, "p": page_id})
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table('fetches') as batch:
        batch.drop_column('change')
    with op.batch_alter_table('pages') as batch:
        batch.add_column(sa.Column('body', sa.LargeBinary(), nullable=True))
    op.execute("UPDATE pages SET body = (SELECT b.body FROM bodies b WHERE b.id = pages.body_id)")
    with op.batch_alter_table('pages') as batch:
        batch.alter_column('body', existing_type=sa.LargeBinary(), nullable=False)
        batch.drop_constraint(op.f('fk_pages_body_id_bodies'), type_='foreignkey')
        batch.drop_column('body_id')
        batch.drop_column('change')
    op.drop_table('bodies')
    with op.batch_alter_table('runs') as batch:
        batch.drop_constraint(op.f('fk_runs_cycle_id_cycles'), type_='foreignkey')
        batch.drop_column('cycle_id')
    op.drop_table('cycles')
