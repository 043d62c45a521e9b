"""A child process that writes one host's discovered URLs while the host's own process parses the next batch.

Sitemap ingestion is CPU-bound in Python: parsing and admitting a URL costs about as much as upserting it, and
both hold the GIL, so a store thread cannot overlap them. Past ``discovery.writer_process_after`` URLs a host
hands its batches to ``python -m harvester.frontier.writer`` instead: the upsert then runs on the other core. Each batch
is acknowledged only once committed, and the caller awaits every acknowledgement before it saves the sitemap's
document state, so a crash anywhere loses nothing (an unacknowledged batch is written again on the rerun: the
upsert is idempotent).

Frames on the pipes are an 8-byte big-endian length and a pickle. The parent sends the settings first,
then lists of ``DiscoveredUrl`` as plain tuples (pickle's memo makes the repeated kind and source label one
reference each), then None to stop; the child answers ``("ready",)``, then ``("ok", inserted, updated,
made_due)`` or ``("error", class name, message)`` per batch. The child exits when its stdin closes, so it never
outlives its parent's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from harvester.errors import (
    DatabaseUnavailable,
    InvalidRecord,
    SchemaOutOfDate,
    StoreError,
    WriteConflict,
    WriterGone,
)
from harvester.records import DiscoveredUrl
from harvester.settings import Settings

logger = logging.getLogger(__name__)

__all__ = ["UrlWriter", "WriterGone", "writer_possible"]

_ERRORS: dict[str, type[StoreError]] = {
    cls.__name__: cls for cls in (InvalidRecord, SchemaOutOfDate, WriteConflict, DatabaseUnavailable)
}
"""The store errors the child reports by class and the parent raises as such: the passing ones (a deadlock's
victim, a server away) must stay passing, for the caller asks those again and fails on the rest."""

START_TIMEOUT_S = 60.0
"""How long the child may take to import and open the store before the host writes in-process again."""

BATCH_TIMEOUT_S = 600.0
"""How long a batch may go unanswered before the child counts as hung (its upsert waits at most
``store.sqlite_busy_timeout_s`` per statement on a locked SQLite file); the host then writes in-process."""

MAX_WRITER_PROCESSES = 1
"""Writer children per harvester process. One is what the design pays for: parsing holds this process's core and
the child the other; a second child would only compete for those cores (and, on SQLite, for the one write lock).
A host that finds the slot taken writes in-process and asks again at its next batch."""
_slots = threading.BoundedSemaphore(MAX_WRITER_PROCESSES)


def writer_possible(settings: Settings) -> bool:
    """Whether a second process can open this database: not an in-memory SQLite one."""
    url = settings.database_url
    return settings.discovery.writer_process and not (
        url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite:/"))
    )


class UrlWriter:
    """The parent's side: ``add`` sends a batch and returns its ``AddResult`` once the child has committed it.

    The pipes are blocking and driven from a worker thread: the event loop is busy parsing between its awaits,
    and an asyncio pipe drains only one buffer (64 KiB) per loop turn, which made a 1.5 MB batch take longer
    to hand over than to write. In the thread, ``write`` and ``read`` release the GIL. Not shared between event
    loops or hosts: one per host discovery, used by one flush at a time.
    """

    def __init__(self, settings: Settings, *, label: str) -> None:
        self._settings = settings
        self._label = label
        self._proc: subprocess.Popen[bytes] | None = None
        self.failed: str | None = None
        self.batches = 0
        self._busy = False  # a round trip is in a thread (its awaiting task may have been cancelled)
        self._starting: asyncio.Future[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._slot = False

    async def start(self) -> bool:
        """Start the child and wait until it has opened the store (about a second of imports, paid once per
        host past the threshold). False when it cannot: logged and ``failed`` when the child could not start
        (the host then writes in-process for good); neither when another host holds the process's one writer
        slot (the host may ask again later)."""
        if self._proc is not None or self.failed is not None or self._starting is not None:
            return self.ready
        if not _slots.acquire(blocking=False):
            return False
        self._slot = True
        # Shielded, and awaited again by ``aclose``: a host cancelled during the start must not leave a child
        # that the start thread goes on to create.
        self._starting = asyncio.ensure_future(asyncio.to_thread(self._start))
        self._starting.add_done_callback(_retrieve)  # its failure is reported here, or is a cancellation's doing
        try:
            await asyncio.shield(self._starting)
        except Exception as exc:  # whatever stopped the child, the host writes in-process
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "%s: no writer process (%s); URLs are written in-process", self._label, self.failed,
                extra={"error_class": "storage"},
            )
            await self.aclose()
        return self.ready

    @property
    def ready(self) -> bool:
        return self._proc is not None and self.failed is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "harvester.frontier.writer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        settings = pickle.dumps(self._settings, protocol=pickle.HIGHEST_PROTOCOL)
        reply = self._roundtrip(settings, timeout_s=START_TIMEOUT_S)
        if reply[0] != "ready":
            raise StoreError(f"the writer process could not open the frontier: {reply[2]}")

    async def add(self, batch: Sequence[DiscoveredUrl]) -> tuple[int, int, int]:
        """(inserted, updated, made_due) of ``batch``, committed by the child. Raises the store's errors."""
        if not self.ready:
            raise StoreError("the writer process is not running")
        # Plain tuples pickle five times faster than NamedTuple instances, both ways; pickled here, so the
        # thread only waits on the pipe and never competes with the parser for the GIL.
        payload = pickle.dumps([tuple(item) for item in batch], protocol=pickle.HIGHEST_PROTOCOL)
        self._busy = True  # before the thread exists: ``aclose`` must not write to a pipe it may be writing
        roundtrip = asyncio.ensure_future(asyncio.to_thread(self._roundtrip, payload))
        roundtrip.add_done_callback(_retrieve)
        try:
            # The whole round trip is bounded, sending included (a stopped child leaves a full pipe): past the
            # deadline the child is killed, which ends the thread's write or read at once.
            reply = await asyncio.wait_for(asyncio.shield(roundtrip), BATCH_TIMEOUT_S)
        except TimeoutError as exc:
            self.failed = f"no answer from the writer process within {BATCH_TIMEOUT_S:g} s"
            self._kill()
            await asyncio.wait([roundtrip])
            raise WriterGone(f"{self._label}: {self.failed}") from exc
        except Exception as exc:
            self.failed = f"the writer process died: {type(exc).__name__}: {exc}"
            raise WriterGone(f"{self._label}: {self.failed}") from exc
        if reply[0] == "ok":
            self.batches += 1
            return int(reply[1]), int(reply[2]), int(reply[3])
        raise _ERRORS.get(reply[1], StoreError)(reply[2])

    async def aclose(self) -> None:
        """Stop the child (after its current batch) and reap it; free the writer slot. Shielded: a caller
        cancelled here still gets the child reaped and the slot back, by the one closing task."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
            self._closing.add_done_callback(_retrieve)
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        try:
            starting = self._starting
            if starting is not None and not starting.done():
                self._kill()  # cancelled mid-start: a killed child ends the start thread's wait at once
                await asyncio.wait([starting])
            proc, self._proc = self._proc, None
            if proc is not None:
                # A round trip still in its thread (its caller was cancelled) may be blocked writing to a child
                # that stopped reading: killed, so the pipe frees it (an unacknowledged batch is written again
                # on the rerun; the upsert is idempotent).
                busy = self._busy
                await asyncio.to_thread(_stop, proc, polite=not busy, kill=busy or self.failed is not None)
        finally:
            if self._slot:
                self._slot = False
                _slots.release()

    def _kill(self) -> None:
        """Kill the child (if it exists yet): whatever a thread is doing on its pipes then ends at once."""
        if self._proc is not None:
            with contextlib.suppress(OSError):
                self._proc.kill()

    def _roundtrip(self, payload: bytes, *, timeout_s: float | None = None) -> tuple[Any, ...]:
        proc = self._proc
        assert proc is not None
        self._busy = True
        try:
            return self._exchange(proc, payload, timeout_s)
        except BaseException:
            # Out of step with the child (a half-written frame, an unreadable reply): never used again.
            self.failed = self.failed or "the writer process broke off a round trip"
            raise
        finally:
            self._busy = False

    @staticmethod
    def _exchange(proc: subprocess.Popen[bytes], payload: bytes, timeout_s: float | None) -> tuple[Any, ...]:
        """One frame out (one blocking write: the GIL is released for all of it), one frame back. ``timeout_s``
        bounds the wait for the answer here; ``add`` bounds a whole round trip by killing the child."""
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(len(payload).to_bytes(8, "big"))
        proc.stdin.write(payload)
        proc.stdin.flush()
        if timeout_s is not None and not select.select([proc.stdout], [], [], timeout_s)[0]:
            raise TimeoutError(f"no answer from the writer process within {timeout_s:.0f} s")
        head = proc.stdout.read(8)
        if len(head) < 8:
            raise EOFError("the writer process closed its pipe")
        size = int.from_bytes(head, "big")
        body = proc.stdout.read(size)
        if len(body) < size:
            raise EOFError("the writer process closed its pipe mid-answer")
        # Our own child's replies over a private pipe, never network input.
        reply: tuple[Any, ...] = pickle.loads(body)  # noqa: S301
        return reply


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a background step's failure as seen: it is reported where it matters, never as "never retrieved"."""
    if not future.cancelled():
        future.exception()


