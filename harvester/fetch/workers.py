"""Per-host queues and workers: ``run_hosts`` serves each host its own queue, refilled by one claim at a time and
drained by as many workers as the host's ceiling, at most ``max_active_hosts`` hosts at once, over the one
``PoliteClient`` that keeps every host polite. Storage stays the caller's: ``HostWork`` claims jobs and takes
their results."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harvester.errors import Interrupted, LeaseLost, StoreError
from harvester.fetch.engine import PoliteClient, refused
from harvester.fetch.http import NO_VALIDATORS
from harvester.records import ErrorClass, FetchResult, HostDiagnostics, Validators, http_origin
from harvester.runtime import stop_requested, task_group, trim_native_memory

logger = logging.getLogger(__name__)


PROGRESS_EVERY_S = 1.0
"""How often ``run_hosts`` hands diagnostics to ``on_progress``, and the extraction phase its ``Progress``."""

HOSTS_POLL_S = 0.5
"""While hosts are being served and there is room for more, ``work.hosts()`` is asked again this often: a host
handed over by discovery, or freed by another worker, starts within this, not when a running host ends."""

SETTLING_PER_WORKER = 2
"""Deferred records (``HostWork.done``'s awaitable) a host may have outstanding per worker before a worker waits
for the oldest: parsing that cannot keep up with the answers slows the requests instead of piling up bodies."""

SETTLE_WAIT_S = 0.1
"""Longest a record waits for its worker's next request: a worker the gate holds back (a crawl-delay, a back-off)
sends nothing for a while, and the answers it has must be written meanwhile, not lost to a kill."""



class HandedBack(LeaseLost):
    """Raised by ``run_hosts``' ``holds`` for a host its worker gives up on purpose (to share the hosts out with a
    worker that came late): the turn stops as for a lapsed lease, but nothing went wrong, so it is not logged as
    one. Never leaves the engine."""


class Halted(HandedBack):
    """Raised before a request once a store fault has halted ``run_hosts`` (``EngineStats.fault``): nothing more is
    sent; the fault itself is what ``run_hosts`` raises. Never leaves the engine."""


@dataclass(frozen=True, slots=True)
class Job:
    """One URL handed to the engine by the caller's ``HostWork``; ``payload`` travels back to ``done()``."""

    url: str
    host: str
    validators: Validators = NO_VALIDATORS
    accept: tuple[str, ...] | None = None
    payload: Any = None
    answered: Callable[[], FetchResult | None] | None = None
    """Asked at the job's turn, just before its request: this URL's answer when it is already in hand (the target
    of a permanent redirect followed in this run, maybe since the job was claimed), and then no request is sent."""
    read: Callable[[str], Awaitable[bool]] | None = None
    """Whether a URL is the caller's to ask on its own (read in this run, or in its frontier): a permanent redirect
    to it is not followed (``PoliteClient.fetch``'s ``stop_at``)."""


class HostWork(Protocol):
    """What extraction hands the engine (implemented by ``phases.extract_host.ExtractWork`` over the store)."""

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        """Up to ``n`` jobs of ``host``; empty: the host has no more work now."""
        ...

    async def done(self, job: Job, result: FetchResult) -> Awaitable[None] | None:
        """Record one outcome (requeue vs failed is the caller's policy). May raise LeaseLost: stop the host.

        Whatever must stop the host's next request is decided here, before the worker moves on. What only
        records the answer (parsing, extracting, writing) may be handed back as an awaitable instead: the engine
        runs it once the worker's next request is on its way (``_HostRun._settle``), so it never holds the host's
        request chain; it may raise LeaseLost too, which stops the host as soon as it is known. A turn cancelled
        (its run failed or was stopped) before a record began closes that record unrun: whatever ``done`` was
        handed must already be kept by the work until its record has run (``ExtractWork`` keeps the answer and
        records it as it winds down), or it is lost."""
        ...

    async def hosts(self) -> Sequence[str]:
        """Hosts with work, in the order they should get turns."""
        ...


