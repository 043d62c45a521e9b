"""A child process that writes one host's discovered URLs while the host's own process parses the next batch.

Sitemap ingestion is CPU-bound in Python: parsing and admitting a URL costs about as much as upserting it, and
both hold the GIL, so a store thread cannot overlap them. Past ``discovery.writer_process_after`` URLs a host
hands its batches to ``python -m harvester.writer`` instead: the upsert then runs on the other core. Each batch
is acknowledged only once committed, and the caller awaits every acknowledgement before it saves the sitemap's
document state, so a crash anywhere loses nothing (an unacknowledged batch is written again on the rerun: the
upsert is idempotent).

Frames on the pipes are an 8-byte big-endian length and a pickle. The parent sends the settings first, then
lists of ``DiscoveredUrl`` (pickle's memo makes the repeated kind and source label one reference each), then
None to stop; the child answers ``("ready",)``, then ``("ok", inserted, updated, made_due)`` or ``("error",
class name, message)`` per batch. The child exits when its stdin closes, so it never outlives its parent's work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import sys
from collections.abc import Sequence
from typing import IO, Any

from harvester.errors import InvalidRecord, SchemaOutOfDate, StoreError
from harvester.records import DiscoveredUrl
from harvester.settings import Settings

logger = logging.getLogger(__name__)

__all__ = ["UrlWriter", "writer_possible"]

_ERRORS: dict[str, type[StoreError]] = {
    "InvalidRecord": InvalidRecord,
    "SchemaOutOfDate": SchemaOutOfDate,
}

START_TIMEOUT_S = 60.0
"""How long the child may take to import and open the store before the host writes in-process again."""


def writer_possible(settings: Settings) -> bool:
    """Whether a second process can open this database: not an in-memory SQLite one."""
    url = settings.database_url
    return settings.discovery.writer_process and not (
        url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") in ("sqlite:", "sqlite:/"))
    )


class UrlWriter:
    """The parent's side: ``add`` sends a batch and returns its ``AddResult`` once the child has committed it.

    Not shared between event loops or hosts: one per host discovery, used by one flush at a time.
    """

    def __init__(self, settings: Settings, *, label: str) -> None:
        self._settings = settings
        self._label = label
        self._proc: asyncio.subprocess.Process | None = None
        self.failed: str | None = None
        self.batches = 0

    async def start(self) -> bool:
        """Start the child and wait until it has opened the store (about a second of imports, paid once per
        host past the threshold); False, logged, when it cannot: the host then writes in-process."""
        if self._proc is None and self.failed is None:
            await self._start()
        return self.ready

    @property
    def ready(self) -> bool:
        return self._proc is not None and self.failed is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def _start(self) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "harvester.writer", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            self._proc = proc
            await self._send(self._settings)
            async with asyncio.timeout(START_TIMEOUT_S):
                reply = await self._receive()
            if reply[0] != "ready":
                raise StoreError(f"the writer process could not open the frontier: {reply[2]}")
        except (OSError, StoreError, TimeoutError, asyncio.IncompleteReadError) as exc:
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.warning(
                "%s: no writer process (%s); URLs are written in-process", self._label, self.failed,
                extra={"error_class": "storage"},
            )
            await self._stop()

    async def add(self, batch: Sequence[DiscoveredUrl]) -> tuple[int, int, int]:
        """(inserted, updated, made_due) of ``batch``, committed by the child. Raises the store's errors."""
        if not self.ready:
            raise StoreError("the writer process is not running")
        try:
            await self._send(list(batch))
            reply = await self._receive()
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.failed = f"the writer process died: {exc}"
            raise StoreError(f"{self._label}: {self.failed}") from exc
        if reply[0] == "ok":
            self.batches += 1
            return int(reply[1]), int(reply[2]), int(reply[3])
        raise _ERRORS.get(reply[1], StoreError)(reply[2])

    async def aclose(self) -> None:
        """Stop the child (after its current batch) and reap it."""
        await self._stop()

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None and not proc.stdin.is_closing():
                with contextlib.suppress(OSError):
                    await self._send(None, proc)
                proc.stdin.close()
            async with asyncio.timeout(30):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise

    async def _send(self, value: Any, proc: asyncio.subprocess.Process | None = None) -> None:
        proc = proc or self._proc
        assert proc is not None
        assert proc.stdin is not None
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        proc.stdin.write(len(payload).to_bytes(8, "big"))
        proc.stdin.write(payload)
        await proc.stdin.drain()

    async def _receive(self) -> tuple[Any, ...]:
        assert self._proc is not None
        assert self._proc.stdout is not None
        size = int.from_bytes(await self._proc.stdout.readexactly(8), "big")
        # Our own child's replies over a private pipe, never network input.
        reply: tuple[Any, ...] = pickle.loads(await self._proc.stdout.readexactly(size))  # noqa: S301
        return reply


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
                added = store.add_discovered(batch)
            except StoreError as exc:
                _write(outbox, ("error", type(exc).__name__, str(exc)))
                continue
            except Exception as exc:  # the parent raises it as a StoreError naming it
                _write(outbox, ("error", type(exc).__name__, f"{type(exc).__name__}: {exc}"))
                continue
            _write(outbox, ("ok", added.inserted, added.updated, added.made_due))


if __name__ == "__main__":
    main()
