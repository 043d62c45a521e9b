"""``harvester status`` shows moved URLs apart from live ones (``ix_urls_moved``), and missing ones apart from gone
ones (``ix_urls_missing``).

A URL whose last answer was a permanent redirect (301/308) stays ``done`` in the frontier (it is asked at its
revisit), but its page lives at the target's address: ``export`` says ``moved``, and ``status`` counted it done,
which the docs define as live. Partial on exactly those rows, so ``status`` counts them per host and kind from an
index of the few moved URLs, never a walk of the finished ones (``status`` stays a few ms at 1,000,000 URLs).

A URL that answered 404/410 and was never stored (a seed without a home page, a broken link) is ``missing`` in a
cycle's counts, not ``gone`` (a stored page that went away); ``status`` counted it gone. Such a URL holds no content
hash: ``ix_urls_missing`` holds exactly those, so ``status`` shows them as ``missing`` at the same cost.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = "state = 'done' AND last_status IN (301, 308)"
_MISSING = "state = 'gone' AND content_hash IS NULL"


def upgrade() -> None:
    op.create_index('ix_urls_moved', 'urls', ['host_id', 'kind', 'state', 'last_status'], unique=False,
                    sqlite_where=sa.text(_WHERE), postgresql_where=sa.text(_WHERE))
    op.create_index('ix_urls_missing', 'urls', ['host_id', 'kind', 'state', 'content_hash'], unique=False,
                    sqlite_where=sa.text(_MISSING), postgresql_where=sa.text(_MISSING))


def downgrade() -> None:
    op.drop_index('ix_urls_missing', table_name='urls')
    op.drop_index('ix_urls_moved', table_name='urls')
