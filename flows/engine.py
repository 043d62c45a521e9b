"""The command a process worker runs for each harvester run (the work-pool deployments' ``command`` job variable,
written by ``harvester deployments``): Prefect's engine, one process removed from the worker.

Prefect's process worker, stopped (SIGTERM: ``systemctl stop``, a rolling deploy), kills the process it started
with SIGKILL at once (Prefect 3.9): nothing there could drain or report, so the run stayed Running until the
heartbeat automation marked it, a task run stayed Running for ever and a page was fetched twice by the rerun. Started
from here, the engine lives in its own session: when the worker kills this process, the engine sees its parent gone
(``lifeline``), stops gracefully and reports its final state; a SIGTERM or SIGINT given to this process (a
cancellation from the UI, systemd) is passed on to it. Imports nothing of Prefect's: it only starts the engine.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from contextlib import suppress
from types import FrameType

COMMAND = f"python -m {__name__}"
"""The job variable's value: the worker's own Python (a process worker runs ``python`` from its environment)."""


def main() -> int:
    """Run the engine in a session of its own and exit with its exit code (the worker reads the crash from it)."""
    engine = subprocess.Popen(  # noqa: S603 -- our own interpreter and Prefect's module, no shell
        [sys.executable, "-m", "prefect.engine", *sys.argv[1:]], start_new_session=True
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        with suppress(ProcessLookupError):
            engine.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    return engine.wait()


if __name__ == "__main__":
    sys.exit(main())