@dataclass
class EngineStats:
    """What one ``run_hosts`` did, for counters and artifacts."""

    hosts_served: int = 0
    fetched: int = 0
    results: Counter[str] = field(default_factory=Counter)
    parked: dict[str, str] = field(default_factory=dict)
    lease_lost: list[str] = field(default_factory=list)
    unsent: list[Job] = field(default_factory=list)
    """Jobs whose host's hold lapsed before their request (``run_hosts``' ``holds``): nothing was sent, or, lapsed
    at a redirect hop, nothing past the hops before it; the caller hands their claims back, and the URL is asked
    again whole (a lapsed owner writes nothing for it, and a hop's answer alone is no outcome of the URL)."""
    elapsed_s: float = 0.0
    fault: StoreError | None = None
    """The first store fault a turn met (a claim, a record, a turn's end). It halts every host rather than cancel
    them: no request is sent after it, those in flight end and their answers stay the caller's (records not
    begun are closed, so ``HostWork.done`` must keep each answer until its record has run), then ``run_hosts``
    raises it. Cancelled, the requests in flight were lost though the site had answered them, and the task's
    retry sent them again."""

    def halt(self, exc: StoreError) -> None:
        if self.fault is None:
            self.fault = exc
            logger.warning("store fault (%s): no request is sent any more; those in flight end first", exc,
                           extra={"error_class": "storage"})

    def as_dict(self) -> dict[str, Any]:
        return {"hosts_served": self.hosts_served, "fetched": self.fetched, "results": dict(self.results),
                "parked": dict(self.parked), "lease_lost": list(self.lease_lost),
                "elapsed_s": round(self.elapsed_s, 3)}


