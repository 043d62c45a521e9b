"""revisit: the adaptive interval, lastmod truthfulness, skip rule, and the fetch → URL state mapping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvester.records import ClaimedUrl, ErrorClass, FetchResult, UrlKind, UrlState
from harvester.rules.revisit import (
    REASK_PROBES,
    classify_outcome,
    contradicts_304,
    due_at,
    lastmod_predicts_change,
    may_skip,
    newer_than_copy,
    next_revisit,
    reask_304,
    retry_delay_s,
    spot_check,
    truthfulness,
)
from harvester.settings import RevisitSettings, Settings

NOW = datetime(2024, 6, 10, 12, 0, tzinfo=UTC)
SETTINGS = Settings()
REVISIT = RevisitSettings()
URL = "https://h.example/a-1"


def claimed(**kw) -> ClaimedUrl:
    base = dict(id=7, url=URL, host="https://h.example", kind=UrlKind.DETAIL, depth=0, score=1.0, attempts=0,
                lease_until=NOW + timedelta(minutes=5))
    base.update(kw)
    return ClaimedUrl(**base)


def result(status: int | None, **kw) -> FetchResult:
    base = dict(url=URL, final_url=URL, status=status, started_at=0.0, elapsed_s=0.01)
    base.update(kw)
    return FetchResult(**base)


# --- next_revisit -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changefreq", "expected"),
    [("hourly", 3600.0), ("daily", 86_400.0), ("weekly", 7 * 86_400.0), ("monthly", 30 * 86_400.0),
     ("yearly", 30 * 86_400.0), ("never", 30 * 86_400.0), ("always", 3600.0), (" Daily ", 86_400.0),
     (None, 86_400.0), ("fortnightly", 86_400.0)],
)
def test_first_interval_seeded_from_changefreq(changefreq, expected):
    interval, at = next_revisit(previous_s=None, changed=True, changefreq=changefreq, settings=REVISIT, now=NOW)
    assert interval == expected
    assert at == due_at(NOW, expected, REVISIT)


@pytest.mark.parametrize(("interval", "early"), [(3600.0, 360.0), (86_400.0, 8640.0), (7 * 86_400.0, 3 * 3600.0)])
def test_a_url_is_due_a_little_ahead_of_its_interval(interval, early):
    # A tenth of the interval, three hours at most: a daily run on the schedule of the last one finds due what the
    # last read minutes or hours after it started (a page read at 07:40 is due at 05:16 the next day).
    assert due_at(NOW, interval, REVISIT) == NOW + timedelta(seconds=interval - early)
    none = REVISIT.model_copy(update={"due_early_share": 0.0})
    assert due_at(NOW, interval, none) == NOW + timedelta(seconds=interval)


def test_an_unlisted_url_is_asked_at_least_daily():
    # First found outside any sitemap: nothing announces its change or deletion, so the interval stops at a day.
    listed, _ = next_revisit(previous_s=10 * 86_400.0, changed=False, changefreq=None, settings=REVISIT, now=NOW)
    unlisted, at = next_revisit(previous_s=10 * 86_400.0, changed=False, changefreq=None, settings=REVISIT,
                                now=NOW, listed=False)
    assert listed == 15 * 86_400.0
    assert unlisted == REVISIT.unlisted_max_s == 86_400.0
    assert at == due_at(NOW, 86_400.0, REVISIT)


def test_changes_shorten_and_unchanged_lengthen():
    changed, _ = next_revisit(previous_s=86_400.0, changed=True, changefreq=None, settings=REVISIT, now=NOW)
    same, _ = next_revisit(previous_s=86_400.0, changed=False, changefreq=None, settings=REVISIT, now=NOW)
    assert changed == 43_200.0
    assert same == 129_600.0


@given(previous=st.floats(min_value=1, max_value=1e9), changed=st.booleans())
def test_interval_always_within_bounds(previous, changed):
    interval, at = next_revisit(previous_s=previous, changed=changed, changefreq=None, settings=REVISIT, now=NOW)
    assert REVISIT.min_s <= interval <= REVISIT.max_s
    assert at > NOW


def test_repeated_unchanged_fetches_reach_the_ceiling_and_changes_the_floor():
    interval = None
    for _ in range(20):
        interval, _ = next_revisit(previous_s=interval, changed=False, changefreq="daily", settings=REVISIT, now=NOW)
    assert interval == REVISIT.max_s
    for _ in range(20):
        interval, _ = next_revisit(previous_s=interval, changed=True, changefreq="daily", settings=REVISIT, now=NOW)
    assert interval == REVISIT.min_s


# --- truthfulness and skipping ------------------------------------------------------------------------------


def test_truthfulness_needs_a_minimum_sample_and_is_smoothed():
    assert truthfulness(0, 0) is None
    assert truthfulness(9, 9) is None
    assert truthfulness(10, 10) == pytest.approx(11 / 12)
    assert truthfulness(100, 0) == pytest.approx(1 / 102)
    assert truthfulness(3, 3, min_checks=3) == pytest.approx(4 / 5)


def test_may_skip_only_unchanged_lastmod_on_a_truthful_host():
    fetched_at = NOW - timedelta(days=1)
    older = fetched_at - timedelta(days=3)
    newer = fetched_at + timedelta(hours=1)
    truthful = truthfulness(200, 199)
    liar = truthfulness(200, 100)
    assert may_skip(lastmod=older, last_fetched_at=fetched_at, truthfulness=truthful, now=NOW)
    assert not may_skip(lastmod=newer, last_fetched_at=fetched_at, truthfulness=truthful, now=NOW)
    assert not may_skip(lastmod=older, last_fetched_at=fetched_at, truthfulness=liar, now=NOW)
    assert not may_skip(lastmod=older, last_fetched_at=fetched_at, truthfulness=None, now=NOW)
    assert not may_skip(lastmod=None, last_fetched_at=fetched_at, truthfulness=truthful, now=NOW)
    assert not may_skip(lastmod=older, last_fetched_at=None, truthfulness=truthful, now=NOW)
    # a page not verified for longer than max_age_s is fetched even on a truthful host
    assert not may_skip(lastmod=older - timedelta(days=60), last_fetched_at=NOW - timedelta(days=40),
                        truthfulness=truthful, now=NOW)


def test_newer_than_copy_compares_on_the_servers_clock():
    copy = "Mon, 10 Jun 2024 09:30:00 GMT"
    assert newer_than_copy(datetime(2024, 6, 10, 9, 31, tzinfo=UTC), copy) is True
    assert newer_than_copy(datetime(2024, 6, 10, 9, 30, tzinfo=UTC), copy) is False
    assert newer_than_copy(datetime(2024, 6, 1, 8, 0), copy) is False  # naive: UTC
    # A date without a time is the end of that day: a change later that day is not "not newer".
    assert newer_than_copy(datetime(2024, 6, 10, tzinfo=UTC), copy) is True
    assert newer_than_copy(datetime(2024, 6, 9, tzinfo=UTC), copy) is False
    assert newer_than_copy(None, copy) is None
    assert newer_than_copy(datetime(2024, 6, 10, 9, 31, tzinfo=UTC), None) is None
    assert newer_than_copy(datetime(2024, 6, 10, 9, 31, tzinfo=UTC), "yesterday") is None
    # ... even one equal to a Last-Modified dated to the day: an edit later that day (a new ETag, the same date)
    # must not be skipped without a request (review: it was, for up to 30 days).
    assert newer_than_copy(datetime(2024, 6, 10, tzinfo=UTC), "Mon, 10 Jun 2024 00:00:00 GMT") is True


def test_a_304_contradicts_only_a_lastmod_surely_newer_than_our_copy():
    """A site that dates its lastmods at midnight, equal to (or an hour before) the Last-Modified it serves: its
    unchanged pages' 304s agree with the lastmod (a stranger's test saw each one asked again in full)."""
    midnight = datetime(2025, 12, 1, tzinfo=UTC)
    for served in ("Mon, 01 Dec 2025 00:00:00 GMT", "Mon, 01 Dec 2025 01:00:00 GMT"):
        assert not contradicts_304(midnight, NOW, served)
        assert not contradicts_304(midnight - timedelta(days=3), NOW, served)
        assert contradicts_304(midnight + timedelta(days=1), NOW, served)
    assert contradicts_304(datetime(2025, 12, 1, 1, 0, 1, tzinfo=UTC), NOW, "Mon, 01 Dec 2025 01:00:00 GMT")
    # No Last-Modified: our fetch time is the mark; no lastmod or no mark, no contradiction.
    assert contradicts_304(NOW + timedelta(seconds=1), NOW, None)
    assert not contradicts_304(NOW, NOW, None)
    assert not contradicts_304(None, NOW, "Mon, 01 Dec 2025 00:00:00 GMT")
    assert not contradicts_304(NOW, None, None)


def test_re_asks_without_answers_spend_the_probes():
    """A burst of contradicting 304s read before any re-ask's answer: ``REASK_PROBES`` are asked, not all."""
    assert all(reask_304(asked, 0, pending=asked) for asked in range(REASK_PROBES))
    assert not reask_304(REASK_PROBES, 0, pending=REASK_PROBES)
    assert not reask_304(REASK_PROBES + 40, 0, pending=REASK_PROBES + 40)
    # Once answers came, the share decides; this run's pending re-asks are no evidence either way.
    assert reask_304(REASK_PROBES + 5, REASK_PROBES, pending=5)
    assert not reask_304(REASK_PROBES, 0)
    assert reask_304(10, 5) and not reask_304(10, 4)


