"""Alembic migrations of the frontier schema; installed as ``harvester._migrations`` (see pyproject.toml)."""
