"""Pure politeness decisions with explicit clocks: limits, pacing, Retry-After, back-off, AIMD, parking."""

from __future__ import annotations

import random
from dataclasses import replace

from harvester.fetch.politeness import GateConfig, HostGate, Signal, classify
from harvester.records import ErrorClass, FetchResult
from harvester.settings import PolitenessSettings


def gate(**kw) -> HostGate:
    """A gate with the settings' defaults but for ``kw`` (GateConfig's own fields)."""
    return HostGate(replace(GateConfig.from_settings(PolitenessSettings()), **kw), rng=random.Random(7))


def result(status: int | None, error_class: ErrorClass | None = None, elapsed: float = 0.01) -> FetchResult:
    return FetchResult(url="http://h/", final_url="http://h/", status=status, started_at=0.0, elapsed_s=elapsed,
                       error_class=error_class)


def test_start_never_passes_the_limit():
    g = gate(start_limit=2, max_limit=4)
    g.start(0.0)
    g.start(0.0)
    assert g.wait_s(0.0) is None  # at the limit: wait for a finish
    g.finish(0.1, 0.0, Signal.NEUTRAL)
    assert g.wait_s(0.1) == 0.0


def test_interval_is_the_largest_of_min_delay_crawl_delay_and_request_rate():
    g = gate(min_delay_s=0.01)
    g.set_robots(0.0, 0.05, 0.2)
    assert g.interval_s == 0.2
    g.set_robots(0.0, 0.05, None)
    assert g.interval_s == 0.05
    g.start(1.0)
    assert g.wait_s(1.0) is None  # a paced host has one request at a time
    g.finish(1.02, 1.0, Signal.FAST)
    assert abs(g.wait_s(1.02) - 0.05) < 1e-9  # counted from the end of the previous response
    assert g.wait_s(1.07) == 0.0


def test_control_without_delays_allows_back_to_back_starts():
    g = gate(start_limit=4)
    g.start(1.0)
    assert g.wait_s(1.0) == 0.0


def test_next_request_after_robots_waits_a_full_interval_from_the_robots_answer():
    g = gate()
    g.start(0.0)  # the robots.txt request
    g.finish(0.02, 0.0, Signal.FAST)
    g.set_robots(0.02, 0.05, None)
    assert abs(g.wait_s(0.02) - 0.05) < 1e-9


def test_retry_after_is_honoured_exactly_and_halves_the_limit():
    g = gate(start_limit=4, max_limit=4)
    g.start(0.0)
    g.finish(0.1, 0.0, Signal.OVERLOADED, retry_after_s=2.0)
    assert g.limit == 2
    assert abs(g.wait_s(0.1) - 2.0) < 1e-9
    assert g.wait_s(2.1) == 0.0


def test_backoff_without_retry_after_grows_exponentially_with_jitter_and_is_capped():
    g = gate(start_limit=4, backoff_base_s=1.0, backoff_max_s=10.0)
    delays = []
    now = 0.0
    for _ in range(4):
        g.start(now)
        g.finish(now, now, Signal.OVERLOADED)
        delays.append(g.blocked_until - now)
        now = g.blocked_until
    assert 1.0 <= delays[0] < 1.5
    assert 2.0 <= delays[1] < 3.0
    assert 4.0 <= delays[2] < 6.0
    assert 8.0 <= delays[3] <= 10.0  # jitter never passes the cap
    assert g.parked is None


def test_a_backoff_that_would_pass_backoff_max_parks_the_host_for_the_run_instead():
    """A host still answering 429 after back-offs up to backoff_max_s: the run leaves it, instead of waiting
    backoff_max_s per answer for as long as the host has URLs with attempts left (issue 44: an hour)."""
    g = gate(start_limit=4, backoff_base_s=1.0, backoff_max_s=10.0)
    now, answers = 0.0, 0
    while g.parked is None and answers < 10:
        g.start(now)
        g.finish(now, now, Signal.OVERLOADED)
        answers += 1
        now = max(now, g.blocked_until)
    assert answers == 5  # 1, 2, 4, 8 s; the fifth would wait 16 s > 10 s
    assert "backoff_max_s" in g.parked


def test_default_settings_park_a_host_answering_only_5xx_within_a_few_requests():
    """Defaults: a host answering 500 (or 503) to everything is parked after a handful of requests with back-offs
    of a few seconds between them, not after 20 spread over an hour (issue 44)."""
    for signal in (Signal.FAILED, Signal.UNAVAILABLE):
        g = gate()
        now, waited, answers = 0.0, 0.0, 0
        while g.parked is None and answers < 30:
            g.start(now)
            g.finish(now, now, signal)
            answers += 1
            wait = max(0.0, g.blocked_until - now)
            waited += wait
            now += wait
        assert answers <= 5, signal
        assert waited <= 30.0, signal
        assert "consecutive failures" in g.parked


def test_retry_after_beyond_backoff_max_parks_the_host():
    g = gate(backoff_max_s=60.0)
    g.start(0.0)
    g.finish(0.0, 0.0, Signal.OVERLOADED, retry_after_s=3600.0)
    assert g.parked is not None
    assert "Retry-After" in g.parked


