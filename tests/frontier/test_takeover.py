"""A worker with nothing left in its round ends only when nothing of its scope is queued or in flight under a live
holder (issue 32). The store calls are driven in the orders that lost: the kill test's survivors exited with the
dead worker's hosts queued ("748 done, 92 queued") because "held by another?" was asked after those hosts had
been released (by the survivor's own hand-back of a dead holder's leases, or by the lease running out), so they
were neither held nor looked for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, HostPolicy, UrlKind

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
HOST = "https://dead.test"
OTHER = "https://alive.test"


def _frontier(store: FrontierStore) -> None:
    store.add_discovered(
        [DiscoveredUrl(f"{h}/p{i}", UrlKind.DETAIL, "seed", score=1.0) for h in (HOST, OTHER) for i in range(6)],
        now=T0,
    )


def test_a_dead_holders_hosts_released_before_the_last_look_are_still_the_survivors_work(store: FrontierStore):
    _frontier(store)
    assert store.claim_hosts("dead", limit=1, lease_s=60, hosts=[HOST], now=T0) == [HOST]
    assert len(store.claim("dead", hosts=[HOST], per_host=2, lease_s=60, now=T0)) == 2  # two in flight
    # The survivor's round looks for hosts: the dead holder's lease is live, so it gets none of them.
    assert store.claim_hosts("survivor", limit=5, lease_s=60, hosts=[HOST], now=T0) == []
    assert store.unfinished("survivor", hosts=[HOST], now=T0) == ([], [HOST])  # control: held, so it waits
    # Its round ends; then it hands back the leases of holders known dead (recover_leases) ...
    assert store.release_owner("dead") == 2
    # ... and its last look must find that host its own work, not "held by nobody, so done".
    assert store.unfinished("survivor", hosts=[HOST], now=T0) == ([HOST], [])
    assert store.claim_hosts("survivor", limit=5, lease_s=60, hosts=[HOST], now=T0) == [HOST]
    assert len(store.claim("survivor", hosts=[HOST], per_host=10, lease_s=60, now=T0)) == 6  # all of it, again


def test_a_lease_running_out_between_two_looks_leaves_the_host_in_one_of_them(store: FrontierStore):
    _frontier(store)
    store.claim_hosts("remote", limit=1, lease_s=10, hosts=[HOST], now=T0)  # a holder on another machine
    store.claim("remote", hosts=[HOST], per_host=2, lease_s=10, now=T0)
    assert store.unfinished("survivor", hosts=[HOST, OTHER], now=T0) == ([OTHER], [HOST])
    # At the lease's very end, and after it: never neither.
    for moment in (T0 + timedelta(seconds=10), T0 + timedelta(seconds=10, microseconds=1), T0 + timedelta(hours=1)):
        claimable, held = store.unfinished("survivor", hosts=[HOST], now=moment)
        assert (claimable, held) in (([], [HOST]), ([HOST], [])), moment
    assert store.unfinished("survivor", hosts=[HOST], now=T0 + timedelta(seconds=11)) == ([HOST], [])


def test_urls_in_flight_under_a_live_holder_keep_a_released_host_held(store: FrontierStore):
    _frontier(store)
    store.claim_hosts("peer", limit=1, lease_s=60, hosts=[HOST], now=T0)
    claimed = store.claim("peer", hosts=[HOST], per_host=6, lease_s=60, now=T0)  # its whole queue in flight
    store.release_hosts("peer", [HOST], now=T0)  # its turn ended while its last requests were out
    assert store.unfinished("survivor", hosts=[HOST], now=T0) == ([], [HOST])
    store.release("peer", [c.id for c in claimed])  # they come back unfetched
    assert store.unfinished("survivor", hosts=[HOST], now=T0) == ([HOST], [])


def test_own_hosts_count_and_parked_or_empty_hosts_do_not(store: FrontierStore):
    _frontier(store)
    empty, parked = "https://empty.test", "https://parked.test"
    store.ensure_hosts([empty])
    store.add_discovered([DiscoveredUrl(f"{parked}/p", UrlKind.DETAIL, "seed")], now=T0)
    store.save_host_policy(HostPolicy(origin=parked, parked_reason="failing"))
    assert store.unfinished("w", hosts=[], now=T0) == ([], [])
    store.claim_hosts("w", limit=2, lease_s=60, hosts=[HOST, OTHER], now=T0)
    assert store.unfinished("w", hosts=[HOST, OTHER, empty, parked], now=T0) == (sorted([HOST, OTHER]), [])
