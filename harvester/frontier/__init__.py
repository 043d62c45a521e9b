"""The durable frontier: ``FrontierStore`` over SQLite or PostgreSQL, the only package that speaks SQL.

One object per concern (its own module, its own state) over one ``base.Database``, behind the ``FrontierStore``
facade (see ``store``), typed records out, the schema in ``models`` (changed only by the Alembic migrations), the
discovery writer process in ``writer``. May use: ``records``, ``settings``, ``runtime``, ``errors`` and
``rules.urls``' version stamp. Must not: fetch, parse or import Prefect. Importing this package imports
SQLAlchemy; modules outside it take records from ``harvester.records``.
"""

from __future__ import annotations

from harvester.frontier.reports import UrlInfo
from harvester.frontier.store import FrontierStore
from harvester.records import HostPolicy
from harvester.store_results import AddResult, CompleteResult, StoredFetch, StoredPage, StoreStats

__all__ = [
    "AddResult", "CompleteResult", "FrontierStore", "HostPolicy", "StoreStats", "StoredFetch", "StoredPage", "UrlInfo",
]
