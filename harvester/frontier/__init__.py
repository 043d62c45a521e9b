"""The durable frontier: ``FrontierStore`` over SQLite or PostgreSQL, schema in ``models``, SQL in ``store``.

Importing this package imports SQLAlchemy; modules outside the frontier take the records from
``harvester.records`` instead.
"""

from __future__ import annotations

from harvester.frontier.store import FrontierStore
from harvester.records import AddResult, CompleteResult, HostPolicy, StoredFetch, StoredPage, StoreStats

__all__ = ["AddResult", "CompleteResult", "FrontierStore", "HostPolicy", "StoreStats", "StoredFetch", "StoredPage"]