def test_lastmod_prediction_prefers_our_copys_last_modified_over_our_clock():
    # The site's clock lags ours by months: judged against our fetch time, every change would read "unchanged".
    fetched_at = NOW
    lastmod = datetime(2024, 1, 7, 3, 0, tzinfo=UTC)
    assert lastmod_predicts_change(lastmod, fetched_at) is False  # control: our clock says "not newer"
    assert lastmod_predicts_change(lastmod, fetched_at, "Sat, 06 Jan 2024 12:00:00 GMT") is True
    assert lastmod_predicts_change(lastmod, fetched_at, "Sun, 07 Jan 2024 03:00:00 GMT") is False
    assert lastmod_predicts_change(None, fetched_at, "Sun, 07 Jan 2024 03:00:00 GMT") is None
    assert not may_skip(lastmod=lastmod, last_fetched_at=fetched_at - timedelta(days=1), truthfulness=0.99,
                        now=NOW, copy_last_modified="Sat, 06 Jan 2024 12:00:00 GMT")
    assert may_skip(lastmod=lastmod, last_fetched_at=fetched_at - timedelta(days=1), truthfulness=0.99, now=NOW,
                    copy_last_modified="Sun, 07 Jan 2024 03:00:00 GMT")


def test_truthfulness_counts_announced_changes_so_a_lastmod_that_never_moves_is_not_trusted():
    # 1,000 pages, 50 changed: a lastmod that never moves "predicted" 950 of 1,000 right, but announced none of
    # the 50 changes; truthfulness counts only the changes.
    assert truthfulness(50, 0) == pytest.approx(1 / 52)
    assert truthfulness(50, 50) == pytest.approx(51 / 52)
    assert truthfulness(9, 9) is None  # too few changes seen to judge (default min_checks 10)


