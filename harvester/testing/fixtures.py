"""pytest plugin (loaded by tests/conftest.py): ``test_web`` (one small site for the whole session, thread
mode) and ``make_web`` (a factory: a web started for one test and stopped after it).

The session web is shared: never ``advance_day`` on it (use ``make_web``), and filter or clear its records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import pytest

from harvester.runtime import clear_stop
from harvester.testing.sites import HostSpec, small_site
from harvester.testing.web import TestWeb

MakeWeb = Callable[..., TestWeb]


@pytest.fixture(scope="session")
def test_web() -> Iterator[TestWeb]:
    """Hosts ``a`` (robots Disallow), ``b`` (latency, crawl-delay, 3 sitemap children), ``c`` (traps, hostile
    routes, 429 above 8 in flight); see ``harvester.testing.sites.small_site``."""
    web = TestWeb(small_site(), seed=1, mode="thread").start()
    try:
        yield web
    finally:
        web.stop()


@pytest.fixture
def make_web() -> Iterator[MakeWeb]:
    """``make_web(specs, seed=1, mode="thread") -> TestWeb``, started now and stopped after the test."""
    started: list[TestWeb] = []

    def make(specs: Sequence[HostSpec], *, seed: int = 1, mode: Literal["thread", "process"] = "thread") -> TestWeb:
        web = TestWeb(specs, seed=seed, mode=mode).start()
        started.append(web)
        return web

    try:
        yield make
    finally:
        for web in started:
            web.stop()


@pytest.fixture
def stopped() -> Iterator[None]:
    """For a test that asks this process to stop (``runtime.request_stop``): the stop is cleared after it, so the
    next test's phases run."""
    yield
    clear_stop()
