"""The extraction run's stop rule with plain numbers: another round at once while rounds add URLs, waits for
backed-off retries within their bounds, and an end when nothing is settled for ``max_idle_rounds`` rounds."""

from __future__ import annotations

from harvester.rules.stop import HOLD_POLL_S, MAX_LINK_ROUNDS, RETRY_WAIT_MAX_S, RETRY_WAIT_TOTAL_S, StopRule


def test_rounds_go_on_at_once_while_they_add_urls_up_to_the_link_round_cap():
    stop = StopRule(max_idle_rounds=3)
    assert all(stop.again_now(added_urls=True) for _ in range(MAX_LINK_ROUNDS - 1))
    assert not stop.again_now(added_urls=True)  # the 50th round: deeper links are the next run's
    assert not StopRule(max_idle_rounds=3).again_now(added_urls=False)


def test_nothing_due_ever_ends_the_run():
    assert StopRule(max_idle_rounds=3).wait_s(next_due_in_s=None, settled=0) is None


def test_a_retry_due_soon_is_waited_for_and_a_late_one_is_left_to_the_next_run():
    stop = StopRule(max_idle_rounds=3)
    assert stop.wait_s(next_due_in_s=-2.0, settled=1) == 0.0  # already due: no wait
    assert stop.wait_s(next_due_in_s=5.0, settled=2) == 5.0
    assert stop.wait_s(next_due_in_s=RETRY_WAIT_MAX_S + 0.1, settled=3) is None


def test_the_waits_of_one_run_add_up_to_the_total_at_most():
    stop = StopRule(max_idle_rounds=100)
    waited = 0.0
    settled = 0
    while (gap := stop.wait_s(next_due_in_s=RETRY_WAIT_MAX_S, settled=settled)) is not None:
        waited += gap
        settled += 1
    assert waited <= RETRY_WAIT_TOTAL_S < waited + RETRY_WAIT_MAX_S


def test_rounds_that_settle_nothing_end_the_waits_after_max_idle_rounds():
    stop = StopRule(max_idle_rounds=3, retry_wait_total_s=1e9)
    answers = [stop.wait_s(next_due_in_s=1.0, settled=7) for _ in range(5)]
    # The first sets the mark; the next three settle nothing new, and the third of those ends the run.
    assert answers[:3] == [1.0, 1.0, 1.0] and answers[3] is None


def test_work_held_by_others_or_hosts_still_to_be_handed_over_keep_the_run_waiting():
    stop = StopRule(max_idle_rounds=3)
    assert stop.hold_s(held_elsewhere=0, handing_over=False) is None  # nothing left anywhere: over
    assert stop.hold_s(held_elsewhere=2, handing_over=False) == HOLD_POLL_S  # another worker's hosts may come back
    assert stop.hold_s(held_elsewhere=0, handing_over=True) == HOLD_POLL_S  # discovery is still handing hosts over


def test_rounds_after_a_hold_spend_no_link_round():
    stop = StopRule(max_idle_rounds=3, max_link_rounds=3)
    for _ in range(10):  # a long wait for other workers' hosts ...
        stop.hold_s(held_elsewhere=1, handing_over=False)
        stop.again_now(added_urls=False)
    # ... leaves every link round to the pages fetched after it.
    assert stop.again_now(added_urls=True) and stop.again_now(added_urls=True)
    assert not stop.again_now(added_urls=True)


def test_hosts_free_to_take_start_another_round_at_once_until_rounds_settle_nothing_on_them():
    stop = StopRule(max_idle_rounds=3)
    # A dead holder's hosts, released after the round looked: this worker's work, not "held by nobody, so done".
    assert stop.hold_s(claimable=2, held_elsewhere=0, handing_over=False, settled=10) == 0.0
    assert stop.hold_s(claimable=2, held_elsewhere=0, handing_over=False, settled=20) == 0.0  # progress
    # Rounds that settle nothing on them (taken by others each time, say) stop counting them ...
    answers = [stop.hold_s(claimable=2, held_elsewhere=0, handing_over=False, settled=20) for _ in range(3)]
    assert answers[:2] == [0.0, 0.0] and answers[2] is None
    # ... and what others hold is then waited for as before.
    assert stop.hold_s(claimable=2, held_elsewhere=1, handing_over=False, settled=20) == HOLD_POLL_S
