"""The handover between a cycle's discovery and extraction, as plain values (``phases.handover``)."""

from __future__ import annotations

import asyncio

from harvester.phases.handover import Handover, handover, held


def test_hosts_open_one_by_one_then_all_when_discovery_ends():
    item = Handover()
    assert item.open_hosts() == frozenset()
    item.hand_over(["http://a"])
    assert item.open_hosts() == {"http://a"}
    item.end()
    assert item.open_hosts() is None and item.ended


def test_a_key_is_held_only_inside_its_block_and_unknown_keys_mean_not_pipelined():
    with handover() as key:
        assert held(key) is not None
    assert held(key) is None
    assert held(None) is None


async def test_a_waiter_wakes_on_a_change_and_otherwise_times_out():
    item = Handover()
    seen = item.version
    assert not await item.changed(seen, 0.05)
    asyncio.get_running_loop().call_later(0.02, item.hand_over, ["http://b"])
    assert await item.changed(seen, 5.0)
