"""The command a process worker runs for each harvester run (the work-pool deployments' ``command`` job variable,
written by ``harvester deployments``): Prefect's engine, one process removed from the worker.

Prefect's process worker, stopped (SIGTERM: ``systemctl stop``, a rolling deploy), kills the process it started
(Prefect 3.9): nothing there could drain or report, so the run stayed Running until the heartbeat automation marked
it, a task run stayed Running for ever and a page was fetched twice by the rerun. Started from here, the engine lives
in its own session: when the worker kills this process, the engine sees it gone (``lifeline``), stops gracefully and
reports its final state; a SIGTERM or SIGINT given to this process (a cancellation from the UI, systemd) is passed on.
A worker killed outright (SIGKILL) leaves this process alive, so the engine watches the worker too (``LIFELINES``).

No signal is lost at a run's first instant. Before, this module was reached through ``harvester.flows``, which
imported Prefect: for its first 1-2 s this process died of a SIGTERM without a word and the run stayed Pending for
ever (a worker stopped just as it started a run). Now it imports nothing heavy and holds both signals from its first
line; the engine is born with them held (a signal mask survives exec), so one sent while it starts waits for its
first line (``_child``), which catches it; its flow's ``lifeline`` then stops the run at once, saying why. What
remains: this process's own interpreter start (tens of ms, before any line of ours can run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import suppress
from types import FrameType

MODULE = "harvester.flows.engine"
"""This module's name, also where it runs as ``__main__``."""

COMMAND = f"python -m {MODULE}"
"""The job variable's value: the worker's own Python (a process worker runs ``python`` from its environment)."""

PARENT_PID = "HARVESTER_ENGINE_PARENT"
"""The engine's environment: this process's pid (``lifeline``'s fallback when ``LIFELINES`` names nothing)."""

LIFELINES = "HARVESTER_ENGINE_LIFELINES"
"""The engine's environment: ``fd:pid:who`` entries, comma-separated, one per process whose end stops the run (its
worker, and this process): a pidfd the engine inherits, readable once that process has ended, which ``lifeline``
waits on. ``-1`` for the fd: that process had already ended when this one looked."""

_CHILD = "--engine"
_SIGNALS = {signal.SIGTERM, signal.SIGINT}
"""What the worker's process passes on to the engine."""

TOLD: list[int] = []
"""In the engine's process: the signals caught before the flow's ``lifeline`` took over (``told_before``)."""


def told_before() -> int | None:
    """The signal this run's process was sent before its flow began, if any (the engine's own first lines caught
    it: Prefect's default would have killed it before it could report)."""
    return TOLD[0] if TOLD else None


