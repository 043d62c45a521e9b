"""A flow run started by a Prefect runner or worker stops when that process dies.

``harvester serve`` and ``prefect worker start`` run each flow run as a child process. Killed (SIGKILL, OOM), the
parent can neither cancel its child nor report it, and the child went on fetching (1,302 pages in 8 s), stayed
"Running" in the UI, and a restarted parent's rerun then put a second extraction on the same database. Here the
child watches its parent: when it is gone (the child is re-parented, so ``os.getppid()`` changes), it asks the
crawl to stop (``harvester.runtime.request_stop``): no new request is sent, answers in flight are written, leases
go back, and the run ends ``Crashed`` (``Interrupted``), which ``flows.healing`` schedules again.

Only under a runner (``PREFECT__FLOW_RUN_ID`` in the environment, set by Prefect for the child): a flow called
in-process, by ``harvester harvest`` in a shell, keeps running when that shell goes away (nohup).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rich.console import Console

from harvester.runtime import request_stop

POLL_S = 0.5
"""How often the parent is looked for: a dead parent's child sends its last request within about this."""

GRACE_S = 20.0
"""After the stop request, how long the run may take to drain (answers in flight) before it is cancelled."""

logger = logging.getLogger(__name__)


def started_by_runner() -> bool:
    return bool(os.environ.get("PREFECT__FLOW_RUN_ID"))


def _outlive_the_readers() -> None:
    """Let this process outlive whoever reads its stdout and stderr: the runner pipes them, and when the runner
    dies the next console log line (Prefect's console handler is rich) met a broken pipe, on which rich raises
    ``SystemExit``. Raised in whatever task was logging, it ended the event loop at once, before the stop could
    drain: the host workers were cancelled mid-answer and their pages fetched again by the rerun. Now a broken
    pipe sends both streams to /dev/null and the run goes on (its logs still reach the Prefect API)."""

    def on_broken_pipe(console: Console) -> None:
        console.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in (1, 2):
                os.dup2(devnull, fd)
        finally:
            os.close(devnull)

    Console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign, assignment]


@asynccontextmanager
async def parent_lifeline() -> AsyncIterator[None]:
    """For the body: stop the crawl if the process that started this one dies."""
    if not started_by_runner():
        yield
        return
    parent = os.getppid()
    body = asyncio.current_task()
    _outlive_the_readers()

    async def watch() -> None:
        # Polling: Linux's PR_SET_PDEATHSIG fires when the parent *thread* that forked us exits, not the process.
        while os.getppid() == parent:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)
        reason = f"the process that started this run (pid {parent}) is gone"
        logger.error("%s: stopping; a rerun resumes from the frontier", reason)
        request_stop(reason)
        # A body that does not reach a request (waiting for the site's slot, publishing) is cancelled instead.
        await asyncio.sleep(GRACE_S)
        if body is not None:
            body.cancel(f"{reason}, and the run did not stop within {GRACE_S:.0f} s")

    watcher = asyncio.create_task(watch(), name="parent lifeline")
    try:
        yield
    finally:
        watcher.cancel()
