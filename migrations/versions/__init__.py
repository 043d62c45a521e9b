"""Alembic revisions (Alembic reads them by path and skips this file; it makes the wheel ship them)."""
