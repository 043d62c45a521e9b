"""Small process-level helpers shared by the phases: the clock, store calls off the loop, lease owner ids."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


def utcnow() -> datetime:
    return datetime.now(UTC)


async def db(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one store call off the event loop: the store is synchronous, the fetch loop must not block."""
    return await asyncio.to_thread(fn, *args, **kwargs)


_LIVE_OWNERS: set[str] = set()
"""Owners of this process still at work: a retried task in the same process may take back the others' leases."""


def make_owner(role: str) -> str:
    """A lease owner id that says where it runs, so a rerun on the same machine can tell a dead holder.

    Call ``retire_owner`` when the unit of work ends, however it ends."""
    owner = f"{socket.gethostname()}:{os.getpid()}:{role}:{uuid.uuid4().hex[:8]}"
    _LIVE_OWNERS.add(owner)
    return owner


def retire_owner(owner: str) -> None:
    _LIVE_OWNERS.discard(owner)


def owner_is_dead(owner: str) -> bool:
    """True when ``owner`` ran on this machine in a process that no longer exists."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return owner not in _LIVE_OWNERS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