def test_spot_checks_are_a_stable_daily_sample_of_the_asked_share():
    urls = [f"https://h.example/p/{i}" for i in range(4_000)]
    picked = [u for u in urls if spot_check(u, NOW, 0.05)]
    assert 0.035 < len(picked) / len(urls) < 0.065
    assert picked == [u for u in urls if spot_check(u, NOW + timedelta(hours=3), 0.05)]  # same day, same sample
    assert picked != [u for u in urls if spot_check(u, NOW + timedelta(days=1), 0.05)]  # another day, another
    assert not any(spot_check(u, NOW, 0.0) for u in urls)
    assert all(spot_check(u, NOW, 1.0) for u in urls)


def test_may_skip_accepts_naive_datetimes_as_utc():
    assert may_skip(lastmod=datetime(2024, 6, 1), last_fetched_at=datetime(2024, 6, 9), truthfulness=0.99, now=NOW)


# --- classify_outcome ---------------------------------------------------------------------------------------


def test_304_is_unchanged_and_lengthens_the_interval():
    out = classify_outcome(claimed(content_hash="h1", etag='"e"', revisit_s=86_400.0), result(304), None,
                           settings=SETTINGS, now=NOW)
    assert (out.state, out.changed, out.store_page, out.expand_links) == (UrlState.DONE, False, False, False)
    assert out.revisit_s == 129_600.0
    assert out.next_fetch_at == due_at(NOW, 129_600.0, SETTINGS.revisit)
    assert out.content_hash == "h1"
    assert out.counter == "not_modified"


