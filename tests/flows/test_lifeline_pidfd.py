"""A lifeline's pidfd is watched until its process ends, then no more: a pidfd stays readable once its process has
ended and the event loop's readers are level-triggered, so a reader left registered ran its callback on every turn
of the loop (~140,000 times a second) and spun a core through the whole graceful drain (review47b)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

import pytest


async def test_a_worker_gone_stops_the_run_and_its_pidfd_is_watched_no_more(prefect_api, monkeypatch):
    from prefect import flow

    from harvester.errors import Interrupted
    from harvester.flows import lifeline
    from harvester.flows.engine import LIFELINES
    from harvester.runtime import check_stop, clear_stop, stop_requested

    worker = subprocess.Popen(["sleep", "60"])  # stands for the worker the engine's command names
    fd = os.pidfd_open(worker.pid)
    monkeypatch.setenv(LIFELINES, f"{fd}:{worker.pid}:worker")
    monkeypatch.setattr(lifeline, "started_by_runner", lambda: True)
    still_watched: list[Any] = []

    @flow(name="worker-gone")
    async def worker_gone() -> None:
        async with lifeline.parent_lifeline():
            worker.kill()
            worker.wait()
            while stop_requested() is None:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.05)  # a few more turns of the loop: the fd is readable throughout
            # True: the lifeline left its reader registered on a readable fd (removed here, so the test ends).
            still_watched.append(asyncio.get_running_loop().remove_reader(fd))
            check_stop()

    try:
        with pytest.raises(Interrupted):
            await worker_gone()
    finally:
        clear_stop()
        monkeypatch.undo()
        os.close(fd)
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert still_watched == [False], still_watched
