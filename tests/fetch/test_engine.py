"""The polite engine against the test web: limits, pacing, Retry-After, AIMD, redirects re-checked, host turns.

Every invariant is read from the server's own request log (``harvester.testing.record``), not from the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import time
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from harvester.errors import LeaseLost
from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import HostWork, Job, run_hosts
from harvester.records import ErrorClass, FetchResult, HostPolicy, origin_of
from harvester.settings import Settings
from harvester.testing import HostSpec, RobotsSpec
from harvester.testing.record import count_status, max_in_flight, min_interval

SMALL = (800, 1200)  # page bytes: these tests are about requests, not content

async def log_of(web):
    """The server's request log once it has caught up: in thread mode the server appends a record just after
    writing the response, so a client that reads the log at once can miss the last one (the sleep only yields
    the GIL and the loop; nothing here is timed)."""
    await asyncio.sleep(0.02)
    return web.records()



def settings(**overrides) -> Settings:
    # The test web's address (127.0.0.1) past the address policy: these clients have no seeds to allow it by.
    return Settings().with_overrides(**{"http.allow_addresses": ("127.0.0.1",), **overrides})


class ListWork(HostWork):
    """HostWork over in-memory lists; 429s are requeued (as ``phases.extract_host`` does), everything else is final."""

    def __init__(self, urls: Sequence[str], *, requeue_429: bool = True, lease_lost_host: str | None = None) -> None:
        self.queues: dict[str, deque[Job]] = defaultdict(deque)
        for url in urls:
            host = origin_of(url)
            self.queues[host].append(Job(url=url, host=host))
        self.results: list[tuple[Job, FetchResult]] = []
        self.requeue_429 = requeue_429
        self.lease_lost_host = lease_lost_host
        self.claims: Counter[str] = Counter()
        self.on_done = None

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        self.claims[host] += 1
        queue = self.queues[host]
        return [queue.popleft() for _ in range(min(n, len(queue)))]

    async def done(self, job: Job, result: FetchResult) -> None:
        self.results.append((job, result))
        if self.on_done is not None:
            self.on_done(job, result)
        if job.host == self.lease_lost_host:
            raise LeaseLost(f"lease on {job.host} taken by another worker")
        if result.error_class is ErrorClass.HTTP_429 and self.requeue_429:
            self.queues[job.host].append(job)

    async def hosts(self) -> Sequence[str]:
        return [h for h, q in self.queues.items() if q]


def urls_of(web, name: str, n: int | None = None) -> list[str]:
    urls = web.truth[name].allowed_detail_urls()
    return urls if n is None else list(itertools.islice(itertools.cycle(urls), n))


async def test_no_host_is_ever_above_its_limit(make_web):
    web = make_web([HostSpec(n, pages=40, latency_s=0.01, page_bytes=SMALL) for n in "abc"])
    work = ListWork([u for n in "abc" for u in urls_of(web, n)])
    async with PoliteClient(settings(), per_host_limit=3) as client:
        stats = await run_hosts(client, work, max_active_hosts=3)
    records = (await log_of(web))
    for name in "abc":
        assert max_in_flight(records, name) <= 3
    assert max(max_in_flight(records, n) for n in "abc") == 3  # control: the limit was reached, not just respected
    assert stats.hosts_served == 3
    assert all(r.ok for _, r in work.results)
    assert len(work.results) == sum(len(urls_of(web, n)) for n in "abc")


@pytest.mark.parametrize("delay", [0.05, 0.0])
async def test_crawl_delay_is_honoured(make_web, delay):
    robots = RobotsSpec(crawl_delay=delay) if delay else RobotsSpec()
    web = make_web([HostSpec("a", pages=12, page_bytes=SMALL, robots=robots)])
    work = ListWork(urls_of(web, "a"))
    async with PoliteClient(settings(**{"politeness.per_host_start": 4})) as client:
        await run_hosts(client, work, max_active_hosts=1)
    interval = min_interval((await log_of(web)), "a")
    assert interval is not None
    if delay:
        assert interval >= delay
    else:  # control: without a crawl-delay the same run starts requests closer together
        assert interval < 0.05


async def test_a_200ms_host_does_not_slow_the_fast_ones(make_web):
    web = make_web([HostSpec("slow", pages=40, latency_s=2.0, page_bytes=SMALL)]
                   + [HostSpec(n, pages=60, latency_s=0.005, page_bytes=SMALL) for n in ("f1", "f2")])
    work = ListWork(urls_of(web, "slow") + urls_of(web, "f1") + urls_of(web, "f2"))
    fast = {web.origin("f1"), web.origin("f2")}
    remaining = {h: len(work.queues[h]) for h in fast}
    finished = asyncio.Event()

    def on_done(job: Job, _result: FetchResult) -> None:
        if job.host in remaining:
            remaining[job.host] -= 1
            if not any(remaining.values()):
                finished.set()

    work.on_done = on_done
    async with PoliteClient(settings(), per_host_limit=2) as client:
        runner = asyncio.create_task(run_hosts(client, work, max_active_hosts=3))
        await asyncio.wait_for(finished.wait(), 120)
        slow_done = sum(1 for job, _ in work.results if job.host == web.origin("slow"))
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner
    # 120 fast pages at 2 in flight and 5 ms take ~0.3 s: the slow host (2 in flight, 2 s an answer: 40 s for its
    # 40) finished only a few meanwhile. A shared queue with per-host semaphores would have held the fast hosts
    # behind it, to the end of its 40. Its answers are 2 s (not 0.2 s) so that a machine at a load of 25, where
    # the fast hosts' 120 pages took 2-4 s, is still far inside the bound (seed43 saw 16-21 of 40 at 0.2 s).
    assert slow_done <= 20


async def test_retry_after_is_honoured(make_web):
    web = make_web([HostSpec("a", pages=40, latency_s=0.02, page_bytes=SMALL, max_in_flight=2, retry_after_s=0.3)])
    work = ListWork(urls_of(web, "a", 60))
    async with PoliteClient(settings(), per_host_limit=4) as client:
        while await work.hosts():  # requeued 429s wait for the next round, as in phases.extract
            await run_hosts(client, work, max_active_hosts=1)
    records = sorted((await log_of(web)), key=lambda r: r.start)
    throttled = [r for r in records if r.status == 429]
    assert throttled  # control: the host did push back
    for rec in throttled:
        # The server logs when it begins a request, not when the client sent it: requests already on their way when
        # the 429 went out (at most the limit's other 3) may be logged after it, later still under load (a 5 ms
        # margin failed at a load of 8). A client that ignored Retry-After would send ~40 in its 0.3 s.
        early = [r for r in records if rec.end < r.start < rec.end + 0.3]
        assert len(early) <= 3, (rec, early[:5])
    assert sum(1 for _, r in work.results if r.ok) == 60  # every 429 was requeued and fetched later


async def test_aimd_settles_at_3_on_a_host_that_answers_429_above_3(make_web):
    web = make_web([HostSpec("a", pages=50, latency_s=0.005, page_bytes=SMALL, max_in_flight=3, retry_after_s=0.02)])
    origin = web.origin("a")
    work = ListWork(urls_of(web, "a", 600))
    overrides = {"politeness.per_host_start": 2, "politeness.max_per_host_limit": 8}
    async with PoliteClient(settings(**overrides)) as client:
        limits: list[int] = []
        work.on_done = lambda _job, _res: limits.append(client.gate(origin).limit)
        while await work.hosts():
            await run_hosts(client, work, max_active_hosts=1)
    records = sorted((await log_of(web)), key=lambda r: r.start)
    first_429 = next(i for i, r in enumerate(records) if r.status == 429)
    after = records[first_429 + 20:]
    share = sum(1 for r in after if r.status == 429) / len(after)
    assert share < 0.01
    settled = limits[len(limits) // 4:]
    assert Counter(settled).most_common(1)[0][0] == 3
    assert count_status(records, 200) >= 600


async def test_redirect_to_a_disallowed_url_is_not_followed(make_web):
    web = make_web([HostSpec("a", pages=5, hostile=True, robots=RobotsSpec(disallow=("/hostile/redirect-chain/1",)))])
    async with PoliteClient(settings()) as client:
        result = await client.fetch(web.url("a", "/hostile/redirect-chain/3"))
        control = await client.fetch(web.url("a", "/hostile/redirect-chain/0"))
    assert result.error_class is ErrorClass.ROBOTS_DISALLOWED
    assert result.redirects == (web.url("a", "/hostile/redirect-chain/2"),)
    paths = [r.path for r in (await log_of(web))]
    assert "/hostile/redirect-chain/1" not in paths
    assert "/hostile/redirect-chain/2" in paths
    assert control.ok


async def test_redirect_out_of_scope_is_not_followed_and_hops_are_canonicalized(make_web):
    web = make_web([HostSpec("a", pages=5, hostile=True)])
    seen: list[str] = []

    def canonicalize(url: str) -> str:
        seen.append(url)
        return url

    async with PoliteClient(settings(), in_scope=lambda url: not url.endswith("/1"),
                            canonicalize=canonicalize) as client:
        result = await client.fetch(web.url("a", "/hostile/redirect-chain/2"))
    assert result.error_class is ErrorClass.OUT_OF_SCOPE
    assert seen == [web.url("a", "/hostile/redirect-chain/1")]
    assert "/hostile/redirect-chain/1" not in [r.path for r in (await log_of(web))]


async def test_drip_page_stops_at_the_total_deadline(make_web):
    web = make_web([HostSpec("a", pages=5, hostile=True)])
    async with PoliteClient(settings(**{"http.timeout_s": 1.0})) as client:
        result = await client.fetch(web.url("a", "/hostile/drip"))
    assert result.error_class is ErrorClass.TIMEOUT
    assert 1.0 <= result.elapsed_s <= 1.5


async def test_huge_body_stops_at_the_cap_and_the_host_keeps_working(make_web):
    web = make_web([HostSpec("a", pages=5, hostile=True, page_bytes=SMALL)])
    async with PoliteClient(settings(**{"http.max_body_bytes": 1 << 20})) as client:
        huge = await client.fetch(web.url("a", "/hostile/huge-chunked"))
        after = await client.fetch(urls_of(web, "a")[0])
    assert huge.error_class is ErrorClass.TOO_LARGE
    assert huge.bytes_read <= (1 << 20) + 256 * 1024
    assert after.ok


async def test_requests_carry_the_configured_user_agent_and_its_robots_group(make_web):
    web = make_web([HostSpec("a", pages=10, page_bytes=SMALL,
                             robots=RobotsSpec(agent_groups={"custombot": ("/story/",)}))])
    urls = urls_of(web, "a")
    async with PoliteClient(settings(), user_agent="custombot/2.0 (+https://example.invalid/bot)") as client:
        results = await asyncio.gather(*(client.fetch(u) for u in urls))
    assert {r.user_agent for r in (await log_of(web))} == {"custombot/2.0 (+https://example.invalid/bot)"}
    refused = [r for r in results if r.error_class is ErrorClass.ROBOTS_DISALLOWED]
    assert refused
    assert all("/story/" in r.url for r in refused)


async def test_at_most_max_active_hosts_are_served_at_once_and_all_get_turns(make_web):
    names = [f"h{i}" for i in range(6)]
    web = make_web([HostSpec(n, pages=8, latency_s=0.01, page_bytes=SMALL) for n in names])
    work = ListWork([u for n in names for u in urls_of(web, n)])
    async with PoliteClient(settings()) as client:
        stats = await run_hosts(client, work, max_active_hosts=2)
    records = (await log_of(web))
    for rec in records:
        active = {r.host for r in records if r.start <= rec.start < r.end or r.start <= rec.start <= r.end}
        assert len(active) <= 2
    assert stats.hosts_served == 6
    assert {r.host for r in records} == set(names)
    assert all(r.ok for _, r in work.results)


async def test_lease_lost_stops_that_host_only(make_web):
    web = make_web([HostSpec(n, pages=30, latency_s=0.005, page_bytes=SMALL) for n in "ab"])
    work = ListWork(urls_of(web, "a") + urls_of(web, "b"), lease_lost_host=web.origin("a"))
    async with PoliteClient(settings(), per_host_limit=2) as client:
        stats = await run_hosts(client, work, max_active_hosts=2)
    a_requests = [r for r in (await log_of(web)) if r.host == "a" and r.path != "/robots.txt"]
    assert len(a_requests) <= 2  # the in-flight ones at most
    assert stats.lease_lost == [web.origin("a")]
    assert sum(1 for job, r in work.results if job.host == web.origin("b") and r.ok) == len(urls_of(web, "b"))


async def test_a_failing_host_is_parked_and_its_jobs_handed_back(make_web):
    web = make_web([HostSpec("a", pages=5, hostile=True)])
    work = ListWork([web.url("a", f"/hostile/fail-once?n={i}") for i in range(30)])  # each answers 500 first
    overrides = {"politeness.park_after_failures": 3, "politeness.backoff_base_s": 0.01}
    async with PoliteClient(settings(**overrides), per_host_limit=1) as client:
        stats = await run_hosts(client, work, max_active_hosts=1)
        assert client.parked(web.origin("a")) is not None
    classes = Counter(r.error_class for _, r in work.results)
    assert len(work.results) == 30  # every claimed job came back through done()
    assert classes[ErrorClass.HTTP_5XX] == 3
    assert classes[ErrorClass.PARKED] == 27
    assert len([r for r in (await log_of(web)) if "fail-once" in r.path]) == 3
    assert stats.parked == {web.origin("a"): client.parked(web.origin("a"))} or stats.parked


async def test_an_unreachable_host_gets_its_few_robots_attempts_and_nothing_else():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = ListWork([f"http://127.0.0.1:{port}/p{i}" for i in range(30)])
    # robots.connect_attempts (3) tries, the retry wait shortened: what is asserted is how many, not when
    async with PoliteClient(settings(**{"robots.connect_retry_s": 0.01})) as client:
        await run_hosts(client, work, max_active_hosts=1)
        diag = client.diagnostics()[f"http://127.0.0.1:{port}"]
    # RFC 9309 §2.3.1.4: unreachable robots.txt means disallow all (retried after robots.error_cache_s): the host
    # is parked for it, its URLs deferred (no request), not refused by robots.txt
    assert {r.error_class for _, r in work.results} == {ErrorClass.PARKED}
    assert diag.parked_reason == "robots.txt unavailable (connect): nothing is requested until it answers"
    assert diag.errors.get("connect") == 3 and "robots_disallowed" not in diag.errors, diag.errors


async def test_503_robots_nothing_else_is_fetched_from_that_host(make_web):
    web = make_web([HostSpec("a", pages=20, page_bytes=SMALL, robots=RobotsSpec(status=503))])
    work = ListWork(web.truth["a"].detail_urls())
    assert len(work.queues[web.origin("a")]) == 20
    async with PoliteClient(settings()) as client:
        await run_hosts(client, work, max_active_hosts=1)
    assert [r.path for r in (await log_of(web))] == ["/robots.txt"]
    assert {r.error_class for _, r in work.results} == {ErrorClass.PARKED}  # deferred, not refused
    assert len(work.results) == 20


async def test_diagnostics_report_counts_and_progress(make_web):
    web = make_web([HostSpec("a", pages=20, page_bytes=SMALL)])
    work = ListWork(urls_of(web, "a"))
    seen: list[dict] = []
    async with PoliteClient(settings()) as client:
        await run_hosts(client, work, max_active_hosts=1, on_progress=seen.append)
        diag = client.diagnostics()[web.origin("a")]
    assert seen
    assert diag.fetched == len(urls_of(web, "a")) + 1  # + robots.txt
    assert 1 <= diag.peak_in_flight <= diag.limit
    assert diag.in_flight == 0
    assert diag.as_dict()["errors"] == {}


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http://[::1/broken", "/relative", "javascript:alert(1)"])
async def test_unfetchable_urls_are_refused_as_values(url):
    async with PoliteClient(settings()) as client:
        result = await client.fetch(url)
    assert result.error_class is ErrorClass.OUT_OF_SCOPE
    assert result.status is None


async def test_a_persisted_back_off_is_honoured_by_the_next_client(make_web):
    web = make_web([HostSpec("a", pages=5, latency_s=0.2, page_bytes=SMALL, max_in_flight=1, retry_after_s=30)])
    origin = web.origin("a")
    urls = urls_of(web, "a")
    # Adaptive limits (per_host_start 2): a site's fixed per_host_limit is never lowered, nor replaced by a learned one.
    async with PoliteClient(settings()) as first:
        results = await asyncio.gather(*(first.fetch(u) for u in urls[:2]))  # two at once, 200 ms each
        policy = first.host_policy(origin)
    assert any(r.error_class is ErrorClass.HTTP_429 for r in results)
    assert policy.blocked_until is not None
    async with PoliteClient(settings()) as rerun:
        rerun.apply_policy(policy)
        gate = rerun.gate(origin)
        assert gate.wait_s(time.monotonic()) > 20  # still blocked: no request before it passes
        assert gate.limit == 1


async def test_a_persisted_park_holds_until_its_end_and_then_lifts():
    origin = "http://127.0.0.1:9"  # nothing is fetched here: only the gate is read
    now = datetime.now(UTC)
    parked = HostPolicy(origin=origin, parked_reason="Retry-After 3600s exceeds backoff_max_s 300s",
                        blocked_until=now + timedelta(hours=1), failures=2, concurrency_limit=1)
    async with PoliteClient(settings()) as client:
        client.apply_policy(parked)
        assert client.parked(origin) == parked.parked_reason
        result = await client.fetch(origin + "/page")
        assert result.error_class is ErrorClass.PARKED and result.status is None  # refused, no request
        saved = client.host_policy(origin)  # what this run writes back keeps the reason and the end
        assert saved.parked_reason == parked.parked_reason
        assert saved.blocked_until is not None and abs((saved.blocked_until - parked.blocked_until).total_seconds()) < 1
    async with PoliteClient(settings()) as client:
        client.apply_policy(replace(parked, blocked_until=now - timedelta(seconds=1)))  # the park ran out
        assert client.parked(origin) is None
        gate = client.gate(origin)
        assert gate.wait_s(time.monotonic()) == 0.0
        assert (gate.limit, gate.failures) == (1, 2)  # the learned limit and the failure count carry over
        assert gate.safe_limit == 1  # learned under trouble: probing above it waits as after a 429
    async with PoliteClient(settings()) as client:
        client.apply_policy(replace(parked, blocked_until=None))  # a park with no end is one run's verdict
        assert client.parked(origin) is None


async def test_policy_changes_are_announced_as_they_happen(make_web):
    web = make_web([HostSpec("a", pages=5, latency_s=0.2, page_bytes=SMALL, max_in_flight=1, retry_after_s=30)])
    origin = web.origin("a")
    changes: list[str] = []
    async with PoliteClient(settings()) as client:  # adaptive from 2: a 429 halves it (a fixed limit stays)
        client.on_policy_change = changes.append
        await client.fetch(urls_of(web, "a")[0])
        assert changes == []  # control: a plain 200 changes nothing worth saving
        results = await asyncio.gather(*(client.fetch(u) for u in urls_of(web, "a")[1:3]))  # two at once
        policy = client.host_policy(origin)
    assert any(r.error_class is ErrorClass.HTTP_429 for r in results)
    assert changes and set(changes) == {origin}
    assert policy.blocked_until is not None and policy.concurrency_limit == 1


class SlowRecordWork(ListWork):
    """ListWork whose record of an answer (what extraction's parse and write are) is slow: it waits until the
    server has answered the host's next request, up to ``patience_s`` of loop turns. Handed back as
    ``HostWork.done``'s awaitable, or (``inline``) awaited inside ``done()`` as a parse there would be."""

    def __init__(self, web, urls: Sequence[str], *, inline: bool, patience_s: float) -> None:
        super().__init__(urls)
        self.web, self.order, self.inline, self.patience_s = web, list(urls), inline, patience_s
        self.next_sent_first: list[bool] = []

    async def done(self, job: Job, result: FetchResult):
        record = self._record(job)
        if self.inline:
            await record
            return None
        return record

    async def _record(self, job: Job) -> None:
        i = self.order.index(job.url)
        if i + 1 == len(self.order):
            return  # the last answer has no next request to race
        following = self.order[i + 1].removeprefix(job.host)
        seen = False
        for _ in range(int(self.patience_s / 0.01)):
            if any(r.path == following for r in self.web.records()):
                seen = True
                break
            await asyncio.sleep(0.01)
        self.next_sent_first.append(seen)
        self.results.append((job, FetchResult(url=job.url, final_url=job.url, status=200, started_at=0.0,
                                              elapsed_s=0.0)))


@pytest.mark.parametrize(("inline", "expected"), [(False, True), (True, False)])
async def test_the_next_request_goes_before_the_previous_answer_is_recorded(make_web, inline, expected):
    """One worker on one host: each answer's record (parse, extract, store) waits for the host's next request to
    have been answered. Deferred, every record sees it; recorded inside done() (the control), none can, since
    the worker sends nothing until done() returns. Order only: the patience is a bound, not a measure."""
    web = make_web([HostSpec("a", pages=6, page_bytes=SMALL)])
    urls = urls_of(web, "a", 6 if not inline else 2)
    work = SlowRecordWork(web, urls, inline=inline, patience_s=5.0 if not inline else 0.3)
    async with PoliteClient(settings(), per_host_limit=1) as client:
        await run_hosts(client, work, max_active_hosts=1)
    assert work.next_sent_first == [expected] * (len(urls) - 1)
    assert len(work.results) == len(urls) - 1  # every record ran before run_hosts returned
    assert [r.path for r in (await log_of(web)) if r.path != "/robots.txt"] == [
        u.removeprefix(web.origin("a")) for u in urls]


async def claim_out_as_job_starts(urls: list[str], job: int, *, batch: int) -> tuple[list[bool], ListWork]:
    """Run ``urls`` (one host) in claims of ``batch`` with two workers, the second claim held (bounded) until the
    ``job``-th job has started; returns whether a claim was out as that job started (``[True]``: the next claim was
    asked by then) and the work, its results in it."""
    work = ListWork(urls)
    real_claim = work.claim
    out = [0]
    started_job = asyncio.Event()
    overlapped: list[bool] = []

    async def claim(host: str, n: int) -> Sequence[Job]:
        out[0] += 1
        try:
            if work.claims[host] == 1:  # the second claim: held until the job has started
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(started_job.wait(), 30)
            return await real_claim(host, n)
        finally:
            out[0] -= 1

    work.claim = claim  # type: ignore[method-assign]
    started: list[str] = []
    async with PoliteClient(settings(**{"store.claim_batch": batch}), per_host_limit=2) as client:
        real_fetch = client.fetch

        async def fetch(url: str, **kwargs):  # type: ignore[no-untyped-def]
            started.append(url)
            if len(started) == job:
                # A claim asked ahead is a task: it runs on the loop's next turn (under load, both workers could
                # take their jobs in one turn, before it did: the check read "none out" in a fresh-clone run).
                await asyncio.sleep(0)
                overlapped.append(out[0] > 0)
                started_job.set()
            return await real_fetch(url, **kwargs)

        client.fetch = fetch  # type: ignore[method-assign]
        await run_hosts(client, work, max_active_hosts=1)
    return overlapped, work


async def test_the_next_claim_goes_while_the_queue_still_feeds_every_worker(make_web):
    """Issue 31: a host's queue was refilled only once it had run dry, so all its workers waited for the claim's
    database round trip (behind other hosts' writes under load) every ``store.claim_batch`` requests. Now the next
    claim is under way while the queue still holds a job for each worker: here the first batch's last job starts
    while the second claim is out (that claim waits for it, bounded; before, it was asked only after)."""
    web = make_web([HostSpec("a", pages=24, latency_s=0.01, page_bytes=SMALL)])
    urls = urls_of(web, "a")
    batch = 8
    overlapped, work = await claim_out_as_job_starts(urls, batch, batch=batch)  # the first batch's last job
    assert sorted(job.url for job, _ in work.results) == sorted(urls)
    assert overlapped == [True]


async def test_the_next_claim_goes_once_half_a_batch_is_left(make_web):
    """Issue 31: asked when one job per worker was left, the next claim had one wave of the host's requests to come
    back in; on the slow host (200 ms a wave) under load a claim behind other hosts' writes took longer, and every
    worker waited for it. Now it is asked once fewer than half a batch is left: here it is out when the first
    batch's fifth job of eight starts (before, only at the seventh)."""
    web = make_web([HostSpec("a", pages=24, latency_s=0.01, page_bytes=SMALL)])
    urls = urls_of(web, "a")
    batch = 8
    overlapped, work = await claim_out_as_job_starts(urls, batch // 2 + 1, batch=batch)  # the fifth job
    assert sorted(job.url for job, _ in work.results) == sorted(urls)
    assert overlapped == [True]


async def test_a_lease_that_lapses_while_the_request_waits_for_its_connection_sends_nothing(make_web):
    """The lease check is asked before the fetch and again once the connection is in hand: a process frozen (or
    starved) between the two, past its lease, sends nothing when it runs again (before, the request went out
    to a host another process had taken over: tests/phases/test_scaleout.py's frozen extractor)."""
    web = make_web([HostSpec("a", pages=4, page_bytes=SMALL)])
    first, second = urls_of(web, "a")[:2]
    asked: list[str] = []

    def lapses_after_the_first_ask() -> bool:
        asked.append("ask")
        return len(asked) == 1

    async with PoliteClient(settings(), per_host_limit=1) as client:
        assert (await client.fetch(first)).ok  # robots.txt and a page: a kept-alive connection is in the pool
        before = len(await log_of(web))
        with pytest.raises(LeaseLost):
            await client.fetch(second, hold=lapses_after_the_first_ask)
        assert asked == ["ask", "ask"]  # control: live before the fetch, lapsed once the connection was in hand
        assert (await client.fetch(first)).ok  # the host's slot and pool are still usable
    records = await log_of(web)
    assert [r.url for r in records[before:]] == [first]  # the second URL never reached the server


async def test_a_lease_that_lapses_at_a_redirect_hop_sends_no_further_hop(make_web):
    """The lease is asked again at each hop's connection: lapsed at the second, the fetch raises ``LeaseLost`` with
    the first hop sent and nothing more, and the worker hands the job back as unsent (``EngineStats.unsent``). Its
    next fetch asks the first hop again, and must: the lapsed owner may write nothing for the URL, and one hop's
    answer is no outcome of it (a temporary redirect names no lasting address; a permanent one is recorded as a
    move only with its target's answer, ``revisit.classify_outcome``)."""
    web = make_web([HostSpec("a", pages=4, hostile=True, page_bytes=SMALL)])
    asked: list[str] = []

    def lapses_at_the_second_hop() -> bool:
        asked.append("ask")
        return len(asked) <= 2  # before the fetch, at the first hop's connection; then lapsed

    async with PoliteClient(settings(), per_host_limit=1) as client:
        assert (await client.fetch(urls_of(web, "a")[0])).ok  # robots.txt read: only the chain's hops follow
        before = len(await log_of(web))
        with pytest.raises(LeaseLost):
            await client.fetch(web.url("a", "/hostile/redirect-chain/3"), hold=lapses_at_the_second_hop)
        assert asked == ["ask", "ask", "ask"]
    records = await log_of(web)
    assert [r.path for r in records[before:]] == ["/hostile/redirect-chain/3"]  # the first hop only


class HandedOverWork(ListWork):
    """Host ``a`` from the start; host ``b`` is offered (as discovery hands a host over) with ``a``'s first answer,
    whose record then waits, up to ``patience_s``, for ``b``'s turn to have begun (its first claim)."""

    def __init__(self, a: Sequence[str], b: Sequence[str], *, patience_s: float) -> None:
        super().__init__(a)
        self.b, self.patience_s = list(b), patience_s
        self.change = asyncio.Event()
        self.b_started = asyncio.Event()
        self.waited: list[bool] = []

    async def offered(self) -> None:
        await self.change.wait()
        self.change.clear()

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        if self.b and host == origin_of(self.b[0]):
            self.b_started.set()
        return await super().claim(host, n)

    async def done(self, job: Job, result: FetchResult) -> None:
        await super().done(job, result)
        if not self.waited:
            self.waited.append(False)
            for url in self.b:
                self.queues[origin_of(url)].append(Job(url=url, host=origin_of(url)))
            self.change.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.b_started.wait(), self.patience_s)
            self.waited[0] = self.b_started.is_set()


@pytest.mark.parametrize("wake", [True, False])
async def test_a_host_handed_over_while_others_are_served_starts_at_once(make_web, monkeypatch, wake):
    """Issue 31: a host discovery handed over waited for ``run_hosts``' next look (``HOSTS_POLL_S``, half a second:
    two and a half waves of a 200 ms host with its slots idle). ``offered`` wakes the look at the change. The poll
    is pushed out of reach here: without the wake (the control), ``b`` cannot start while ``a``'s turn waits for
    it, and starts only once ``a``'s turn has ended."""
    monkeypatch.setattr("harvester.fetch.workers.HOSTS_POLL_S", 3600.0)
    web = make_web([HostSpec(n, pages=4, page_bytes=SMALL) for n in "ab"])
    work = HandedOverWork(urls_of(web, "a", 2), urls_of(web, "b", 2), patience_s=60.0 if wake else 0.5)
    async with PoliteClient(settings(), per_host_limit=1) as client:
        await run_hosts(client, work, max_active_hosts=2, offered=work.offered if wake else None)
    assert work.waited == [wake]
    assert sorted(job.url for job, _ in work.results) == sorted(urls_of(web, "a", 2) + urls_of(web, "b", 2))


async def test_a_hosts_rate_is_over_its_serving_time_not_between_two_answers(serve):
    """Stranger 42: two requests sent together and answered together 0.4 s later were reported at 10166.58 req/s:
    the rate divided by the time from the first answer to the last. Here robots.txt takes 0.4 s, then both pages
    are sent together and answered together 0.4 s later: the host served 3 requests in at least 0.8 s."""
    from aiohttp import web

    arrived: list[str] = []
    both = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            await asyncio.sleep(0.4)
            return web.Response(status=404)
        arrived.append(request.path)
        if len(arrived) == 2:
            both.set()
        await both.wait()
        await asyncio.sleep(0.4)
        return web.Response(text="<html><body><p>a page</p></body></html>", content_type="text/html")

    origin = await serve(handler)
    async with PoliteClient(settings(), per_host_limit=2) as client:
        results = await asyncio.gather(client.fetch(f"{origin}/a"), client.fetch(f"{origin}/b"))
        diag = client.diagnostics()[origin]
    assert [r.status for r in results] == [200, 200]
    assert diag.peak_in_flight == 2  # control: sent together
    assert diag.fetched == 3  # control: robots.txt and the two pages
    assert 0 < diag.rate_per_s <= diag.fetched / 0.8, diag
