"""A user extractor hook for the tests: keeps the title's length, and raises on one chosen page."""

from __future__ import annotations

from typing import Any

EXPLODE_ON: set[str] = set()


def title_length(page: Any) -> dict[str, Any]:
    if page.url in EXPLODE_ON:
        raise RuntimeError("this hook fails on purpose")
    return {"title_length": len(page.title or "")}


NEXT_REQUEST_SENT: Any = None
"""Set by a test: ``(n) -> bool``, whether the host has been asked its n-th detail page yet."""
NEXT_SENT_FIRST: list[bool] = []


def waits_for_next_request(page: Any) -> dict[str, Any]:
    """A deliberately slow hook: it returns only once the server has been asked the host's next detail page (or
    after a bound, noting that it was not). Called n times, it waits for request n + 1."""
    import time

    n = len(NEXT_SENT_FIRST) + 1
    seen = False
    for _ in range(300):  # a bound for a design that cannot send it meanwhile, not a measure
        if NEXT_REQUEST_SENT(n + 1):
            seen = True
            break
        time.sleep(0.01)
    NEXT_SENT_FIRST.append(seen)
    return {}
