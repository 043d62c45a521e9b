"""The record helpers tests assert with: each measured against a request log made for it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harvester.testing import HostSpec, RequestRecord, RobotsSpec, demo_site
from harvester.testing.record import (
    conditional_share,
    count_status,
    coverage,
    disallowed_hits,
    duplicates,
    max_in_flight,
    min_interval,
    missing,
    politeness_limit,
    request_rate_interval,
)


def rec(host: str, path: str, start: float, status: int = 200, **kw) -> RequestRecord:
    return RequestRecord(
        host=host, path=path, method="GET", status=status, bytes=10, start=start, end=start + 0.01,
        in_flight=kw.pop("in_flight", 1), if_none_match=kw.pop("inm", None), if_modified_since=None,
        user_agent=kw.pop("ua", None), origin="http://127.0.0.1:1",
    )  # fmt: skip


def test_min_interval_and_max_in_flight_over_a_made_log():
    log = [rec("a", "/1", 0.0), rec("a", "/2", 0.5, in_flight=3), rec("a", "/3", 0.2), rec("b", "/1", 0.21)]
    assert min_interval(log, "a") == pytest.approx(0.2)
    assert min_interval(log, "b") is None
    assert max_in_flight(log, "a") == 3
    assert max_in_flight(log, "nobody") == 0


def test_duplicates_counts_repeated_200s_only():
    log = [rec("a", "/x", 0), rec("a", "/x", 1), rec("a", "/x", 2, status=304), rec("a", "/y", 3), rec("b", "/x", 4)]
    assert duplicates(log) == {("a", "/x"): 2}
    assert duplicates(log, statuses=(200, 304)) == {("a", "/x"): 3}
    assert duplicates(log[3:]) == {}  # control


def test_coverage_missing_count_status_and_conditional_share():
    log = [rec("a", "/x", 0), rec("a", "/y", 1, status=404), rec("a", "/z", 2, status=304, inm='"1"')]
    expected = ["http://127.0.0.1:1/x", "http://127.0.0.1:1/y", "http://127.0.0.1:1/z", "http://127.0.0.1:1/w"]
    assert coverage(log, expected) == 0.5
    assert missing(log, expected) == {"http://127.0.0.1:1/y", "http://127.0.0.1:1/w"}
    assert coverage(["http://127.0.0.1:1/x"], expected[:1]) == 1.0
    assert coverage(log, []) == 1.0
    assert count_status(log, 304) == 1
    assert conditional_share(log, "a") == pytest.approx(1 / 3)
    assert conditional_share(log, "b") == 0.0


def test_request_rate_interval_forms():
    assert request_rate_interval("10/1s") == pytest.approx(0.1)
    assert request_rate_interval("1/5") == pytest.approx(5.0)
    assert request_rate_interval("30/1m") == pytest.approx(2.0)
    assert request_rate_interval(None) == 0.0
    assert request_rate_interval("nonsense") == 0.0


def test_politeness_limit_formula():
    specs = [
        HostSpec("fast", latency_s=0.01),
        HostSpec("slow", latency_s=0.2),
        HostSpec("delayed", latency_s=0.01, robots=RobotsSpec(crawl_delay=0.05)),
        HostSpec("rated", latency_s=0.0, robots=RobotsSpec(request_rate="10/1s")),
        HostSpec("capped", latency_s=0.1, max_in_flight=2),
    ]
    assert politeness_limit({"fast": 300}, specs, 4) == pytest.approx(75 * 0.01)
    assert politeness_limit({"fast": 300, "slow": 300}, specs, 4) == pytest.approx(75 * 0.2)
    assert politeness_limit({"delayed": 21}, specs, 4) == pytest.approx(20 * 0.05 + 0.01)
    assert politeness_limit({"rated": 11}, specs, 4) == pytest.approx(1.0)
    assert politeness_limit({"capped": 10}, specs, 4) == pytest.approx(5 * 0.1)
    assert politeness_limit({}, specs, 4) == 0.0
    log = [rec("slow", f"/{i}", i) for i in range(8)]
    assert politeness_limit(log, specs, 4) == pytest.approx(2 * 0.2)


def test_politeness_limit_puts_robots_txt_in_a_wave_of_its_own():
    specs = [HostSpec("slow", latency_s=0.2)]
    robots = rec("slow", "/robots.txt", 0)
    # robots.txt + 4 pages: one wave for robots, one for the pages, as if robots were one of 5 requests.
    assert politeness_limit([robots, *(rec("slow", f"/{i}", i) for i in range(4))], specs, 4) == pytest.approx(0.4)
    # robots.txt + 5 pages: the pages need 2 waves after robots; packing robots into a page wave would say 2.
    five = [robots, *(rec("slow", f"/{i}", i) for i in range(5))]
    assert politeness_limit(five, specs, 4) == pytest.approx(3 * 0.2)
    # Control: the same 6 requests without robots.txt among them are 2 waves.
    assert politeness_limit([rec("slow", f"/{i}", i) for i in range(6)], specs, 4) == pytest.approx(2 * 0.2)


def test_seed4_limit_matches_the_published_scenario():
    specs = [HostSpec(n, latency_s=s) for n, s in (("a", 0.01), ("b", 0.01), ("c", 0.01), ("d", 0.2))]
    assert politeness_limit(dict.fromkeys("abcd", 300), specs, 4) == pytest.approx(15.0)


def test_disallowed_hits_finds_exactly_the_forbidden_requests(make_web):
    web = make_web([HostSpec("r", pages=60, robots=RobotsSpec(disallow=("/private/",)))])
    t = web.truth["r"]
    bad = t.disallowed_urls()
    assert bad
    with httpx.Client(headers={"User-Agent": "harvester/1.0"}) as c:
        for u in t.allowed_detail_urls()[:5]:
            c.get(u)
        c.get(web.url("r", "/robots.txt"))
        assert disallowed_hits(web.records(), web) == []  # control: allowed fetches only
        c.get(bad[0])
        c.get(web.url("r", "/private/anything"))
    hits = disallowed_hits(web.records(), web)
    assert [h.url for h in hits] == [bad[0], web.url("r", "/private/anything")]


async def test_min_interval_is_measured_from_real_requests(make_web):
    web = make_web([HostSpec("p", pages=10)])
    async with httpx.AsyncClient() as c:
        for u in web.truth["p"].detail_urls()[:4]:
            await c.get(u)
            await asyncio.sleep(0.05)
    gap = min_interval(web.records(), "p")
    assert gap is not None
    assert gap >= 0.05


def test_demo_site_is_a_few_hundred_pages_over_three_or_four_hosts():
    specs = demo_site()
    assert 3 <= len(specs) <= 4
    assert 200 <= sum(s.pages for s in specs) <= 600
    assert any(s.robots.crawl_delay for s in specs)
    assert any(s.traps for s in specs)
    assert all(s.latency_s > 0 for s in specs)


def test_demo_site_starts_and_serves(make_web):
    web = make_web(demo_site())
    with httpx.Client() as c:
        for seed in web.seeds:
            assert c.get(seed).status_code == 200
        for name in web.names:
            assert c.get(web.truth[name].sitemap_documents()[0]).status_code == 200
    assert web.host_name(web.seeds[1]) == web.names[1]
    assert web.host_name(web.seeds[1].upper().replace("HTTP", "http") + "x?y") == web.names[1]
    with pytest.raises(KeyError):
        web.host_name("http://127.0.0.1:1/")
