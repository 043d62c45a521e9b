"""The test web's request log and the measures tests assert over it (in-flight, intervals, robots, coverage,
the politeness limit).

Pure functions over ``list[RequestRecord]``; nothing here talks to a server. Times are ``time.monotonic()``
seconds taken in the server (CLOCK_MONOTONIC is system-wide, so process-mode times compare with the parent's).
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvester.testing.sites import HostSpec
    from harvester.testing.web import TestWeb

__all__ = [
    "RequestRecord",
    "conditional_share",
    "count_status",
    "coverage",
    "disallowed_hits",
    "duplicates",
    "fetched_urls",
    "max_in_flight",
    "min_interval",
    "missing",
    "politeness_limit",
    "request_rate_interval",
]


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it. ``in_flight`` counts the requests in flight on that host when this one
    arrived, itself included. ``bytes`` is everything written (head and body). ``status`` 0: the client went
    away before any answer was written."""

    host: str
    path: str
    method: str
    status: int
    bytes: int
    start: float
    end: float
    in_flight: int
    if_none_match: str | None
    if_modified_since: str | None
    user_agent: str | None
    origin: str = ""

    @property
    def url(self) -> str:
        """The absolute URL asked for (path as sent, query included)."""
        return self.origin + self.path

    @property
    def conditional(self) -> bool:
        return self.if_none_match is not None or self.if_modified_since is not None

    @property
    def duration(self) -> float:
        return self.end - self.start


def _of(records: Iterable[RequestRecord], host: str | None) -> list[RequestRecord]:
    return [r for r in records if host is None or r.host == host]


def max_in_flight(records: Iterable[RequestRecord], host: str) -> int:
    """The most requests in flight at once on ``host`` (0 when it got none)."""
    return max((r.in_flight for r in records if r.host == host), default=0)


def min_interval(records: Iterable[RequestRecord], host: str) -> float | None:
    """The shortest gap between two successive request starts on ``host``; None with fewer than two."""
    starts = sorted(r.start for r in records if r.host == host)
    if len(starts) < 2:
        return None
    return min(b - a for a, b in itertools.pairwise(starts))


def disallowed_hits(records: Iterable[RequestRecord], web: TestWeb) -> list[RequestRecord]:
    """Requests robots.txt forbade for the requesting User-Agent (RFC 9309, via protego; 5xx robots means
    everything but /robots.txt is forbidden). robots.txt itself is never a hit."""
    out = []
    for r in records:
        if r.path == "/robots.txt":
            continue
        if not web.truth[r.host].is_allowed(r.path, r.user_agent):
            out.append(r)
    return out


def duplicates(records: Iterable[RequestRecord], statuses: Sequence[int] = (200,)) -> dict[tuple[str, str], int]:
    """(host, path) fetched more than once with one of ``statuses``, with how many times."""
    counts = Counter((r.host, r.path) for r in records if r.status in statuses and r.method == "GET")
    return {k: n for k, n in counts.items() if n > 1}


def fetched_urls(records: Iterable[RequestRecord], statuses: Sequence[int] = (200, 304)) -> set[str]:
    """Absolute URLs (as requested, fragment-free) that got one of ``statuses``."""
    return {r.url for r in records if r.status in statuses}


def _as_urls(records_or_urls: Iterable[RequestRecord] | Iterable[str], statuses: Sequence[int]) -> set[str]:
    out: set[str] = set()
    for item in records_or_urls:
        if isinstance(item, RequestRecord):
            if item.status in statuses:
                out.add(item.url)
        else:
            out.add(item)
    return out


def coverage(
    records_or_urls: Iterable[RequestRecord] | Iterable[str],
    expected: Iterable[str],
    statuses: Sequence[int] = (200, 304),
) -> float:
    """Share of ``expected`` URLs that were fetched (records: with one of ``statuses``); 1.0 when nothing was
    expected. Compare canonical spellings: the test web's truth gives them, a polite crawler requests them."""
    want = set(expected)
    if not want:
        return 1.0
    return len(want & _as_urls(records_or_urls, statuses)) / len(want)


def missing(
    records_or_urls: Iterable[RequestRecord] | Iterable[str],
    expected: Iterable[str],
    statuses: Sequence[int] = (200, 304),
) -> set[str]:
    """The ``expected`` URLs that were not fetched (what makes coverage() below 1)."""
    return set(expected) - _as_urls(records_or_urls, statuses)


def count_status(records: Iterable[RequestRecord], status: int, host: str | None = None) -> int:
    return sum(1 for r in records if r.status == status and (host is None or r.host == host))


def conditional_share(records: Iterable[RequestRecord], host: str | None = None) -> float:
    """Share of requests (to ``host``, or all) that carried If-None-Match or If-Modified-Since; 0.0 if none."""
    mine = _of(records, host)
    return sum(1 for r in mine if r.conditional) / len(mine) if mine else 0.0


_RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def request_rate_interval(rate: str | None) -> float:
    """Seconds between request starts implied by a robots.txt ``Request-rate: N/T[smhd]``; 0.0 if absent/bad."""
    if not rate:
        return 0.0
    m = _RATE_RE.match(rate)
    if not m or int(m.group(1)) == 0:
        return 0.0
    return float(m.group(2)) * _UNIT_S[m.group(3)] / int(m.group(1))


def politeness_limit(
    records_or_plan: Iterable[RequestRecord] | Mapping[str, int],
    specs: Sequence[HostSpec],
    per_host_limit: int,
) -> float:
    """The least wall time (s) those fetches could take under the per-host rules; the run's limit is the
    slowest host, since hosts proceed in parallel.

    Per host with ``n`` requests, latency ``L``, concurrency ``k = min(per_host_limit, max_in_flight)`` and
    start interval ``d = max(Crawl-delay, Request-rate T/N)``::

        limit_host = max(ceil(n / k) * L,  (n - 1) * d + L)        (0 when n == 0)
        limit      = max over hosts of limit_host

    The first term is k-wide waves of L each; the second is n starts spaced by d, the last one then taking L.
    ``records_or_plan`` is a request log (every record counts, robots.txt included) or ``{host: n}``.

    When the log holds a host's ``/robots.txt`` request, that request is a wave of its own: no page of the host
    may be requested before its answer is known (RFC 9309; invariant 2), so the first term becomes
    ``L + ceil((n - 1) / k) * L``. Without this, a crawler that fetched robots.txt and then ``n - 1`` pages
    with ``(n - 1) % k != 0`` was held to one wave less than any robots-honouring schedule can take.
    """
    first: dict[str, int] = defaultdict(int)  # requests that must finish before the host's others start
    if isinstance(records_or_plan, Mapping):
        plan: dict[str, int] = dict(records_or_plan)
    else:
        plan = defaultdict(int)
        for r in records_or_plan:
            plan[r.host] += 1
            if r.path == "/robots.txt":
                first[r.host] = 1
    by_name = {s.name: s for s in specs}
    worst = 0.0
    for host, n in plan.items():
        spec = by_name.get(host)
        if spec is None or n <= 0:
            continue
        k = max(1, per_host_limit if spec.max_in_flight is None else min(per_host_limit, spec.max_in_flight))
        latency = spec.latency_s
        interval = max(spec.robots.crawl_delay or 0.0, request_rate_interval(spec.robots.request_rate))
        before = min(first[host], n)
        waves = before + math.ceil((n - before) / k)
        worst = max(worst, waves * latency, (n - 1) * interval + latency)
    return worst
