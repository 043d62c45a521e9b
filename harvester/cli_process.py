"""The command line's process: how it loads the harvest stack and how it ends (the fixed cost of a CLI run).

A ``harvester harvest`` on a small site spent about as long starting and stopping as fetching: ~0.7 s importing
the fetch and storage stack (SQLAlchemy, aiohttp, lxml, ...), during which the cyclic garbage collector ran over
and over on objects that live as long as the process, and ~0.15 s after its last line tearing the interpreter
down (a collection over every module's objects, then the modules one by one) with nothing left to write.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import NoReturn


@contextmanager
def loading() -> Iterator[None]:
    """Imports inside run with the collector paused, and what they made is frozen out of later collections.

    Module objects live as long as the process: collecting over them while they are made is wasted (~20 % of
    the import time), and every full collection of the run would walk them again. Freezing keeps them out of
    those walks; they are never garbage, so nothing that could be freed is kept.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.freeze()


GIL_SWITCH_S = 0.0005
"""The interpreter's switch interval in the command's process (CPython's default: 5 ms). The event loop gives up
the GIL in every socket call and every wait for events; when the extraction thread or a store call's thread holds
it meanwhile, the loop waits until the holder is asked to drop it, one switch interval. Profiled on seed4
(``harvester harvest``, 4 hosts, 1,800 pages, load ~8): the loop's ``socket.send`` took 1.9 ms a call at 5 ms,
0.8 ms at 0.5 ms (3.4 s and 1.5 s of the run), and ``recv`` 0.30 and 0.12 ms; each of those waits delays an
answer's next request on the slow host (issue 31)."""


def favour_the_loop(switch_s: float = GIL_SWITCH_S) -> None:
    """Shorten the switch interval so the event loop gets the GIL back soon after each socket call (see
    ``GIL_SWITCH_S``). For the command's own process only: a library leaves its host program's interpreter alone."""
    sys.setswitchinterval(switch_s)


EXIT_CODES = {
    0: "the command did what it was asked (a harvest where some pages failed too: the counts name them)",
    1: "`harvester db check` found the frontier damaged (and did not repair it)",
    2: "bad input or a run that failed: an invalid setting, seed or option, no database, no seed host answering "
       "(NothingFetched), the extractor hook failing on every page (ExtractorFailed), any other harvester error",
    3: "every page request of a harvest, a re-crawl or an extraction failed (EveryRequestFailed): the site answered "
       "robots.txt or a sitemap but no page was answered with a 2xx, a 304, a 404/410 or a redirect",
    130: "stopped by SIGINT (Ctrl-C); the same command resumes",
    143: "stopped by SIGTERM; the same command resumes",
}
"""What each exit status of a command means (docs/operations.md shows this table; tests/test_cli_failed_urls.py
checks they agree)."""

EVERY_REQUEST_FAILED_EXIT = 3


def exit_code(error: BaseException) -> int:
    """The exit status of a command ended by ``error`` (a ``HarvesterError``): 3 when every page request failed,
    so a cron job or a wrapper tells a harvest that reached the site and got nothing from a bad invocation (2)."""
    from harvester.errors import EveryRequestFailed

    return EVERY_REQUEST_FAILED_EXIT if isinstance(error, EveryRequestFailed) else 2


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` without tearing the interpreter down, when nothing else is running.

    Everything a run writes is committed before the command returns (a kill at this point loses nothing), the
    stores are closed (SQLite has checkpointed its log), and the output is flushed here; exit handlers still
    run. A thread or child process still alive gets the ordinary exit, which waits for it. The extraction thread
    is ended first (a parse still running is waited for, as the ordinary exit would): idle, it outlived every run
    and sent every command through the interpreter's teardown (above) after its last answer (issue 31's tail).
    """
    children = sys.modules.get("multiprocessing")
    extraction = sys.modules.get("harvester.phases.extract_host")
    if extraction is not None:  # a call asked after this runs in its caller's thread (``HostTurns``)
        extraction.EXTRACTION.shutdown(wait=True)
    if threading.active_count() > 1 or (children is not None and children.active_children()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed or broken pipe: the ordinary exit could not write it either
            stream.flush()
    os._exit(code)


def settle_prefect() -> None:
    """On Prefect's temporary API, let the server record what the run sent before the process (and with it the
    server) stops: a stop in the middle of the task-run recorder's flush prints its traceback on our stderr."""
    if os.environ.get("PREFECT_API_URL"):
        return  # a started server outlives this process; nothing to wait for
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=10)
    EventsWorker.drain_all(timeout=10)
    flush_s = float(os.environ.get("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL", "1"))
    time.sleep(1.5 * flush_s)
