"""The library's own log lines (a database being waited for, a host parked) in each run's logs in the UI, on any
worker: never only on the worker's stdout. Never changes what the library logs, only where it goes.
"""

from __future__ import annotations

import logging

LIBRARY_LOGGER = "harvester"


def send_library_lines_to_runs() -> None:
    """Give the library's logger the handlers Prefect gives ``PREFECT_LOGGING_EXTRA_LOGGERS`` (its API handler,
    which sends a line to the run it was logged in), whether or not the worker set that variable: before, a worker
    that did not (a pool deployment written by hand, ``harvester harvest`` against a server) showed a run Running
    in silence while its database was waited for 180 s. Idempotent: a handler already there is not added twice."""
    library = logging.getLogger(LIBRARY_LOGGER)
    for handler in logging.getLogger("prefect.extra").handlers:
        if handler not in library.handlers:
            library.addHandler(handler)