def test_one_decrease_per_congestion_event():
    g = gate(start_limit=8, max_limit=8)
    for _ in range(8):
        g.start(0.0)
    g.finish(0.1, 0.0, Signal.OVERLOADED, retry_after_s=0.0)
    g.finish(0.1, 0.0, Signal.OVERLOADED, retry_after_s=0.0)  # same window: not halved again
    assert g.limit == 4
    g.start(0.2)
    g.finish(0.3, 0.2, Signal.OVERLOADED, retry_after_s=0.0)  # a request sent after the decrease: halves
    assert g.limit == 2


def test_aimd_increases_after_a_run_of_fast_successes_up_to_the_ceiling():
    g = gate(start_limit=1, max_limit=3)
    now = 0.0
    for _ in range(500):
        g.start(now)
        g.finish(now, now, Signal.FAST)
        now += 0.01
    assert g.limit == 3


def test_aimd_settles_below_the_limit_that_drew_429s():
    """A host that answers 429 above 3 in flight: the limit spends almost all its time at 3."""
    g = gate(start_limit=2, max_limit=8)
    now = 0.0
    at_limit: list[int] = []
    overloads = 0
    for _ in range(5000):
        at_limit.append(g.limit)
        signal = Signal.OVERLOADED if g.limit > 3 else Signal.FAST
        overloads += signal is Signal.OVERLOADED
        g.start(now)
        g.finish(now + 0.001, now, signal, retry_after_s=0.0 if signal is Signal.OVERLOADED else None)
        now += 0.01
    settled = at_limit[500:]
    assert settled.count(3) / len(settled) > 0.95
    assert overloads / 5000 < 0.01
    assert max(at_limit) <= 4


def test_slow_responses_halve_the_limit():
    g = gate(start_limit=4, max_limit=4, slow_response_s=1.0)
    g.start(0.0)
    g.finish(2.0, 0.0, classify(result(200, elapsed=2.0), 1.0))
    assert g.limit == 2


def test_consecutive_failures_park_the_host_and_a_success_resets_the_count():
    g = gate(park_after_failures=5, backoff_base_s=0.001, backoff_max_s=0.001)
    now = 0.0
    for _ in range(4):
        g.start(now)
        g.finish(now, now, Signal.FAILED)
        now += 1.0
    g.start(now)
    g.finish(now, now, Signal.FAST)
    assert g.failures == 0
    assert g.parked is None
    for _ in range(5):
        g.start(now)
        g.finish(now, now, Signal.FAILED)
        now += 1.0
    assert g.parked is not None
    assert "5 consecutive failures" in g.parked
    assert g.wait_s(now) == 0.0  # parking is a separate verdict the engine checks first


def test_crawl_delay_above_the_maximum_parks_the_host():
    g = gate(max_crawl_delay_s=30.0)
    g.set_robots(0.0, 3600.0, None)
    assert g.parked is not None
    assert "crawl-delay" in g.parked
    control = gate(max_crawl_delay_s=30.0)
    control.set_robots(0.0, 10.0, None)
    assert control.parked is None


def test_classify_maps_outcomes_to_signals():
    assert classify(result(200), 5.0) is Signal.FAST
    assert classify(result(304), 5.0) is Signal.FAST
    assert classify(result(429, ErrorClass.HTTP_429), 5.0) is Signal.OVERLOADED
    assert classify(result(503, ErrorClass.HTTP_5XX), 5.0) is Signal.UNAVAILABLE
    assert classify(result(500, ErrorClass.HTTP_5XX), 5.0) is Signal.FAILED
    assert classify(result(None, ErrorClass.CONNECT), 5.0) is Signal.FAILED
    assert classify(result(None, ErrorClass.TIMEOUT), 5.0) is Signal.FAILED
    assert classify(result(404, ErrorClass.HTTP_4XX), 5.0) is Signal.NEUTRAL
    assert classify(result(None, ErrorClass.ROBOTS_DISALLOWED), 5.0) is Signal.NEUTRAL


def test_profile_limit_is_also_the_ceiling():
    cfg = GateConfig.from_settings(PolitenessSettings(per_host_start=2, max_per_host_limit=6))
    assert (cfg.start_limit, cfg.max_limit) == (2, 6)
    pinned = GateConfig.from_settings(PolitenessSettings(), per_host_limit=1, min_delay_s=0.5)
    assert (pinned.start_limit, pinned.max_limit, pinned.min_delay_s) == (1, 1, 0.5)


def test_a_url_failing_again_counts_once_towards_parking():
    """A healthy host with a few broken pages, retried: the retries' 500s are not a host failing (they are the same
    URLs); five different URLs failing in a row are."""
    g = gate(park_after_failures=5, backoff_base_s=0.001, backoff_max_s=0.001)
    now = 0.0
    for attempt in range(3):
        for page in ("a", "b"):
            g.start(now)
            g.finish(now, now, Signal.FAILED, key=f"http://h/{page}")
            now += 1.0
        assert g.parked is None, attempt
    assert g.failures == 2
    for page in ("c", "d", "e"):
        g.start(now)
        g.finish(now, now, Signal.FAILED, key=f"http://h/{page}")
        now += 1.0
    assert g.parked is not None
