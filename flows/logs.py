"""The library's own log lines (a database being waited for, a host parked) in each run's logs in the UI, on any
worker: never only on the worker's stdout. Never changes what the library logs, only where it goes.
"""

from __future__ import annotations

import logging

from prefect.context import FlowRunContext, TaskRunContext

LIBRARY_LOGGER = "harvester"


class _InRunOnly(logging.Handler):
    """Prefect's API handler, for lines logged inside a flow or task run only. A line logged outside one (the CLI
    reading the frontier after its run, a test) has no run to go to: handed to the API handler it printed a
    UserWarning per line ("attempted to send logs to the API without a flow run id") on the user's terminal."""

    def __init__(self, target: logging.Handler) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if FlowRunContext.get() is not None or TaskRunContext.get() is not None:
            self.target.handle(record)


def send_library_lines_to_runs() -> None:
    """Give the library's logger the handlers Prefect gives ``PREFECT_LOGGING_EXTRA_LOGGERS`` (its API handler,
    which sends a line to the run it was logged in), whether or not the worker set that variable: before, a worker
    that did not (a pool deployment written by hand, ``harvester harvest`` against a server) showed a run Running
    in silence while its database was waited for 180 s. Idempotent: a handler already there is not added twice."""
    library = logging.getLogger(LIBRARY_LOGGER)
    present = {id(getattr(handler, "target", handler)) for handler in library.handlers}
    for handler in logging.getLogger("prefect.extra").handlers:
        if id(handler) not in present:
            library.addHandler(_InRunOnly(handler))
