"""A flow run started by a Prefect runner or worker stops cleanly when that process dies or when it is told to stop
(SIGTERM: ``systemctl stop``, a rolling deploy, ``harvester serve`` or a worker shutting down).

``harvester serve`` and ``prefect worker start`` run each flow run as a child process. Killed (SIGKILL, OOM), the
parent can neither cancel its child nor report it, and the child went on fetching (1,302 pages in 8 s), stayed
"Running" in the UI, and a restarted parent's rerun then put a second extraction on the same database. Here the
child watches its parent, and under a worker the worker too (the worker's command, between them, outlives a
worker killed outright: watching it alone, the run crawled on to its end): when one is gone (a pidfd of it becomes
readable, ``harvester.flows.engine.LIFELINES``), it asks the crawl to stop (``harvester.runtime.request_stop``):
no new request is sent, answers in flight are written, leases go back, and the run ends ``Crashed``
(``Interrupted``), which ``harvester.flows.healing`` schedules again.

SIGTERM starts the same graceful stop. Prefect's own handler raised ``TerminationSignal`` at once in whatever was
running: the run crashed mid-answer (a page fetched twice by the rerun), and a worker that stopped with it killed
the process before the crash was reported, so the run stayed Running until the heartbeat automation marked it. Here
the run drains (the stop takes about one answer's time), then ends ``Crashed`` with the reason as its message. The
reason is written into the run's logs through the API before that final state is reported (``_say_in_the_runs_logs``):
Prefect's log batches came after the state, or never, and a run stopped at its first instant showed Crashed alone.

A cancellation from Prefect (the UI, ``prefect flow-run cancel``) is a SIGTERM too, after the worker's cancel intent:
it stops the crawl the same way, and the run ends ``Cancelled`` (``RunCancelled``; never retried). Prefect's own
cancel raised in whatever was running: answers in flight were thrown away (fetched again by the rerun), the
extraction's ``runs`` row stayed ``running``, and the worker's log took ~150 lines of ``CancelledError``.

Only under a runner (``PREFECT__FLOW_RUN_ID`` in the environment, set by Prefect for the child): a flow called
in-process, by ``harvester harvest`` in a shell, keeps running when that shell goes away (nohup).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import prefect.utilities.engine as engine_utils
from prefect import State, get_client, get_run_logger
from prefect._internal.control_listener import get_intent
from prefect.client.schemas.actions import LogCreate
from prefect.context import FlowRunContext
from prefect.states import Cancelled, Crashed

from harvester.errors import Interrupted
from harvester.flows.engine import LIFELINES, PARENT_PID, outlive_the_readers, told_before
from harvester.runtime import request_stop

POLL_S = 0.5
"""How often the parent is looked for where there are no pidfds (Linux before 5.3)."""

CANCELLED = "this run was cancelled from Prefect (the UI, the API or `prefect flow-run cancel`)"
"""The reason a cancellation gives: the stop message's start, and the Cancelled state's message."""

GRACE_S = 20.0
"""After the stop request, how long the run may take to drain (answers in flight) before it is cancelled."""

SAY_WITHIN_S = 15.0
"""How long the stop message may take to reach the run's logs (retried) before the run may report its final state
without it; less than ``GRACE_S``, so a run cancelled for not stopping has said why long before."""


def started_by_runner() -> bool:
    return bool(os.environ.get("PREFECT__FLOW_RUN_ID"))


class RunStopped(Interrupted):
    """The run stopped gracefully (``parent_lifeline``); its flow returns ``state`` (a flow's returned state is its
    final state) instead of raising. Raised, Prefect made the crash's message itself: "Execution was interrupted by
    an unexpected exception: Interrupted: the process that started this run (pid N) is gone", which read as a bug
    of the run, not as a worker stopped, and said nothing of the retry. Raised from the stop's ``Interrupted``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def state(self) -> State[Any]:
        return Crashed(message=self.message)  # retried by ``harvester.flows.healing``, as any crash


class RunCancelled(RunStopped):
    """The run stopped because it was cancelled from Prefect: ``Cancelled``, never retried. What the crawl kept
    (answers written, the runs row stopped) is as after a SIGTERM."""

    @property
    def state(self) -> State[Any]:
        return Cancelled(message=self.message)


def stopped_message(reason: str) -> str:
    """The final state's message of a run the lifeline stopped: why, what the stop kept, and what comes next."""
    return (f"Stopped: {reason}. No new request was sent, answers in flight were written and leases went back; "
            f"harvester's retry automation schedules the run again and the rerun resumes from the frontier")


