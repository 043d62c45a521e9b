"""``harvester status --json``'s times, as a downstream reader parses them (stranger47): every one ISO 8601 with its
``T``, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import daily_cli
import pytest

from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

TIME_KEYS = ("_at", "_until")
"""The names of a time field in the status document (``started_at``, ``finished_at``, ``lease_until``...)."""


def times_in(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every field of the document named as a time, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key.endswith(TIME_KEYS):
                yield f"{where}.{key}", item
            yield from times_in(item, f"{where}.{key}")
    elif isinstance(value, list):
        for n, item in enumerate(value):
            yield from times_in(item, f"{where}[{n}]")


@pytest.fixture
def cli(db_url: str, clock: None) -> Callable[..., str]:
    return daily_cli.cli_on(db_url)


def test_every_time_of_status_json_is_iso_8601_with_a_t(cli: Callable[..., str]) -> None:
    """last_cycle.started_at and last_discover/last_extract.finished_at were ``str(datetime)``
    (``2026-12-11 07:00:01.77+00:00``, a space) where hosts' lease_until and blocked_until were ISO 8601 with a
    ``T``: a reader splitting on ``T`` or a strict parser read one of them wrong. A host answering 429 with a
    Retry-After has a blocked_until to show too."""
    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {"/a": None, "/b": None, "/busy": None})
        if request.path == "/busy":
            return 429, {"Retry-After": "7200", "Content-Type": "text/plain"}, b"later"
        return 200, {"Content-Type": "text/html; charset=utf-8"}, daily_cli.article(request.path)

    with threaded_site(answer) as origin:
        daily_cli.run_day(cli, 0, origin)
        status = json.loads(cli("status", "--json"))
    found = dict(times_in(status))
    named = {".last_cycle.started_at", ".last_discover.finished_at", ".last_extract.finished_at",
             f".hosts.{origin}.blocked_until"}
    assert named <= {path for path, value in found.items() if value is not None}, found
    for path, value in found.items():
        if value is None:
            continue
        assert isinstance(value, str) and "T" in value, (path, value)
        parsed = datetime.fromisoformat(value)
        assert parsed.tzinfo is not None, (path, value)
