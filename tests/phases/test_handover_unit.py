"""The handover between a cycle's discovery and extraction, as plain values (``phases.handover``), and the cycle's
state as the flows find it by key (``phases.cycle_state``, ``runtime.shared_as``)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from harvester.phases.cycle_state import CycleState, find_cycle
from harvester.phases.handover import Handover
from harvester.runtime import find_shared, shared_as


def test_hosts_open_one_by_one_then_all_when_discovery_ends():
    item = Handover()
    assert item.open_hosts() == frozenset()
    item.hand_over(["http://a"])
    assert item.open_hosts() == {"http://a"}
    item.end()
    assert item.open_hosts() is None and item.ended


def test_a_cycle_is_found_by_its_key_only_inside_its_blocks_and_in_any_thread_of_the_process():
    cycle = CycleState(handover=Handover())
    with shared_as(cycle.key, cycle) as key:
        with shared_as(key, cycle):  # both phases of the cycle hold it: the key outlives the first to end
            pass
        found: list[CycleState | None] = []
        thread = threading.Thread(target=lambda: found.append(find_cycle(key)))  # a flow's task in a worker thread
        thread.start()
        thread.join()
        assert found == [cycle]
        with pytest.raises(ValueError, match="already shared"), shared_as(key, CycleState()):
            pass
    assert find_cycle(key) is None and find_shared(key) is None
    assert find_cycle(None) is None
    with shared_as("not a cycle", object()):
        assert find_cycle("not a cycle") is None  # a key names a cycle or nothing


async def test_a_waiter_wakes_on_a_change_and_otherwise_times_out():
    item = Handover()
    seen = item.version
    assert not await item.changed(seen, 0.05)
    asyncio.get_running_loop().call_later(0.02, item.hand_over, ["http://b"])
    assert await item.changed(seen, 5.0)
