"""A store fault halts ``run_hosts`` without cancelling the requests in flight (CI, stop 42): a record that failed for
good (its completion write) cancelled every host's turn, requests the site had already received among them, and
the task's retry sent those again (``test_a_store_fault_mid_extraction_is_retried_and_repeats_no_fetch``: 1 in 7
runs). Now no request goes out after the fault, those in flight end and reach ``done``, then the fault is raised.
The interleaving is forced by the servers, not by timing: the slow host's answer is held until the fault is seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from harvester.errors import StoreError
from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import HostWork, Job, run_hosts
from harvester.records import FetchResult, origin_of
from harvester.settings import Settings


def settings() -> Settings:
    return Settings().with_overrides(**{"http.allow_addresses": ("127.0.0.1",)})


class FaultyWork(HostWork):
    """Two hosts' jobs. The fast host's first answer's record fails as a completion write that gave up does; each
    answer reaches ``done`` (kept, as extraction keeps it until its record runs)."""

    def __init__(self, urls: Sequence[str], faulty: str) -> None:
        self.queues: dict[str, list[Job]] = {}
        for url in urls:
            self.queues.setdefault(origin_of(url), []).append(Job(url=url, host=origin_of(url)))
        self.faulty = faulty
        self.answered: list[str] = []
        self.fault_raised = asyncio.Event()

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        queue = self.queues.get(host, [])
        taken, self.queues[host] = queue[:n], queue[n:]
        return taken

    async def done(self, job: Job, result: FetchResult) -> Awaitable[None] | None:
        self.answered.append(job.url)
        if job.host == self.faulty:
            return self._failing_record()
        return None

    async def _failing_record(self) -> None:
        self.fault_raised.set()
        raise StoreError("database error on sqlite:///x.db: database is locked")

    async def hosts(self) -> Sequence[str]:
        return [host for host, queue in self.queues.items() if queue]


def slow_host(received: list[str], work_box: list[FaultyWork]) -> Callable[[Any], Awaitable[Any]]:
    """The slow host's handler: logs each page asked in ``received``; /s1 is answered only once the other host's
    store fault was raised (``work_box[0].fault_raised``), and the halt has had its turns of the loop."""
    from aiohttp import web

    async def slow(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        received.append(f"slow{request.path}")
        if request.path == "/s1":
            await work_box[0].fault_raised.wait()
            await asyncio.sleep(0.05)
        return web.Response(text="<html><body><p>slow</p></body></html>", content_type="text/html")

    return slow


@pytest.mark.parametrize("batch", [1, 4])
async def test_a_store_fault_ends_the_requests_in_flight_and_sends_no_other(serve, batch):
    from aiohttp import web

    received: list[str] = []
    work_box: list[FaultyWork] = []
    slow = slow_host(received, work_box)

    async def fast(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        received.append(f"fast{request.path}")
        if request.path != "/f1":  # the fault's answer comes once the slow host's request is out
            await asyncio.sleep(0)
        else:
            while "slow/s1" not in received:
                await asyncio.sleep(0.01)
        return web.Response(text="<html><body><p>fast</p></body></html>", content_type="text/html")

    slow_origin, fast_origin = await serve(slow), await serve(fast)
    urls = [f"{slow_origin}/s{i}" for i in range(1, 6)] + [f"{fast_origin}/f{i}" for i in range(1, 6)]
    work = FaultyWork(urls, faulty=fast_origin)
    work_box.append(work)
    client_settings = settings().with_overrides(**{"store.claim_batch": batch})
    async with PoliteClient(client_settings, per_host_limit=1) as client:
        with pytest.raises(StoreError, match="database is locked"):
            await asyncio.wait_for(run_hosts(client, work, max_active_hosts=2), 60)
    assert "slow/s1" in received  # control: the slow host's request was out when the fault came
    # f1's record runs once the host's next request (f2) is out: f2 was in flight at the fault too.
    assert sorted(received) == ["fast/f1", "fast/f2", "slow/s1"]  # nothing was sent after the fault
    # Both answers in flight reached done(): the caller keeps them, nothing the sites answered is lost.
    assert {f"{slow_origin}/s1", f"{fast_origin}/f2"} <= set(work.answered)


class ReadFaultWork(FaultyWork):
    """The faulty host's jobs ask the store whether a permanent redirect's target is theirs to ask alone (``Job.read``,
    a store read inside the fetch): that read fails."""

    def __init__(self, urls: Sequence[str], faulty: str) -> None:
        super().__init__(urls, faulty)
        self.queues = {host: [Job(url=job.url, host=job.host, read=self._read if host == faulty else None)
                              for job in jobs] for host, jobs in self.queues.items()}

    async def _read(self, target: str) -> bool:
        self.fault_raised.set()
        raise StoreError("database error: the server closed the connection")

    async def done(self, job: Job, result: FetchResult) -> Awaitable[None] | None:
        self.answered.append(job.url)
        return None


async def test_a_store_fault_inside_a_fetch_halts_as_one_in_a_record(serve):
    """Review 44: a fetch reads the store too (robots.txt kept, a redirect's target held); a fault there cancelled
    every host as before, the slow host's answer on the wire among them."""
    from aiohttp import web

    received: list[str] = []
    work_box: list[FaultyWork] = []
    slow = slow_host(received, work_box)

    async def fast(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        received.append(f"fast{request.path}")
        while "slow/s1" not in received:
            await asyncio.sleep(0.01)
        raise web.HTTPMovedPermanently(location=f"{request.path}-new")

    slow_origin, fast_origin = await serve(slow), await serve(fast)
    urls = [f"{slow_origin}/s{i}" for i in range(1, 4)] + [f"{fast_origin}/f{i}" for i in range(1, 4)]
    work = ReadFaultWork(urls, faulty=fast_origin)
    work_box.append(work)
    client_settings = settings().with_overrides(**{"store.claim_batch": 1})
    async with PoliteClient(client_settings, per_host_limit=1) as client:
        with pytest.raises(StoreError, match="closed the connection"):
            await asyncio.wait_for(run_hosts(client, work, max_active_hosts=2), 60)
    assert sorted(received) == ["fast/f1", "slow/s1"]  # nothing was sent after the fault
    assert f"{slow_origin}/s1" in work.answered  # the answer on the wire reached done(): nothing the site sent is lost