def test_a_304_to_a_request_without_validators_is_a_retried_failure_never_done():
    out = classify_outcome(claimed(content_hash="h1", revisit_s=86_400.0), result(304), None, settings=SETTINGS,
                           now=NOW)
    assert (out.state, out.error_class, out.retry, out.store_page) == (
        UrlState.FAILED, ErrorClass.UNASKED_304, True, False)
    assert out.next_fetch_at is not None and out.next_fetch_at > NOW
    # Control: the same 304 to a conditional request is "not modified".
    asked = classify_outcome(claimed(content_hash="h1", last_modified="Mon, 05 Jan 2026 00:00:00 GMT"), result(304),
                             None, settings=SETTINGS, now=NOW)
    assert (asked.state, asked.counter) == (UrlState.DONE, "not_modified")


def test_200_same_hash_is_unchanged_new_hash_is_changed():
    same = classify_outcome(claimed(content_hash="h1", revisit_s=86_400.0), result(200, body=b"x"), "h1",
                            settings=SETTINGS, now=NOW)
    # The payload still goes to the store, which keeps it as a version when its digest is new (a restyle).
    assert (same.state, same.changed, same.store_page, same.counter) == (UrlState.DONE, False, True, "text_same")
    assert not same.expand_links
    new = classify_outcome(claimed(content_hash="h1", revisit_s=86_400.0), result(200, body=b"x"), "h2",
                           settings=SETTINGS, now=NOW)
    assert (new.state, new.changed, new.store_page, new.expand_links) == (UrlState.DONE, True, True, True)
    assert new.revisit_s == 43_200.0
    first = classify_outcome(claimed(changefreq="weekly"), result(200, body=b"x"), "h1", settings=SETTINGS, now=NOW)
    assert first.changed
    assert first.store_page
    assert first.revisit_s == 7 * 86_400.0


@pytest.mark.parametrize("status", [404, 410])
def test_404_410_are_gone(status):
    out = classify_outcome(claimed(content_hash="h"), result(status, error_class=ErrorClass.HTTP_4XX), None,
                           settings=SETTINGS, now=NOW)
    assert out.state is UrlState.GONE
    assert not out.store_page
    # Not promoted like a revisit: the time from which a source naming it again may have it asked, doubling.
    assert out.revisit_s == SETTINGS.revisit.default_s and out.next_fetch_at is not None and out.next_fetch_at > NOW
    again = classify_outcome(claimed(content_hash="h", revisit_s=out.revisit_s), result(status), None,
                             settings=SETTINGS, now=NOW)
    assert again.revisit_s == min(2 * out.revisit_s, SETTINGS.revisit.max_s)


def test_permanent_move_records_the_target():
    moved = result(200, final_url="https://h.example/b-1", redirects=("https://h.example/b-1",),
                   redirect_statuses=(301,), body=b"x")
    out = classify_outcome(claimed(), moved, "h1", settings=SETTINGS, now=NOW)
    assert out.moved_to == "https://h.example/b-1"
    assert out.state is UrlState.DONE
    assert not out.store_page
    assert out.content_hash is None
    temporary = result(200, final_url="https://h.example/b-1", redirects=("https://h.example/b-1",),
                       redirect_statuses=(302,), body=b"x")
    out = classify_outcome(claimed(), temporary, "h1", settings=SETTINGS, now=NOW)
    assert out.moved_to is None
    assert out.store_page


def test_a_permanent_redirect_left_unfollowed_is_a_move_like_one_followed():
    """Its target was read this run: the 301 alone says where the URL went (same state, interval and target)."""
    target = "https://h.example/b-1"
    hop = {"final_url": target, "redirects": (target,), "redirect_statuses": (301,)}
    followed = classify_outcome(claimed(), result(200, body=b"x", **hop), "h1", settings=SETTINGS, now=NOW)
    unfollowed = classify_outcome(claimed(), result(301, unfollowed=True, **hop), None, settings=SETTINGS, now=NOW)
    assert unfollowed == followed and unfollowed.moved_to == target
    # The same answer come to an end there (a 301 the fetch did not or could not follow) is no move.
    stuck = classify_outcome(claimed(), result(301, **hop), None, settings=SETTINGS, now=NOW)
    assert stuck.moved_to is None and stuck.state is UrlState.FAILED


