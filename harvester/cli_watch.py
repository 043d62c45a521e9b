"""What a command prints while a run goes on, on a terminal or not, and what a signal does to the run.

``run_with_progress`` runs a command's flow (or the library's cycle) under rich's live bar, read from the frontier.
Under cron, systemd or ``| tee`` rich's live bar is not drawn (its last state is printed once, at the end), so a
run that is killed left an empty log. ``ProgressLines`` prints a plain, flushed line every few seconds instead,
after Scrapy's periodic "Crawled N pages (at X pages/min)" line: what each phase has done, and at what rate.

``graceful_signals`` turns the first SIGINT or SIGTERM into the library's graceful stop (``runtime.request_stop``:
no new request, answers in flight written, leases given back) and says so; a second one ends the process at
once, and says that too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from harvester.cli_db import say_err
from harvester.cli_process import settle_prefect
from harvester.cli_tables import console, print_status
from harvester.errors import Interrupted
from harvester.runtime import answered, db, request_stop, stop_requested, utcnow
from harvester.settings import Settings

PROGRESS_LINE_S = 5.0
"""Seconds between two progress lines when the output is not a terminal (Scrapy's LOGSTATS_INTERVAL is 60 s; a
harvest of a small site lasts less than that)."""

FINISHED_STATES = ("done", "gone", "failed")
"""URL states an extraction counts as pages it finished (the others were never asked, or are waiting)."""


@dataclass
class ProgressLines:
    """Two lines per ``PROGRESS_LINE_S`` from the frontier's counts by state: URLs found (discovery), pages
    finished (extraction), each with its rate since the last line, and what waits."""

    title: str
    write: Callable[[str], None]
    every_s: float = PROGRESS_LINE_S
    _last: tuple[float, int, int] | None = field(default=None, init=False)
    _next_at: float = field(default=0.0, init=False)

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def line(self, states: dict[str, int], now: float, answered: dict[str, int] | None = None) -> str:
        """The line for ``states`` read at monotonic time ``now``; the rates are over the time since the last.
        ``answered``: requests this process completed since the command began, by outcome (``runtime.answered``:
        counted in memory, not the frontier's, so other processes' requests on a shared frontier are not in it),
        what the pages, gone and failed counts are then (they never go down; the URLs finished by state do when a
        re-crawl makes done URLs due again), else the URLs by state."""
        found = sum(states.values())
        finished, gone, failed = _finished(states, answered)
        last = self._last or (now, found, finished)
        self._last, self._next_at = (now, found, finished), now + self.every_s
        span_min = (now - last[0]) / 60

        def rate(count: int, before: int) -> str:
            return f"{max(0, count - before) / span_min:.0f}" if span_min > 0 else "0"

        queued, leased = states.get("queued", 0), states.get("leased", 0)
        head = f"{utcnow():%H:%M:%S} {self.title}:"
        # Two lines, each whole (time and title) and within 80 columns for six-figure counts, as a log file or a
        # default terminal has them: one line of all of it was ~125 columns.
        extract = (f"{head} extract {finished} pages ({rate(finished, last[2])}/min), "
                   f"{gone} gone, {failed} failed")
        discover = (f"{head} {leased} claimed, {queued} queued; "
                    f"discover {found} URLs ({rate(found, last[1])}/min)")
        lines = [extract, discover]
        if (reason := stop_requested()) is not None:
            lines.append(f"{head} stopping ({reason})")
        return "\n".join(lines)

    def last(self, states: dict[str, int], now: float, answered: dict[str, int] | None, elapsed_s: float) -> str:
        """The closing reading, always written (the periodic lines may be up to ``every_s`` old): the two lines,
        then what the bar's last line said on a terminal (done, what waits for a later run, the time taken), with
        the time of day as every line has it. Off a terminal the bar is not drawn: it repeated this without one."""
        queued = states.get("queued", 0)
        spent = int(elapsed_s)
        return (f"{self.line(states, now, answered)}\n{utcnow():%H:%M:%S} {self.title}: {states.get('done', 0)} done"
                + (f", {queued} queued for later" if queued else "")
                + f"; ended after {spent // 3600}:{spent % 3600 // 60:02d}:{spent % 60:02d}")

    def maybe(self, states: dict[str, int], now: float | None = None, answered: dict[str, int] | None = None) -> None:
        """Write the line when one is due; the first reading is the baseline of the first line's rates."""
        now = time.monotonic() if now is None else now
        if self._last is None:
            self._last = (now, sum(states.values()), _finished(states, answered)[0])
            self._next_at = now + self.every_s
        elif self.due(now):
            self.write(self.line(states, now, answered))


def _finished(states: dict[str, int], answered: dict[str, int] | None) -> tuple[int, int, int]:
    """(pages, gone, failed): of the requests completed (``answered``), else of the URLs by state."""
    if answered is not None:
        return sum(answered.values()), answered.get("gone", 0), answered.get("failed", 0)
    return (sum(states.get(state, 0) for state in FINISHED_STATES), states.get("gone", 0),
            states.get("failed", 0))


SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""Exit status of a run a signal stopped: 128 + the signal's number, as a shell reports a process it ended."""


def stopped_exit(got: list[int]) -> int:
    """The exit status of a run that ended by the graceful stop: that of the signal that asked for it."""
    return SIGNAL_EXIT.get(signal.Signals(got[0]), 128 + got[0]) if got else 1


def graceful_signals_note(name: str) -> str:
    return (f"{name} received: stopping gracefully: no new requests are sent, answers in flight are written and "
            f"leases given back, then the run ends (the same command resumes it). {name} again stops at once.")


@contextlib.contextmanager
def graceful_signals(say: Callable[[str], None], got: list[int]) -> Iterator[None]:
    """Within the running event loop, SIGINT and SIGTERM stop the run gracefully (the first) or at once (the
    second). ``got`` receives the first signal's number, for the exit status."""
    loop = asyncio.get_running_loop()

    def at_once(number: int, _frame: object = None) -> None:
        name = signal.Signals(number).name
        say(f"{name} received again: stopping at once; answers in flight are lost (a rerun asks them again), "
            "leases expire or a rerun on this machine takes them back")
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(SIGNAL_EXIT.get(signal.Signals(number), 128 + number))

    def on_signal(number: int) -> None:
        if got:
            at_once(number)
        name = signal.Signals(number).name
        got.append(number)
        say(graceful_signals_note(name))
        request_stop(f"{name} received")

    installed = []
    for number in SIGNAL_EXIT:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread, Windows
            loop.add_signal_handler(number, on_signal, number)
            installed.append(number)
    try:
        yield
    finally:
        for number in installed:
            loop.remove_signal_handler(number)
            if got:  # the run is ending as asked: a second signal while it reports still ends it at once
                signal.signal(number, at_once)


PROGRESS_INTERVAL_S = 0.5
"""How often the progress line reads the frontier's counts, at least."""


def run_with_progress(
    settings: Settings, title: str, coro: Coroutine[Any, Any, Any], *, settle: bool = True
) -> Any:
    """Run a flow (or the library's cycle) while a rich display shows the frontier filling and emptying."""
    from harvester.phases import open_store

    lines = None if console.is_terminal else ProgressLines(title, _say_out)
    began = time.monotonic()

    async def watch(progress: Progress, task_id: Any, done: asyncio.Event) -> None:
        async with open_store(settings) as store:
            mark = answered()
            while True:
                finishing = done.is_set()  # one more reading after the run ended: the last line is the final count
                started = time.monotonic()
                states = await db(store.state_counts)
                # Counting grows with the frontier: read at most ~5 % of the time, however large it gets.
                interval = max(PROGRESS_INTERVAL_S, 20 * (time.monotonic() - started))
                total = sum(states.values())
                finished = total - states.get("queued", 0) - states.get("leased", 0)
                description = f"{title}: {states.get('done', 0)} done, {states.get('queued', 0)} queued"
                if finishing:  # what is still queued now waits for a later run (the budget, a revisit date)
                    total = finished
                    description += " for later" if states.get("queued") else ""
                progress.update(task_id, total=max(total, 1), completed=finished, description=description)
                if lines is not None:
                    now = answered()  # this process's own requests, from memory: no scan of the fetch log
                    own = {k: n - mark.get(k, 0) for k, n in now.items()}
                    if finishing:
                        lines.write(lines.last(states, time.monotonic(), own, time.monotonic() - began))
                    else:
                        lines.maybe(states, answered=own)
                if finishing:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), timeout=interval)

    async def run() -> Any:
        done = asyncio.Event()
        # Off a terminal the bar is not drawn at all: the plain lines' closing reading says what its one drawing
        # said, with the time of day (ops48); and rich's refresh thread would build it ten times a second for
        # nothing, holding the GIL the event loop waits for (issue 31).
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=console, transient=False, auto_refresh=console.is_terminal, disable=lines is not None,
        ) as progress:
            task_id = progress.add_task(title, total=None)
            watcher = asyncio.create_task(watch(progress, task_id, done))
            try:
                with graceful_signals(say_err, signalled):
                    return await coro
            finally:
                done.set()
                await watcher

    signalled: list[int] = []
    try:
        result = asyncio.run(run())
    except Interrupted as stopped:
        _stopped(settings, title, stopped, signalled)
    if settle:
        settle_prefect()
    return result


def _say_out(line: str) -> None:
    console.print(line, soft_wrap=True, markup=False, highlight=False)


def _stopped(settings: Settings, title: str, stopped: Interrupted, signalled: list[int]) -> NoReturn:
    """A run ended by the graceful stop: say what was kept and how to go on, exit with the signal's status."""
    say_err(f"{title} stopped ({stopped}): answers in flight were written and leases given back; "
             "run the same command again to resume where it stopped")
    print_status(settings)
    raise SystemExit(stopped_exit(signalled))
