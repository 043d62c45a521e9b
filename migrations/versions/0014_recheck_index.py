"""Failed URLs and duplicates due again found without walking every finished URL (``ix_urls_recheck``).

Neither state is final any more: a URL that failed every attempt of a run is asked again at a growing interval, a
duplicate at its revisit, and each extraction's start queues those whose time has come
(``FrontierStore.requeue_rechecks``). Partial on their two states, so the index holds the few such URLs and a
million-URL frontier pays nothing for the rest, where ``ix_urls_finished`` would walk every finished URL of a host.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHERE = "state IN ('failed', 'duplicate')"


def upgrade() -> None:
    op.create_index('ix_urls_recheck', 'urls', ['host_id', 'next_fetch_at'], unique=False,
                    sqlite_where=sa.text(_WHERE), postgresql_where=sa.text(_WHERE))


def downgrade() -> None:
    op.drop_index('ix_urls_recheck', table_name='urls')
