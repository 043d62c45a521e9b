"""``runtime.siblings``, the task group of a phase's hosts (discover_flow) and workers (extract_flow, harvest()): the
first failure cancels the others, but the process's stop cancels none, since each sibling drains what it has on the
wire (tests/flows/test_discover_flow_stop.py and test_extract_flow_stop.py show what a cancel there lost). Events,
not timings, order the siblings."""

from __future__ import annotations

import asyncio
import logging

import pytest

from harvester.errors import ConfigError, Interrupted
from harvester.runtime import check_stop, request_stop, siblings

WAIT_S = 60.0



async def test_the_first_failure_cancels_the_others_and_is_raised():
    cancelled = asyncio.Event()

    async def waits() -> None:
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def fails() -> None:
        raise ConfigError("broken")

    with pytest.raises(ConfigError, match="broken"):
        await siblings({"waits": waits(), "fails": fails()})
    assert cancelled.is_set()


async def test_the_stop_waits_for_every_sibling_to_drain_then_is_raised(stopped):
    drained = asyncio.Event()
    release = asyncio.Event()

    async def meets_the_stop() -> None:
        request_stop("test")
        release.set()
        check_stop()

    async def drains() -> str:
        await release.wait()
        await asyncio.sleep(0)  # still draining after its sibling ended with the stop
        drained.set()
        return "written"

    with pytest.raises(Interrupted):
        await asyncio.wait_for(siblings({"drains": drains(), "stops": meets_the_stop()}), WAIT_S)
    assert drained.is_set()


async def test_a_failure_while_draining_on_a_stop_is_logged_and_the_stop_raised(stopped, caplog):
    """The run stays to be resumed (``Interrupted``), not finished failed, and the other siblings still drain."""
    release = asyncio.Event()
    drained = asyncio.Event()

    async def meets_the_stop() -> None:
        request_stop("test")
        release.set()
        check_stop()

    async def fails_draining() -> None:
        await release.wait()
        raise ConfigError("broken while draining")

    async def drains() -> None:
        await release.wait()
        for _ in range(3):
            await asyncio.sleep(0)
        drained.set()

    caplog.set_level(logging.WARNING, logger="harvester.runtime")
    with pytest.raises(Interrupted):
        await asyncio.wait_for(siblings({"fails": fails_draining(), "drains": drains(),
                                                   "stops": meets_the_stop()}), WAIT_S)
    assert drained.is_set()
    assert "fails failed as the process stopped: broken while draining" in caplog.text