@contextmanager
def _sigterm_stops(loop: asyncio.AbstractEventLoop, stop: Callable[[bool], None]) -> Iterator[None]:
    """For the body, SIGTERM calls ``stop`` on the loop instead of Prefect's handler, which raised
    ``TerminationSignal`` at once in whatever code ran; ``stop(True)`` for a cancellation (the worker's control
    intent ``cancel``, which it sends before its SIGTERM). Each subflow reinstalls Prefect's handler unless the one
    installed *is* Prefect's (``prefect.utilities.engine._prefect_sigterm_handler``, compared by identity), so ours
    holds that name for the body. Another intent the runner owns (a suspension) still goes to Prefect's handler."""
    prefects = getattr(engine_utils, "_prefect_sigterm_handler", None)

    def graceful(signum: int, frame: FrameType | None) -> None:
        intent = get_intent()
        if intent == "cancel" or intent is None or prefects is None:
            loop.call_soon_threadsafe(stop, intent == "cancel")
            return
        prefects(signum, frame)

    try:
        previous = signal.signal(signal.SIGTERM, graceful)
    except ValueError:  # not the main thread: Prefect's handling stays
        yield
        return
    if prefects is not None:
        setattr(engine_utils, "_prefect_sigterm_handler", graceful)  # noqa: B010 -- a private name, on purpose
    try:
        yield
    finally:
        if prefects is not None:
            setattr(engine_utils, "_prefect_sigterm_handler", prefects)  # noqa: B010
        if signal.getsignal(signal.SIGTERM) is graceful:
            signal.signal(signal.SIGTERM, previous)