def main() -> int:
    """Run the engine in a session of its own and exit with its exit code (the worker reads the crash from it)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # held from here until the engine exists to take them
    engine: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: FrameType | None) -> None:
        if engine is not None:
            with suppress(ProcessLookupError):
                engine.send_signal(signum)  # held by the engine until its first line (``_child``) takes it

    for signum in _SIGNALS:
        signal.signal(signum, forward)
    # Born with both signals blocked (the mask survives fork and exec): a SIGTERM to the worker's group during the
    # fork, before the engine's new session, killed it before its first line.
    lifelines, fds = _lifelines()
    engine = subprocess.Popen(  # noqa: S603 -- our own interpreter and module, no shell
        [sys.executable, "-m", MODULE, _CHILD, *sys.argv[1:]], start_new_session=True, pass_fds=fds,
        env={**os.environ, PARENT_PID: str(os.getpid()), LIFELINES: lifelines},
    )
    for fd in fds:  # the engine holds its own copies
        os.close(fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    return engine.wait()


def _lifelines() -> tuple[str, list[int]]:
    """``LIFELINES``' value and the pidfds it names: of this process's parent (the worker) and of this process.

    The engine watched this process alone (``os.getppid()``), which a worker killed outright (SIGKILL, OOM) leaves
    alive, re-parented, waiting for the engine: the engine crawled on to the end of its run, and a cancellation
    from the UI then met no worker. A pidfd names one process, never a later one given the same pid, and is
    readable once it has ended: no polling, whatever lies between the worker and the engine."""
    entries, fds = [], []
    parent = os.getppid()
    for pid, who in ((parent, "worker"), (os.getpid(), "command")):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            entries.append(f"-1:{pid}:{who}")
            continue
        except OSError:  # no pidfds here (a kernel before 5.3): the engine watches its parent as before
            continue
        if who == "worker" and os.getppid() != parent:  # it ended before the fd was opened: the pid may be reused
            os.close(fd)
            entries.append(f"-1:{pid}:{who}")
            continue
        entries.append(f"{fd}:{pid}:{who}")
        fds.append(fd)
    return ",".join(entries), fds


def _child() -> None:
    """The engine's process, born with SIGTERM and SIGINT blocked (``main``): catch SIGTERM, then take both, then
    run Prefect's engine as ``python -m prefect.engine`` would. Prefect's flow engine and ``lifeline`` take SIGTERM
    over later; ``lifeline`` acts on one caught here. SIGINT keeps Python's handler (KeyboardInterrupt)."""
    import runpy

    def remember(signum: int, _frame: FrameType | None) -> None:
        TOLD.append(signum)

    signal.signal(signal.SIGTERM, remember)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    sys.modules.setdefault(MODULE, sys.modules[__name__])  # the TOLD ``lifeline`` reads is this one
    outlive_the_readers()  # after the signals: it imports rich (~70 ms), which Prefect imports anyway
    home = os.environ.get("HARVESTER_HOME", "").strip()
    if home and os.path.isdir(home):
        # The worker starts us in a temporary directory it deletes when it stops: Prefect's loading of the pull step
        # (``os.getcwd()``) then failed and the run stayed Pending. The pull step enters the same directory.
        os.chdir(home)
    sys.argv = ["prefect.engine", *sys.argv[2:]]
    try:
        runpy.run_module("prefect.engine", run_name="__main__", alter_sys=True)
    except SystemExit as ended:
        if ended.code not in (0, None):
            _report_unfinished(f"its process ended (exit {ended.code}) before the run reported a final state")
        raise
    except BaseException as ended:  # a CancelledError out of Prefect's loop thread ended it, unreported (ops48)
        _report_unfinished(f"its process ended ({type(ended).__name__}: {ended or 'no message'}) before the run "
                           f"reported a final state")
        raise


def outlive_the_readers() -> None:
    """Let this process outlive whoever reads its stdout and stderr: the worker (or ``harvester serve``'s runner)
    pipes them, and once it is gone the next console log line (Prefect's console handler is rich) met a broken
    pipe, on which rich raises ``SystemExit``. Raised in whatever was logging, it ended the process: in a flow, the
    event loop ended at once, before the stop could drain (the host workers cancelled mid-answer); before the flow
    began, in Prefect's loop thread as it ran the pull step ("Running 1 deployment pull step(s)"), which ended the
    engine with a ``CancelledError`` before it had proposed any state, and the run stayed Pending (Submitting) for
    ever (ops48: a worker killed with ``kill -9`` a few seconds after it started the run). Now a broken pipe sends
    both streams to /dev/null and the run goes on (its logs still reach the Prefect API): its flow begins, and its
    ``lifeline`` sees the worker gone and ends it Crashed, saying so, which the retry automation retries."""
    from rich.console import Console

    def on_broken_pipe(console: Console) -> None:
        console.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for fd in (1, 2):
                os.dup2(devnull, fd)
        finally:
            os.close(devnull)

    Console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign, assignment]


def _report_unfinished(message: str) -> None:
    """A run whose engine failed before its flow began (loading the flow, its pull step) was left Pending when its
    worker had stopped meanwhile: the worker reports such an exit, a stopped one never does. Crashed here, with the
    message, unless it already ended (the worker's report, if it comes, is then refused)."""
    from uuid import UUID

    from prefect import get_client
    from prefect.states import Crashed

    run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not run_id:
        return
    with suppress(Exception), get_client(sync_client=True) as client:
        state = client.read_flow_run(UUID(run_id)).state
        if state is None or not (state.is_final() or state.is_scheduled() or state.is_paused()):
            client.set_flow_run_state(UUID(run_id), Crashed(message=message))


if __name__ == "__main__":
    if sys.argv[1:2] == [_CHILD]:
        _child()
    else:
        sys.exit(main())