class _HostRun:
    """One host's turn: its own queue, refilled by one claim at a time, drained by its own workers."""

    def __init__(self, client: PoliteClient, work: HostWork, host: str, stats: EngineStats,
                 hold: Callable[[], bool] | None = None) -> None:
        self.client = client
        self.hold = hold
        self.work = work
        self.host = host
        self.stats = stats
        self.queue: deque[Job] = deque()
        self.claiming: asyncio.Future[None] | None = None
        self.busy = 0  # jobs taken from the queue and not yet done()
        self.stopped = False
        self.exhausted = False
        self.batch = client.settings.store.claim_batch
        self.settling: set[asyncio.Task[None]] = set()
        self.unstarted: set[Awaitable[None]] = set()
        """Deferred records not yet begun: a cancelled turn closes them (``_close_unstarted``)."""
        self.tasks: asyncio.TaskGroup | None = None
        self.workers = max(1, self.client.gate_config.max_limit)
        self.refill_below = max(self.workers, self.batch // 2)
        """The next claim is asked once the queue holds fewer jobs than this: half a batch, and at least one job
        per worker. Asked when one job per worker was left, a claim had one wave of the host's requests to come
        back in: on a slow host (200 ms a wave) under load, a claim behind other hosts' writes took longer, and
        all its workers waited for it (issue 31: 0.4-1 s of the slow host's 23 s on seed4)."""

    async def run(self) -> None:
        try:
            async with task_group() as tasks:
                self.tasks = tasks
                for i in range(self.workers):
                    tasks.create_task(self._worker(), name=f"worker {self.host} #{i}")
        finally:
            self.client.set_queue_depth(self.host, 0)
            self._close_unstarted()

    def _close_unstarted(self) -> None:
        """The turn was cancelled before these records began: closed, never run, so no coroutine is left never
        awaited. Their answers are the work's to keep (``HostWork.done``): running them here would wait on the
        writer, and when the cancel came from a store fault, on the very lock whose failure must end the task."""
        for record in self.unstarted:
            if isinstance(record, Coroutine):
                record.close()
        self.unstarted.clear()

    def _defer(self, record: Awaitable[None], sent: asyncio.Event) -> None:
        """Run ``record`` (an answer's parse and write) once ``sent``: the worker's next request has passed every
        wait (or the worker has none to send), so the record never delays the host's next request."""
        assert self.tasks is not None
        self.unstarted.add(record)
        task = self.tasks.create_task(self._settle(record, sent), name=f"record {self.host}")
        self.settling.add(task)
        task.add_done_callback(self.settling.discard)

    async def _settle(self, record: Awaitable[None], sent: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):  # a worker held back by the gate (a crawl-delay, a back-off)
            await asyncio.wait_for(sent.wait(), SETTLE_WAIT_S)
        if self.stats.fault is not None:
            return  # left unstarted, closed with the turn: the answer is the work's to keep, unwritten
        self.unstarted.discard(record)
        try:
            await record
        except LeaseLost:
            self._lease_lost()
        except StoreError as exc:
            self.stats.halt(exc)

    def _lease_lost(self) -> None:
        logger.warning("lease on %s lost: stopping this host", self.host, extra={"host": self.host})
        if self.host not in self.stats.lease_lost:
            self.stats.lease_lost.append(self.host)
        self.stopped = True
        self.queue.clear()

    async def _next(self) -> Job | None:
        while not self.stopped:
            if stop_requested() or self.stats.fault is not None:
                return None  # take no new job: those in flight end (and are written), the rest go back
            if self.queue:
                job = self.queue.popleft()
                self.busy += 1
                if len(self.queue) < self.refill_below and not self.exhausted and self.claiming is None:
                    # The next claim goes now, while the queue still feeds the workers for a while: waited for
                    # when the queue ran dry, it held all the host's slots idle for a database round trip (behind
                    # other hosts' writes under load) every ``claim_batch`` requests (``refill_below``).
                    assert self.tasks is not None
                    self.tasks.create_task(self._refill(self._claim_started()), name=f"claim {self.host}")
                return job
            if self.exhausted:
                return None
            if self.claiming is None:
                await self._refill(self._claim_started())
            else:
                await asyncio.shield(self.claiming)
        return None

    def _claim_started(self) -> asyncio.Future[None]:
        """Mark a claim as under way (synchronously, so no other worker starts one) and return its marker."""
        self.claiming = asyncio.get_running_loop().create_future()
        return self.claiming

    async def _refill(self, claiming: asyncio.Future[None]) -> None:
        """One claim into the queue; HostWork's contract: empty means no more work now (requeued jobs wait for the
        next run_hosts call)."""
        try:
            jobs = await self.work.claim(self.host, self.batch)
        except LeaseLost:
            raise
        except StoreError as exc:
            self.stats.halt(exc)
            return
        finally:
            self.claiming = None
            claiming.set_result(None)
        if self.stopped:  # the host stopped meanwhile: nothing of this claim is sent, its leases go back
            self.stats.unsent.extend(jobs)
        elif jobs:
            self.queue.extend(jobs)
            self.client.set_queue_depth(self.host, len(self.queue))
        else:
            self.exhausted = True

    async def _worker(self) -> None:
        sent = [asyncio.Event()]  # what this worker's last answer's record waits for (``_defer``)
        try:
            await self._work(sent)
        finally:
            sent[0].set()  # no request follows: record it now

    def _hold(self, sent: asyncio.Event) -> Callable[[], bool]:
        """The lease check before each request, which also lets the previous answer's record run: the request
        is past every wait and goes out before the loop turns to it."""
        def hold() -> bool:
            sent.set()
            if self.stats.fault is not None:
                raise Halted(f"a store fault halted the run: nothing more is sent to {self.host}")
            return self.hold is None or self.hold()
        return hold

    async def _work(self, sent: list[asyncio.Event]) -> None:
        client = self.client
        origin_parked = client.parked
        limit = SETTLING_PER_WORKER * max(1, client.gate_config.max_limit)
        while True:
            while len(self.settling) >= limit:
                sent[0].set()
                await asyncio.wait(self.settling, return_when=asyncio.FIRST_COMPLETED)
            job = await self._next()
            if job is None:
                return
            try:
                reason = origin_parked(http_origin(job.url) or job.host)
                answered = job.answered() if job.answered is not None else None
                if answered is not None:
                    result = answered
                elif reason is not None:
                    result = refused(job.url, ErrorClass.PARKED, reason)
                else:
                    try:
                        result = await client.fetch(job.url, validators=job.validators, accept=job.accept,
                                                    hold=self._hold(sent[0]), stop_at=job.read)
                    except Interrupted:
                        return  # stopped before its request was sent: the job's lease goes back unfetched
                    except LeaseLost as exc:
                        self._lost(job, handed_back=isinstance(exc, HandedBack))
                        return
                    except StoreError as exc:  # the fetch's own store reads (robots.txt kept, a redirect's target)
                        self.stats.halt(exc)
                        self._lost(job, handed_back=True)
                        return
                self.stats.results[result.error_class.value if result.error_class else str(result.status)] += 1
                if result.status is not None and answered is None:
                    self.stats.fetched += 1
                try:
                    record = await self.work.done(job, result)
                except LeaseLost:
                    self._lease_lost()
                    return
                if record is not None:
                    sent[0].set()  # the previous record may go now; this one waits for the next request
                    sent[0] = asyncio.Event()
                    self._defer(record, sent[0])
            finally:
                self.busy -= 1
            if self.queue:
                self.client.set_queue_depth(self.host, len(self.queue))
            reason = origin_parked(http_origin(job.url) or job.host)
            if reason is not None and not self.stopped:
                await self._hand_back(reason)

    def _lost(self, job: Job, *, handed_back: bool) -> None:
        """The host's hold lapsed, or its worker handed it back (``HandedBack``, which the worker logs when it
        decides), before ``job``'s request: stop at once, nothing more is sent for it here."""
        if handed_back:
            logger.debug("%s handed back: its turn stops before its next request", self.host,
                         extra={"host": self.host})
        else:
            if not self.stopped:
                logger.warning("lease on %s lapsed before a request: stopping this host", self.host,
                               extra={"host": self.host})
            if self.host not in self.stats.lease_lost:
                self.stats.lease_lost.append(self.host)
        self.stopped = True
        self.stats.unsent.append(job)
        self.stats.unsent.extend(self.queue)
        self.queue.clear()

    async def _hand_back(self, reason: str) -> None:
        """A parked host: every claimed job goes back through done() with a PARKED result (no request)."""
        self.stats.parked[self.host] = reason
        while self.queue:
            job = self.queue.popleft()
            result = refused(job.url, ErrorClass.PARKED, reason)
            self.stats.results[ErrorClass.PARKED.value] += 1
            try:
                record = await self.work.done(job, result)
                if record is not None:
                    await record  # no request follows a parked host's hand-back: nothing to wait for
            except LeaseLost:
                self.stats.lease_lost.append(self.host)
                break
            except StoreError as exc:
                self.stats.halt(exc)
                break
        self.stopped = True


async def run_hosts(client: PoliteClient, work: HostWork, *, max_active_hosts: int,
                    on_progress: Callable[[dict[str, HostDiagnostics]], None] | None = None,
                    holds: Callable[[str], bool] | None = None,
                    ended: Callable[[str], Awaitable[None]] | None = None,
                    offered: Callable[[], Awaitable[None]] | None = None) -> EngineStats:
    """Fetch every host's work through its own queue and workers, at most ``max_active_hosts`` at once.

    Hosts are served in the order ``work.hosts()`` gives; a host that runs out of work, is parked or loses its
    lease is retired and the next one starts. While others are served, ``work.hosts()`` is asked again every
    ``HOSTS_POLL_S``: a host it offers again (new work came due on it) gets another turn in this call.
    Results go to ``work.done()``; retry policy is the caller's. Exceptions other than LeaseLost propagate.
    ``holds(host)`` is asked before each request (``PoliteClient.fetch``'s ``hold``): False (the lease lapsed), or
    ``HandedBack`` raised (the caller gives the host up on purpose), stops the host's turn at once, its unsent jobs
    in ``EngineStats.unsent``. ``ended(host)`` is awaited when a host's turn is over,
    none of its requests out (the caller may hand the host to another worker then, not before). ``offered()``
    returns when ``work.hosts()`` may offer a host it did not at its last look (discovery handed one over): while
    there is room, it is looked at once, not at the next poll.
    """
    stats = EngineStats()
    started = time.monotonic()
    served: set[str] = set()
    closing: set[asyncio.Task[None]] = set()
    try:
        async with task_group() as tasks:
            progress = tasks.create_task(_progress(client, on_progress)) if on_progress is not None else None
            await _serve_hosts(client, work, tasks, max_active_hosts, stats, served, closing, holds, ended, offered)
            if progress is not None:
                progress.cancel()
    finally:
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)
    if stats.fault is not None:
        raise stats.fault
    for origin, diag in client.diagnostics().items():
        if diag.parked_reason is not None and origin in served:
            stats.parked.setdefault(origin, diag.parked_reason)
    stats.elapsed_s = time.monotonic() - started
    if on_progress is not None:
        on_progress(client.diagnostics())
    return stats