async def _say_in_the_runs_logs(message: str) -> bool:
    """Write ``message`` into this run's logs through the API now, retried within ``SAY_WITHIN_S``; True once it is
    there. Prefect's log handler sends a batch every 2 s, after the fact, and drops one the server refused, while
    the run's final state is set directly: a run stopped at its first instant reached Crashed with its logs still
    empty (the message was queued, or its batch lost), and the UI showed a crash with no word of why."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return False
    log = LogCreate(name="prefect.flow_runs", level=logging.WARNING, message=message, timestamp=datetime.now(UTC),
                    flow_run_id=context.flow_run.id)
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + SAY_WITHIN_S, 0.25
    async with get_client() as client:
        while True:
            try:
                await client.create_logs([log])
            except Exception:  # the server busy (a 5xx) or away: asked again, within the bound
                if loop.time() + delay > deadline:
                    return False
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                return True


def _parent() -> int:
    """The process whose end stops this run: ``harvester.flows.engine``'s, named by it (it may have died before this
    line ran: the worker stopped as the run started, and ``os.getppid()`` named whoever inherited us, for ever),
    else the one that started us (``harvester serve``'s runner)."""
    with suppress(ValueError):
        return int(os.environ.get(PARENT_PID, ""))
    return os.getppid()


def _is_pidfd(fd: int) -> bool:
    """Whether ``fd`` is a pidfd: ``LIFELINES`` reaches a process of ours that did not inherit its fds too."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[pidfd]"
    except OSError:
        return False


def _gone(pid: int, who: str) -> str:
    if who == "worker":
        return f"the worker that started this run (pid {pid}) is gone"
    return f"the process that started this run (pid {pid}) is gone"


WORKER_STOPPING = ("its worker is stopping (a SIGTERM or SIGINT to it: `systemctl stop`, Ctrl-C, a deploy) and ended "
                   "the process that started this run (pid {pid})")
"""The reason when the worker's command ends while the worker is still there: what a worker told to stop does to
its runs' processes (Prefect 3.9 kills them). Before, the run said only that this process "is gone"."""


def _has_ended(fd: int) -> bool:
    """Whether the process of this pidfd has ended (readable), without waiting."""
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _lifelines() -> tuple[list[tuple[int, str, int, str]], str | None, bool]:
    """The pidfds whose process's end stops this run, each with the reason it gives; a reason already (one of them
    had ended before it could be watched); whether the fds were opened here (closed with the lifeline). Those
    ``harvester.flows.engine`` passed on (its worker's, its own), else the parent's. Empty, with no reason: no
    pidfds on this system (``POLL_S``)."""
    watched: list[tuple[int, str, int, str]] = []
    gone: str | None = None
    for entry in filter(None, os.environ.get(LIFELINES, "").split(",")):
        number, pid, who = entry.split(":", 2)
        if int(number) < 0:
            gone = gone or _gone(int(pid), who)
        elif _is_pidfd(int(number)):
            os.set_inheritable(int(number), False)
            watched.append((int(number), _gone(int(pid), who), int(pid), who))
    if watched or gone:
        return watched, gone, False
    parent = _parent()
    if os.getppid() != parent:  # the engine's command died before this line: we were re-parented
        return [], _gone(parent, "command"), False
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:
        return [], _gone(parent, "command"), False
    except OSError:
        return [], None, False
    if os.getppid() != parent:  # it ended as the fd was opened: the fd may name a stranger given its pid
        os.close(fd)
        return [], _gone(parent, "command"), False
    return [(fd, _gone(parent, "command"), parent, "command")], None, True


@asynccontextmanager
async def parent_lifeline() -> AsyncIterator[None]:
    """For the body: stop the crawl gracefully if the process that started this one dies or SIGTERM arrives."""
    if not started_by_runner():
        yield
        return
    parent = _parent()
    body = asyncio.current_task()
    loop = asyncio.get_running_loop()
    outlive_the_readers()  # the engine's first lines did it too; a runner's child (``harvester serve``) not
    told = asyncio.Event()
    said = asyncio.Event()
    reasons: list[str] = []
    cancelled: list[bool] = []

    def on_sigterm(cancel: bool) -> None:
        if not reasons:
            reasons.append(CANCELLED if cancel else
                           "this run's process was sent SIGTERM (its worker or `harvester serve` is stopping)")
            cancelled.append(cancel)
        told.set()

    def gone(reason: str) -> None:
        if not reasons:
            reasons.append(reason)
        told.set()

    async def watch_parent() -> None:
        # Polling: Linux's PR_SET_PDEATHSIG fires when the parent *thread* that forked us exits, not the process.
        while os.getppid() == parent:  # noqa: ASYNC110
            await asyncio.sleep(POLL_S)
        gone(_gone(parent, "command"))

    async def stop_when_told() -> None:
        await told.wait()
        reason = reasons[0]
        request_stop(reason)  # first: the stop waits for no API
        told_at = loop.time()
        message = (f"{reason}: stopping (no new request; answers in flight are written, leases go back); a rerun "
                   f"resumes from the frontier")
        written = False
        try:
            with suppress(TimeoutError):  # a server that hangs a request: bounded too
                written = await asyncio.wait_for(_say_in_the_runs_logs(message), SAY_WITHIN_S)
            # The console's copy; the run's logs got theirs above, or get it from Prefect's handler if that failed.
            get_run_logger().warning("%s", message, extra={"send_to_api": not written})
        finally:
            said.set()
        # A body that does not reach a request (waiting for the site's slot, publishing) is cancelled instead.
        await asyncio.sleep(GRACE_S - (loop.time() - told_at))
        if body is not None:
            body.cancel(f"{reason}, and the run did not stop within {GRACE_S:.0f} s")

    early = told_before()
    if early is not None and get_intent() == "cancel":
        on_sigterm(True)
    elif early is not None:
        reasons.append(f"this run's process was sent {signal.Signals(early).name} as it started (its worker or "
                       f"`harvester serve` is stopping)")
        told.set()
    watched, ended, opened = _lifelines()
    if ended is not None:
        gone(ended)
    workers = [fd for fd, _reason, _pid, who in watched if who == "worker"]

    def ended_now(fd: int, reason: str, pid: int, who: str) -> None:
        # A pidfd stays readable once its process has ended, and the loop's readers are level-triggered: left
        # registered, this ran on every turn of the loop (~140,000 times a second), spinning a core through the
        # drain the stop waits for.
        loop.remove_reader(fd)
        if who == "command" and workers and not any(_has_ended(worker) for worker in workers):
            reason = WORKER_STOPPING.format(pid=pid)  # the worker lives on and ended its command: it is stopping
        gone(reason)

    for fd, reason, pid, who in watched:  # readable once its process has ended
        loop.add_reader(fd, ended_now, fd, reason, pid, who)
    watchers = [asyncio.create_task(stop_when_told(), name="graceful stop")]
    if not watched and ended is None:  # no pidfds here
        watchers.append(asyncio.create_task(watch_parent(), name="parent lifeline"))
    try:
        with _sigterm_stops(loop, on_sigterm):
            yield
    except Interrupted as stopped:
        if cancelled == [True]:  # the run ends Cancelled, saying so; what the stop kept is as after a SIGTERM
            raise RunCancelled(f"{CANCELLED}: stopped (answers in flight written, leases back); a new run resumes "
                               f"from the frontier") from stopped
        if reasons:  # the lifeline's stop: the run ends Crashed with its reason, not Prefect's "unexpected exception"
            raise RunStopped(stopped_message(reasons[0])) from stopped
        raise
    finally:
        for fd, *_about in watched:
            loop.remove_reader(fd)
            if opened:
                os.close(fd)
        try:
            if told.is_set():  # the run reports its final state after this block: its logs say why first
                with suppress(TimeoutError):
                    await asyncio.wait_for(said.wait(), SAY_WITHIN_S + 1.0)
        finally:  # a second cancel in that wait must not leave the watchers running past the body
            for watcher in watchers:
                watcher.cancel()
