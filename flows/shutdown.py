"""``harvester serve`` stopped with SIGTERM (``systemctl stop``, a rolling deploy) stops its runs gracefully first.

Prefect's runner, told to stop, cancelled its runs: each was cut mid-answer (a page fetched twice by the next run),
ended Cancelled and was never retried. Here SIGTERM starts no new run, passes SIGTERM on to each run's process
(``lifeline``: no new request, answers in flight written, leases back, the run Crashed with the reason, which
``harvester.flows.healing`` schedules again for when a runner is back), and stops the runner when they are gone (at most
``DRAIN_S``). A second SIGTERM stops the runner at once, Prefect's way.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from prefect.runner import Runner

from harvester.flows.lifeline import GRACE_S

DRAIN_S = GRACE_S + 5.0
"""Longest wait for the runs to end before the runner stops anyway (a run cancels itself after ``GRACE_S``)."""


def run_processes() -> list[int]:
    """This process's children that run a flow run (Prefect's engine, ``PREFECT__FLOW_RUN_ID`` set)."""
    pids = []
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            with suppress(OSError):
                if b"PREFECT__FLOW_RUN_ID=" in Path(f"/proc/{pid}/environ").read_bytes():
                    pids.append(int(pid))
    return pids


def drain_on_sigterm(runner: Runner) -> None:
    """Make the runner's SIGTERM handler (which ``Runner.start`` installs) drain its runs before it stops."""
    prefects = runner.handle_sigterm

    def handle_sigterm(*args: Any, **kwargs: Any) -> None:
        if runner.stopping:
            prefects(*args, **kwargs)
            return
        runner.stopping = True  # no run is started from now on
        poller = getattr(runner, "_scheduled_run_poller", None)
        if poller is not None:
            poller.stopping = True
        pids = run_processes()
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        threading.Thread(target=_stop_after, args=(runner, pids), name="drain runs", daemon=True).start()

    runner.handle_sigterm = handle_sigterm  # type: ignore[method-assign]


def _stop_after(runner: Runner, pids: list[int]) -> None:
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    runner.execute_in_background(runner.astop)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; the runner reaps it