async def _serve_hosts(client: PoliteClient, work: HostWork, tasks: asyncio.TaskGroup, max_active_hosts: int,
                       stats: EngineStats, ever: set[str], closing: set[asyncio.Task[None]],
                       holds: Callable[[str], bool] | None = None,
                       ended: Callable[[str], Awaitable[None]] | None = None,
                       offered: Callable[[], Awaitable[None]] | None = None) -> None:
    """Start hosts' turns (in ``tasks``) as slots free up, until no host is left with work; retire each, its
    pool closing in the background (``closing``)."""
    pending: deque[str] = deque()
    active: dict[asyncio.Task[None], str] = {}
    served: set[str] = set()
    finished: set[str] = set()
    polling = False
    looked = time.monotonic()
    waking: asyncio.Future[None] | None = None
    """``offered()``, awaited while there is room: a host handed over starts at once, not at the next poll (on a
    slow host, the poll's half second left its slots idle for two and a half waves, issue 31)."""
    try:
        while True:
            while len(active) < max_active_hosts and not stop_requested() and stats.fault is None:
                if not pending:
                    try:
                        pending.extend(h for h in await work.hosts() if h not in served)
                    except StoreError as exc:
                        if not polling and not active:
                            raise
                        if not polling:  # hosts are being served: they end their requests in flight first
                            stats.halt(exc)
                            break
                        # Only a look for more: the hosts being served go on, and the next look asks again. (A
                        # fault that lasts fails their own writes, which wait it out first.)
                        logger.warning("looking for more hosts: %s", exc, extra={"error_class": "storage"})
                    if not pending:
                        break
                host = pending.popleft()
                if host in served:
                    continue
                served.add(host)
                ever.add(host)
                stats.hosts_served += 1
                run = _HostRun(client, work, host, stats, None if holds is None else functools.partial(holds, host))
                active[tasks.create_task(run.run(), name=f"host {host}")] = host
            if not active:
                break
            room = len(active) < max_active_hosts and not stop_requested() and stats.fault is None
            if room and offered is not None and waking is None:
                waking = asyncio.ensure_future(offered())
            done, _ = await asyncio.wait([*active, *([waking] if room and waking is not None else [])],
                                         timeout=HOSTS_POLL_S if room else None, return_when=asyncio.FIRST_COMPLETED)
            if waking is not None and waking in done:
                done.discard(waking)
                waking.result()
                waking = None
            polling = not done
            now = time.monotonic()
            if now - looked >= HOSTS_POLL_S:
                # Turns that ended before this look may start again: work came due on their hosts while others
                # were served (links a page named, a feed read beside extraction), rather than wait for another
                # round.
                looked = now
                served.difference_update(finished)
                finished.clear()
            for task in [task for task in active if task in done]:
                host = active.pop(task)
                task.result()  # a bug in done()/claim() surfaces here
                finished.add(host)
                turn_ended(client, host, closing)
                if ended is not None and stats.fault is None:
                    try:
                        await ended(host)
                    except LeaseLost:
                        raise
                    except StoreError as exc:
                        stats.halt(exc)
    finally:
        if waking is not None:
            waking.cancel()


def turn_ended(client: PoliteClient, origin: str, closing: set[asyncio.Task[None]]) -> None:
    """A host's turn (discovery or extraction) is over: its pool closes in the background (``PoliteClient.retire``;
    the close is kept in ``closing`` for the caller to await) and what its pages freed goes back to the OS
    (``trim_native_memory``, at most every ``TRIM_EVERY_S``)."""
    closer = client.retire(origin)
    if closer is not None:
        closing.add(closer)
        closer.add_done_callback(closing.discard)
    trim_native_memory()


async def _progress(client: PoliteClient, on_progress: Callable[[dict[str, HostDiagnostics]], None]) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        on_progress(client.diagnostics())
