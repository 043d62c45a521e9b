"""Extraction's one thread taken by the hosts in turn (``phases.host_turns``, issue 31: the slow host's limit).

A fast host's answers filled the parse thread's queue and a slow host's answer waited behind them all, so the slow
host's records piled up until its workers waited for them. The order is forced with events: the first parse holds
the thread until the others are queued; nothing is timed.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from harvester.phases import extract_host
from harvester.phases.host_turns import HostTurns

WAIT_S = 60.0
"""Generous bound on a forced step under load; the steps wait on events."""


async def _queued(turns: HostTurns, n: int) -> None:
    for _ in range(int(WAIT_S / 0.01)):
        if turns.waiting() >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never {n} calls queued")


async def _backlog_then_slow(run, turns: HostTurns | None) -> list[str]:  # type: ignore[no-untyped-def]
    """The fast host's first parse holds the thread while five more of its answers and then one of the slow host's
    come; returns the order the parses ran in."""
    order: list[str] = []
    holding = threading.Event()
    release = threading.Event()

    def parse(name: str) -> str:
        if name == "fast-0":
            holding.set()
            assert release.wait(WAIT_S)
        order.append(name)
        return name

    first = asyncio.ensure_future(run("fast", lambda: parse("fast-0")))
    assert await asyncio.to_thread(holding.wait, WAIT_S)
    backlog = [asyncio.ensure_future(run("fast", lambda i=i: parse(f"fast-{i}"))) for i in range(1, 6)]
    slow = asyncio.ensure_future(run("slow", lambda: parse("slow-0")))
    if turns is not None:
        await _queued(turns, 6)
    else:
        await asyncio.sleep(0)  # the control: each task submits its call in its first step, in creation order
    release.set()
    assert await asyncio.gather(first, *backlog, slow) == ["fast-0", *(f"fast-{i}" for i in range(1, 6)), "slow-0"]
    return order


async def test_a_slow_hosts_answer_waits_for_no_fast_hosts_backlog() -> None:
    """The slow host's parse runs as soon as the thread is free, before the fast host's five queued ones; first
    come, first served (the control: what extraction did before) it ran last."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        turns = HostTurns(executor)
        order = await _backlog_then_slow(turns.run, turns)
        assert order == ["fast-0", "slow-0", "fast-1", "fast-2", "fast-3", "fast-4", "fast-5"]

        loop = asyncio.get_running_loop()

        async def first_come(_host: str, call):  # type: ignore[no-untyped-def]
            return await loop.run_in_executor(executor, call)

        assert (await _backlog_then_slow(first_come, None))[-1] == "slow-0"


async def test_extraction_takes_hosts_in_turn_one_parse_at_a_time() -> None:
    """What ``ExtractWork`` parses through: the process's one extraction thread, in turns; never two parses (two
    calls of a user's hook) at once, whatever the hosts."""
    turns = extract_host.TURNS
    order = await _backlog_then_slow(turns.run, turns)
    assert order.index("slow-0") == 1
    running = [0]
    most = [0]
    lock = threading.Lock()

    def parse(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        with lock:
            running[0] -= 1
        return i

    got = await asyncio.gather(*(turns.run(f"host-{i % 5}", lambda i=i: parse(i)) for i in range(50)))
    assert got == list(range(50))
    assert most[0] == 1


async def test_a_failing_call_raises_in_its_caller_and_a_cancelled_one_never_runs() -> None:
    with ThreadPoolExecutor(max_workers=1) as executor:
        turns = HostTurns(executor)
        holding, release = threading.Event(), threading.Event()
        ran: list[str] = []

        def hold() -> None:
            holding.set()
            assert release.wait(WAIT_S)

        def boom() -> None:
            raise ValueError("unparseable")

        first = asyncio.ensure_future(turns.run("a", hold))
        assert await asyncio.to_thread(holding.wait, WAIT_S)
        failing = asyncio.ensure_future(turns.run("b", boom))
        dropped = asyncio.ensure_future(turns.run("c", lambda: ran.append("c")))
        kept = asyncio.ensure_future(turns.run("d", lambda: ran.append("d")))
        await _queued(turns, 3)
        dropped.cancel()
        release.set()
        await first
        with pytest.raises(ValueError, match="unparseable"):
            await failing
        await kept
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert ran == ["d"]
