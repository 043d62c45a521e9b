"""A host turn cancelled before its answers were recorded loses none of them (stop 39): the answer's record is
deferred until the worker's next request (``_HostRun._settle``), and a turn cancelled meanwhile (a store fault, a
stopped task) closed the record unrun, so the answer was dropped ("coroutine 'ExtractWork._record' was never
awaited") and the retry or rerun asked that page again. Now ``ExtractWork`` keeps every answer until its record has
put it in the writer, and extraction's wind-down records the rest without waiting on the store: written then, or
kept in the cycle's state for the retry.

Forced, not timed: one worker on one host, a claim batch of ``BATCH``. The claim asked ahead as the batch's last
job goes out fails (a real lock on the SQLite file, or a bug elsewhere), but only once the last answer is in: the
two are woken by one event, the failing claim first, so the turn is cancelled before that answer's record task has
taken its first step, as it was when the defect showed. Then the task's retry (given the same cycle state) or a
rerun (a new one) follows."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import warnings
from collections import Counter
from typing import Any

import pytest

from harvester import phases
from harvester.errors import StoreError
from harvester.frontier import FrontierStore
from harvester.phases.cycle_state import CycleState
from harvester.phases.extract_host import ExtractWork
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

BATCH = 4
WAIT_S = 60.0  # bounds on waits for events, never expected to run out


@pytest.mark.parametrize("ending", ["store fault, then the retry", "a bug elsewhere, then a rerun"])
async def test_answers_received_before_a_cancelled_turn_are_stored_once_and_not_asked_again(
    make_web, tmp_path, monkeypatch, ending
):
    web = make_web([HostSpec("a", pages=12)], seed=39)
    path = tmp_path / "cancel.db"
    settings = Settings.load(database_url=f"sqlite:///{path}").with_overrides(
        **{"store.claim_batch": BATCH, "store.sqlite_busy_timeout_s": 0.2})
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=1)
    details = set(web.truth["a"].allowed_detail_urls())
    assert len(details) > 2 * BATCH  # the control: the first attempt ends with work left
    store_fault = ending.startswith("store fault")
    lock = sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    failing, go = asyncio.Event(), asyncio.Event()
    answers = 0
    claims = 0
    original_done, original_claim = ExtractWork.done, ExtractWork.claim

    async def claim(self: ExtractWork, host: str, n: int) -> Any:
        nonlocal claims
        claims += 1
        if claims != 2:
            return await original_claim(self, host, n)
        # The claim asked ahead as the batch's last job went out: its fault is real (another writer holds the
        # file) or a bug's, and it surfaces only once that job's answer is in.
        fault: BaseException = RuntimeError("a bug elsewhere ends the run")
        if store_fault:
            await asyncio.to_thread(lock.execute, "BEGIN EXCLUSIVE")
            with pytest.raises(StoreError) as met:
                await original_claim(self, host, n)
            fault = met.value
        failing.set()
        await go.wait()
        raise fault

    async def done(self: ExtractWork, job: Any, result: Any) -> Any:
        nonlocal answers
        answers += 1
        if answers == BATCH:  # the batch's last answer: the claim's fault is woken first, then this worker
            assert await asyncio.wait_for(failing.wait(), WAIT_S)
            go.set()
            await asyncio.sleep(0)
        return await original_done(self, job, result)

    monkeypatch.setattr(ExtractWork, "claim", claim)
    monkeypatch.setattr(ExtractWork, "done", done)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        web.clear_records()
        cycle = CycleState()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                with pytest.raises(StoreError if store_fault else RuntimeError):
                    await phases.extract(store, settings, profile, cycle=cycle)
            finally:
                if lock.in_transaction:
                    lock.execute("COMMIT")
            gc.collect()
        first = len(web.records())
        # The task's retry, given the cycle's state; or a rerun, a new cycle (nothing kept in memory).
        await phases.extract(store, settings, profile, cycle=cycle if store_fault else CycleState())
        states = store.url_states()
        stored = Counter(page.url for page in store.iter_pages())
    lock.close()

    assert first == BATCH  # the control: the first attempt received exactly the first batch's answers
    asked = Counter(record.url for record in web.records())
    assert {url: n for url, n in asked.items() if n > 1} == {}  # no page asked twice
    assert {url for url in details if states[url][0] != "done"} == set()
    assert {url: stored[url] for url in details if stored[url] != 1} == {}  # each stored exactly once
    assert [str(w.message) for w in seen if "never awaited" in str(w.message)] == []


async def test_a_record_cancelled_while_its_hook_runs_does_not_run_the_hook_again(make_web, sqlite_url, monkeypatch):
    """The hook runs in the extraction thread, which a cancel cannot stop: the record awaiting it was cancelled, the
    answer stayed unrecorded, and the wind-down parsed it again, running the hook a second time on the same answer
    (a hook that writes elsewhere wrote twice). Forced: the hook blocks on its first page until the cancelled run's
    wind-down has begun (``record_unrecorded``), so the cancel lands while it runs."""
    import threading

    web = make_web([HostSpec("a", pages=6)], seed=40)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), per_host_limit=1)
    entered, release = threading.Event(), threading.Event()
    calls: Counter[str] = Counter()
    first: list[str] = []

    def hook(page: Any) -> dict[str, int]:
        calls[page.url] += 1
        if not first:
            first.append(page.url)
            entered.set()
            assert release.wait(WAIT_S)
        return {"words": len(page.main_text.split())}

    original = ExtractWork.record_unrecorded

    async def record_unrecorded(self: ExtractWork) -> int:
        release.set()  # the turn is over, its record cancelled: the hook it left running may end now
        return await original(self)

    monkeypatch.setattr(ExtractWork, "record_unrecorded", record_unrecorded)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        run = asyncio.create_task(phases.extract(store, settings, profile, extractor=hook))
        assert await asyncio.to_thread(entered.wait, WAIT_S)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert release.is_set()  # the control: the cancel landed while the hook ran
        stored = [page for page in store.iter_pages() if page.url == first[0]]
    assert calls[first[0]] == 1, calls
    assert len(stored) == 1  # the answer was kept, recorded by the wind-down