def _stop(proc: subprocess.Popen[bytes], *, polite: bool, kill: bool = False) -> None:
    """Ask the child to stop after its current batch, wait for it, kill it if it does not go. Not ``polite``
    while a round trip may still be writing to its pipe: then closing the pipe alone tells it to stop. ``kill``:
    a child that failed (dead, hung or out of step) is killed at once, never waited for."""
    try:
        if kill:
            with contextlib.suppress(OSError):
                proc.kill()
        if proc.stdin is not None:
            if polite:
                with contextlib.suppress(OSError):
                    payload = pickle.dumps(None)
                    proc.stdin.write(len(payload).to_bytes(8, "big") + payload)
                    proc.stdin.flush()
            with contextlib.suppress(OSError):
                proc.stdin.close()
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None  # the parent is gone: stop
    size = int.from_bytes(head, "big")
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return pickle.loads(payload)  # noqa: S301 - the parent's batches over a private pipe


def _write(stream: IO[bytes], value: tuple[Any, ...]) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(payload).to_bytes(8, "big") + payload)
    stream.flush()


def main() -> None:
    """The child: open the store, then upsert batch after batch until None or end of input."""
    from harvester.frontier import FrontierStore  # the child's import; the parent never needs it here

    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the reply pipe
    settings = _read(inbox)
    if not isinstance(settings, Settings):
        return
    try:
        store = FrontierStore.open(settings, upgrade=False)
    except Exception as exc:  # reported to the parent, which falls back to writing itself
        _write(outbox, ("error", type(exc).__name__, str(exc)))
        return
    with store:
        _write(outbox, ("ready",))
        while (batch := _read(inbox)) is not None:
            try:
                added = store.add_discovered([DiscoveredUrl._make(row) for row in batch])
            except StoreError as exc:
                _write(outbox, ("error", type(exc).__name__, str(exc)))
                continue
            except Exception as exc:  # the parent raises it as a StoreError naming it
                _write(outbox, ("error", type(exc).__name__, f"{type(exc).__name__}: {exc}"))
                continue
            _write(outbox, ("ok", added.inserted, added.updated, added.made_due))


if __name__ == "__main__":
    main()
