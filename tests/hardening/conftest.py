"""Fixtures of the hardening tests: a PostgreSQL server of the test's own, for the tests that stop or restart it.

Never the shared server at 127.0.0.1:5432: restarting it closed every other test's connections (the kill test's
first connection among them, in 1 of 30 runs while another suite ran beside it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .private_pg import PrivatePostgres


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A started server of this test's own (initdb, a free loopback port), removed afterwards."""
    server = PrivatePostgres()
    server.start()
    try:
        yield server
    finally:
        server.close()
