"""A user extractor hook for the tests: keeps the title's length, and raises on one chosen page."""

from __future__ import annotations

from typing import Any

EXPLODE_ON: set[str] = set()


def title_length(page: Any) -> dict[str, Any]:
    if page.url in EXPLODE_ON:
        raise RuntimeError("this hook fails on purpose")
    return {"title_length": len(page.title or "")}