@pytest.mark.parametrize("error_class", [ErrorClass.TIMEOUT, ErrorClass.CONNECT, ErrorClass.HTTP_5XX,
                                         ErrorClass.HTTP_429])
def test_retryable_failures_requeue_until_max_attempts(error_class):
    failing = result(503 if error_class is ErrorClass.HTTP_5XX else None, error_class=error_class, error="boom")
    first = classify_outcome(claimed(attempts=0), failing, None, settings=SETTINGS, now=NOW)
    assert first.state is UrlState.FAILED  # the store queues it again at next_fetch_at (attempts < max)
    assert first.retry
    assert first.next_fetch_at is not None
    assert first.next_fetch_at > NOW
    assert first.error_class is error_class
    last = classify_outcome(claimed(attempts=SETTINGS.politeness.max_attempts - 1), failing, None,
                            settings=SETTINGS, now=NOW)
    assert last.state is UrlState.FAILED
    assert not last.retry
    assert last.next_fetch_at is None


def test_retry_after_is_honoured_and_capped():
    politeness = SETTINGS.politeness
    assert retry_delay_s(0, None, politeness) == politeness.backoff_base_s
    assert retry_delay_s(2, None, politeness) == 4 * politeness.backoff_base_s
    assert retry_delay_s(0, 120.0, politeness) == 120.0
    assert retry_delay_s(0, 1e9, politeness) == politeness.backoff_max_s
    out = classify_outcome(claimed(), result(429, error_class=ErrorClass.HTTP_429, retry_after_s=90.0), None,
                           settings=SETTINGS, now=NOW)
    assert out.next_fetch_at == NOW + timedelta(seconds=90)


@pytest.mark.parametrize(
    ("error_class", "state"),
    [(ErrorClass.ROBOTS_DISALLOWED, UrlState.DISALLOWED), (ErrorClass.OUT_OF_SCOPE, UrlState.SKIPPED),
     (ErrorClass.TRAP, UrlState.SKIPPED), (ErrorClass.TOO_LARGE, UrlState.FAILED),
     (ErrorClass.BAD_CONTENT_TYPE, UrlState.FAILED), (ErrorClass.HTTP_4XX, UrlState.FAILED)],
)
def test_final_failures(error_class, state):
    out = classify_outcome(claimed(), result(403 if error_class is ErrorClass.HTTP_4XX else 200,
                                             error_class=error_class), None, settings=SETTINGS, now=NOW)
    assert out.state is state
    assert not out.retry
    assert out.error_class is error_class
    if state is UrlState.FAILED:  # not retryable now: tried again only after the longest revisit interval
        assert out.next_fetch_at == NOW + timedelta(seconds=SETTINGS.revisit.max_s)


def test_parked_host_is_requeued_without_an_attempt():
    parked = ErrorClass("parked") if "parked" in ErrorClass._value2member_map_ else None
    if parked is None:
        pytest.skip("ErrorClass.PARKED not in records.py yet")
    out = classify_outcome(claimed(attempts=SETTINGS.politeness.max_attempts), result(None, error_class=parked),
                           None, settings=SETTINGS, now=NOW)
    assert out.state is UrlState.QUEUED
    assert out.next_fetch_at is not None


def test_a_hook_failure_stores_the_page_labelled_with_the_hooks_error():
    """The request and the page are good (stored, links followed, revisited as usual); only the hook failed."""
    out = classify_outcome(claimed(), result(200, body=b"x"), "h1", settings=SETTINGS, now=NOW,
                           hook_error="extractor hook raised KeyError: 'x'")
    good = classify_outcome(claimed(), result(200, body=b"x"), "h1", settings=SETTINGS, now=NOW)
    assert out.state is UrlState.DONE and out.store_page and out.expand_links and out.counter == "hook_failed"
    assert out.error_class is ErrorClass.HOOK_FAILED
    assert out.error == "extractor hook raised KeyError: 'x'"
    assert (out.next_fetch_at, out.revisit_s, out.content_hash) == (good.next_fetch_at, good.revisit_s, "h1")


def test_duplicate_is_not_expanded():
    out = classify_outcome(claimed(), result(200, body=b"x"), "h1", settings=SETTINGS, now=NOW, duplicate_of=3)
    assert out.state is UrlState.DUPLICATE
    assert not out.expand_links
    assert not out.store_page
