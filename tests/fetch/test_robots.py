"""RFC 9309 robots.txt: status semantics, parsing limits, the crawler's own group, one fetch per host, caching."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from harvester.fetch.engine import PoliteClient
from harvester.fetch.robots import RobotsRules, decode_robots, product_token, state_from_fetch, status_mode
from harvester.records import ErrorClass, FetchResult, RobotsState
from harvester.settings import RobotsSettings, Settings
from harvester.testing import HostSpec, RobotsSpec
from harvester.testing.record import disallowed_hits
from harvester.testing.threaded_site import Answer, Asked, robots_txt, threaded_site

LOCAL = Settings(http={"allow_addresses": ("127.0.0.1",)})
"""The test web's address (127.0.0.1) past the address policy: these clients have no seeds to allow it by."""

UA = "harvester/0.1 (+https://harvester.invalid/contact)"
NOW = datetime(2026, 1, 5, tzinfo=UTC)
HELD_S = 60.0
"""Most a held answer, or a test waiting on one, waits (a generous bound, never reached when all is well)."""

async def log_of(web):
    """The server's request log once it has caught up: in thread mode the server appends a record just after
    writing the response, so a client that reads the log at once can miss the last one (the sleep only yields
    the GIL and the loop; nothing here is timed)."""
    await asyncio.sleep(0.02)
    return web.records()



def rules_for(body: str | None, status: int | None = 200, error_class: ErrorClass | None = None,
              settings: RobotsSettings | None = None) -> RobotsRules:
    state = RobotsState(origin="http://h", status=status, fetched_at=NOW, expires_at=NOW + timedelta(hours=1),
                        body=body, error_class=error_class)
    return RobotsRules(state, user_agent=UA, settings=settings or RobotsSettings(), now_wall=NOW, now_mono=0.0)


def test_product_token_is_the_first_token_without_version():
    assert product_token(UA) == "harvester"
    assert product_token("MyBot") == "MyBot"


@pytest.mark.parametrize(("status", "mode"), [(200, "rules"), (204, "rules"), (401, "allow"), (403, "allow"),
                                              (404, "allow"), (410, "allow"), (429, "disallow"), (500, "disallow"),
                                              (503, "disallow")])
def test_status_semantics(status: int, mode: str):
    state = RobotsState(origin="http://h", status=status, fetched_at=NOW, expires_at=NOW)
    assert status_mode(state) == mode


def test_unreachable_means_disallow_all_and_too_many_redirects_means_unavailable():
    assert not rules_for(None, status=None, error_class=ErrorClass.TIMEOUT).allowed("http://h/a")
    assert not rules_for(None, status=None, error_class=ErrorClass.CONNECT).allowed("http://h/a")
    assert rules_for(None, status=302, error_class=ErrorClass.TOO_MANY_REDIRECTS).allowed("http://h/a")


def test_own_group_wins_over_star_and_fractional_delays_are_kept():
    body = ("User-agent: *\nDisallow: /\n\nUser-agent: harvester\nDisallow: /private\nCrawl-delay: 0.05\n"
            "Request-rate: 10/1s\nSitemap: http://h/sitemap.xml\n")
    rules = rules_for(body)
    assert rules.allowed("http://h/public")
    assert not rules.allowed("http://h/private/x")
    assert rules.crawl_delay_s == 0.05
    assert rules.request_rate_s == 0.1
    assert rules.sitemaps == ["http://h/sitemap.xml"]
    # control: another crawler gets the * group
    other = RobotsRules(rules.state, user_agent="otherbot/1.0", settings=RobotsSettings(), now_wall=NOW, now_mono=0)
    assert not other.allowed("http://h/public")


def test_bom_and_odd_line_endings_are_parsed():
    body = "\ufeffUser-agent: *\rDisallow: /a\r\nDisallow: /b\nAllow: /b/ok"
    rules = rules_for(decode_robots(body.encode("utf-8"), 500 * 1024))
    assert not rules.allowed("http://h/a")
    assert not rules.allowed("http://h/b/x")
    assert rules.allowed("http://h/b/ok")
    assert rules.allowed("http://h/c")


def test_rules_past_the_size_limit_are_ignored():
    filler = "# " + "x" * 1000 + "\n"
    body = "User-agent: *\nDisallow: /early\n" + filler * 600 + "Disallow: /late\n"
    rules = rules_for(body)
    assert not rules.allowed("http://h/early/1")
    assert rules.allowed("http://h/late/1")
    # control: with a limit above the file size the late rule applies
    big = rules_for(body, settings=RobotsSettings(max_bytes=2 * 2**20))
    assert not big.allowed("http://h/late/1")


def test_truncation_drops_the_partial_last_line():
    assert decode_robots(b"User-agent: *\nDisallow: /private", 25) == "User-agent: *\n"


def test_only_a_line_the_cut_falls_in_is_dropped():
    """The fetch reads one byte past the limit: a body longer than it was cut, and the line the cut falls in is no
    rule (``Allow: /pub`` cut to ``Allow: /`` would tie ``Disallow: /`` and win). A line whose EOL is the byte past
    the limit is whole; a body within the limit is read whole, its last line without a newline included."""
    head = b"User-agent: *\nDisallow: /\n"
    assert decode_robots(head + b"Allow: /pub\n", len(head) + 8) == head.decode()
    assert decode_robots(head + b"Allow: /pub\n", len(head) + 11) == head.decode() + "Allow: /pub"
    assert decode_robots(head + b"Allow: /pub", len(head) + 11) == head.decode() + "Allow: /pub"
    rules = rules_for(decode_robots(head + b"Allow: /pub\n", len(head) + 8))
    assert not rules.allowed("http://h/private1")


def test_state_lifetimes_and_a_304_extends_the_previous_state():
    settings = RobotsSettings(cache_s=3600, error_cache_s=60)
    ok = FetchResult(url="http://h/robots.txt", final_url="http://h/robots.txt", status=200, started_at=0,
                     elapsed_s=0, body=b"User-agent: *\nDisallow: /x\n", etag='"v1"')
    state = state_from_fetch("http://h", ok, settings, now=NOW)
    assert state.expires_at == NOW + timedelta(seconds=3600)
    assert state.etag == '"v1"'
    failed = FetchResult(url="http://h/robots.txt", final_url="http://h/robots.txt", status=503, started_at=0,
                         elapsed_s=0, error_class=ErrorClass.HTTP_5XX)
    assert state_from_fetch("http://h", failed, settings, now=NOW).expires_at == NOW + timedelta(seconds=60)
    later = NOW + timedelta(hours=2)
    not_modified = FetchResult(url="http://h/robots.txt", final_url="http://h/robots.txt", status=304,
                               started_at=0, elapsed_s=0)
    renewed = state_from_fetch("http://h", not_modified, settings, previous=state, now=later)
    assert renewed.body == state.body
    assert renewed.status == 200
    assert renewed.expires_at == later + timedelta(seconds=3600)


# --- against the test web -------------------------------------------------------------------------------------


async def robots_requests(web, name: str) -> int:
    return sum(1 for r in (await log_of(web)) if r.host == name and r.path == "/robots.txt")


async def test_robots_fetched_exactly_once_under_50_concurrent_first_requests(make_web):
    web = make_web([HostSpec("a", pages=60, latency_s=0.02), HostSpec("b", pages=60)])
    async with PoliteClient(LOCAL) as client:
        urls = web.truth["a"].allowed_detail_urls()[:50] + web.truth["b"].allowed_detail_urls()[:50]
        results = await asyncio.gather(*(client.fetch(u) for u in urls))
    assert (await robots_requests(web, "a")) == 1
    assert (await robots_requests(web, "b")) == 1
    assert client.robots_fetches == 2
    assert sum(1 for r in results if r.ok) == 100


async def test_503_robots_nothing_else_is_fetched(make_web):
    web = make_web([HostSpec("a", pages=20, robots=RobotsSpec(status=503))])
    async with PoliteClient(LOCAL) as client:
        results = await asyncio.gather(*(client.fetch(u) for u in web.truth["a"].detail_urls()))
        parked = client.parked(web.origin("a"))
    # RFC 9309 §2.3.1.4's complete disallow is for the crawl: the host is left alone (parked), its pages deferred,
    # not refused by robots.txt
    assert {r.error_class for r in results} == {ErrorClass.PARKED}
    assert {r.error for r in results} == {parked} == {"robots.txt unavailable (http_503): nothing is requested until "
                                                      "it answers"}
    paths = [r.path for r in (await log_of(web))]
    assert paths == ["/robots.txt"]


async def test_404_robots_all_allowed(make_web):
    web = make_web([HostSpec("a", pages=20, robots=RobotsSpec(status=404))])
    async with PoliteClient(LOCAL) as client:
        results = await asyncio.gather(*(client.fetch(u) for u in web.truth["a"].detail_urls()))
        rules = await client.robots(web.origin("a"))
    assert any("/members/" in r.url for r in results)  # what a 200 robots.txt would have disallowed
    assert rules.mode == "allow"
    assert all(r.ok for r in results)


async def test_disallowed_url_is_never_fetched(make_web):
    web = make_web([HostSpec("a", pages=40, disallowed_in_sitemap=0.25,
                             robots=RobotsSpec(agent_groups={"harvester": ("/story/",)}))])
    truth = web.truth["a"]
    async with PoliteClient(LOCAL) as client:
        urls = truth.detail_urls() + truth.disallowed_urls()
        results = await asyncio.gather(*(client.fetch(u) for u in urls))
    refused = [r for r in results if r.error_class is ErrorClass.ROBOTS_DISALLOWED]
    assert refused  # control: something was disallowed, so the check below is not vacuous
    assert not disallowed_hits((await log_of(web)), web)


async def test_robots_redirect_is_followed(make_web):
    body = "User-agent: *\nDisallow: /articles/\n"
    web = make_web([HostSpec("a", pages=10, robots=RobotsSpec(status=301, redirect_to="/real-robots.txt",
                                                              body=body))])
    async with PoliteClient(LOCAL) as client:
        rules = await client.robots(web.origin("a"))
    assert [r.path for r in (await log_of(web))] == ["/robots.txt", "/real-robots.txt"]
    assert rules.mode == "rules"
    assert not rules.allowed(web.url("a", "/articles/x-1"))
    assert rules.allowed(web.url("a", "/story/1/x"))


async def test_huge_robots_is_cut_at_500_kib(make_web):
    from harvester.testing.hostile import huge_robots_body

    web = make_web([HostSpec("a", pages=5, robots=RobotsSpec(body=huge_robots_body()))])
    async with PoliteClient(LOCAL) as client:
        rules = await client.robots(web.origin("a"))
    assert rules.mode == "rules"
    assert rules.allowed(web.url("a", "/after-limit/x"))
    assert len((rules.state.body or "").encode()) <= 500 * 1024


class MemoryRobots:
    def __init__(self) -> None:
        self.states: dict[str, RobotsState] = {}

    async def load_robots(self, origin: str) -> RobotsState | None:
        return self.states.get(origin)

    async def save_robots(self, state: RobotsState) -> None:
        self.states[state.origin] = state


async def test_persisted_state_spares_the_fetch_on_a_rerun_and_expiry_refetches_conditionally(make_web):
    web = make_web([HostSpec("a", pages=5, robots=RobotsSpec(disallow=("/story/",)))])
    origin = web.origin("a")
    store = MemoryRobots()
    async with PoliteClient(LOCAL, robots_store=store) as client:
        await client.robots(origin)
    assert (await robots_requests(web, "a")) == 1
    async with PoliteClient(LOCAL, robots_store=store) as rerun:
        rules = await rerun.robots(origin)
        assert not rules.allowed(web.url("a", "/story/1/x"))
    assert (await robots_requests(web, "a")) == 1  # inside the cache lifetime: no second fetch
    expired = store.states[origin]
    store.states[origin] = RobotsState(**{**{f: getattr(expired, f) for f in expired.__slots__},
                                          "expires_at": NOW - timedelta(days=1)})
    async with PoliteClient(LOCAL, robots_store=store) as third:
        await third.robots(origin)
    second = [r for r in (await log_of(web)) if r.path == "/robots.txt"][-1]
    assert (await robots_requests(web, "a")) == 2
    assert second.if_none_match or second.if_modified_since  # conditional re-fetch
    assert second.status == 304
    assert store.states[origin].expires_at > datetime.now(UTC)


# --- issue 20: RFC 9309 groups and the product token ----------------------------------------------------------


def test_a_record_between_user_agent_lines_does_not_split_the_group():
    # RFC 9309 §2.1 / §2.2.4: consecutive user-agent lines form one group; other records must not interfere.
    body = "User-agent: harvester\nCrawl-delay: 10\nUser-agent: *\nDisallow: /private/\n"
    rules = rules_for(body)
    assert not rules.allowed("http://h/private/x")
    assert rules.allowed("http://h/public")  # control: the group's rules, not a blanket refusal
    assert rules.crawl_delay_s == 10.0  # the Crawl-delay of that group still applies
    everyone = rules_for("User-agent: *\nCrawl-delay: 5\nUser-agent: BadBot\nDisallow: /\n")
    assert not everyone.allowed("http://h/anything")
    assert everyone.crawl_delay_s == 5.0


def test_groups_naming_the_crawler_are_merged_and_its_token_matches_exactly():
    body = ("User-agent: harvester\nDisallow: /a\nRequest-rate: 1/5s\n\nUser-agent: *\nDisallow: /\n\n"
            "User-agent: HARVESTER\nDisallow: /b\n\nUser-agent: harvest\nDisallow: /c\nSitemap: http://h/s.xml\n")
    rules = rules_for(body)
    assert not rules.allowed("http://h/a/1")
    assert not rules.allowed("http://h/b/1")
    assert rules.allowed("http://h/c/1")  # "harvest" names another crawler, not a prefix of ours
    assert rules.request_rate_s == 5.0
    assert rules.sitemaps == ["http://h/s.xml"]


def test_a_browser_style_user_agent_matches_the_bots_group():
    # RFC 9309 §2.2.1, figure 1: the crawler's product token is ExampleBot, not Mozilla.
    ua = "Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)"
    assert product_token(ua) == "ExampleBot"
    body = "User-agent: Mozilla\nDisallow: /\n\nUser-agent: examplebot\nDisallow: /private/\n"
    state = RobotsState(origin="http://h", status=200, fetched_at=NOW, expires_at=NOW + timedelta(hours=1), body=body)
    rules = RobotsRules(state, user_agent=ua, settings=RobotsSettings(), now_wall=NOW, now_mono=0.0)
    assert rules.allowed("http://h/public")
    assert not rules.allowed("http://h/private/1")


def test_the_product_token_setting_overrides_the_user_agent_and_is_validated():
    body = "User-agent: harvester\nDisallow: /\n\nUser-agent: acmecrawler\nDisallow: /private/\n"
    rules = rules_for(body, settings=RobotsSettings(product_token="AcmeCrawler"))
    assert rules.allowed("http://h/public")
    assert not rules.allowed("http://h/private/1")
    assert not rules_for(body).allowed("http://h/public")  # control: without it, the UA's token "harvester"
    for bad in ("Acme Crawler", "acme/1.0", "", "bot2"):
        with pytest.raises(ValueError, match="product_token"):
            RobotsSettings(product_token=bad)


def test_x_robots_tag_names_the_same_token_as_robots_txt():
    from harvester.extraction import extract_page

    page = FetchResult(url="http://h/a", final_url="http://h/a", status=200, started_at=0, elapsed_s=0,
                       body=b"<html><body><p>hi</p></body></html>", content_type="text/html",
                       headers={"x-robots-tag": "examplebot: noindex\nmozilla: nofollow"})
    compatible = "Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)"
    extracted = extract_page(page, settings=Settings(), user_agent=compatible)
    assert extracted.page.robots == ("noindex",)
    named = Settings(robots=RobotsSettings(product_token="Mozilla"))
    assert extract_page(page, settings=named, user_agent=compatible).page.robots == ("nofollow",)


# --- issue 22: a retired host keeps no rules in memory ---------------------------------------------------------


async def test_a_retired_hosts_persisted_rules_are_dropped_reloaded_unfetched_and_still_pace_it(make_web):
    delay = 0.05
    web = make_web([HostSpec("a", pages=6, page_bytes=(800, 1200),
                             robots=RobotsSpec(disallow=("/private/",), crawl_delay=delay))])
    origin = web.origin("a")
    urls = web.truth["a"].allowed_detail_urls()[:4]
    async with PoliteClient(LOCAL, robots_store=MemoryRobots()) as client:
        assert (await client.fetch(urls[0])).ok
        closing = client.retire(origin)  # its turn ended: no pool, and its rules are not kept in memory
        assert closing is not None
        await closing
        assert client._robots.peek(origin) is None
        results = [await client.fetch(url) for url in urls[1:]]
        refused = await client.fetch(web.url("a", "/private/x"))
    assert all(r.ok for r in results)
    assert refused.error_class is ErrorClass.ROBOTS_DISALLOWED  # the reloaded rules still judge
    assert (await robots_requests(web, "a")) == 1  # reloaded from the store, never asked again
    pages = sorted(r.start for r in (await log_of(web)) if r.host == "a" and r.path != "/robots.txt")
    assert len(pages) == 4
    assert min(b - a for a, b in itertools.pairwise(pages)) >= delay  # Crawl-delay holds across the retire


async def test_without_persistence_a_retired_host_keeps_its_rules(make_web):
    web = make_web([HostSpec("a", pages=3)])
    origin = web.origin("a")
    async with PoliteClient(LOCAL) as client:
        await client.fetch(web.truth["a"].allowed_detail_urls()[0])
        client.retire(origin)
        assert client._robots.peek(origin) is not None  # dropping it would mean asking robots.txt again
        await client.fetch(web.truth["a"].allowed_detail_urls()[1])
    assert (await robots_requests(web, "a")) == 1


# --- issue 31: the delay of exactly the group RFC 9309 selects ----------------------------------------------

OWN_THEN_STAR = "User-agent: harvester\nCrawl-delay: 10\n\nUser-agent: *\nCrawl-delay: 1\nDisallow: /x\n"
THREE_NAMED = ("User-agent: harvester\nCrawl-delay: 1\n\nUser-agent: otherbot\nCrawl-delay: 2\n\n"
               "User-agent: thirdbot\nCrawl-delay: 0.2\n\nUser-agent: *\nDisallow: /x\n")


async def paced_interval(make_web, body: str, user_agent: str = UA) -> tuple[float, float, list[str]]:
    """The pace a real client decided for a host serving ``body`` once it read its robots.txt: the gate's
    interval, how long the gate makes the next request wait (the robots.txt request counts, RFC 9309 users
    expect the delay after it too), and the paths the server saw (nothing here is timed or waited for)."""
    import time

    web = make_web([HostSpec("a", pages=4, robots=RobotsSpec(body=body))])
    async with PoliteClient(LOCAL, user_agent=user_agent) as client:
        await client.robots(web.origin("a"))
        gate = client.gate(web.origin("a"))
        waits = gate.wait_s(time.monotonic())
    assert waits is not None
    return gate.interval_s, waits, [r.path for r in await log_of(web)]


@pytest.mark.parametrize(("body", "agent", "delay"), [
    (OWN_THEN_STAR, UA, 10.0),
    (OWN_THEN_STAR, "otherbot/2.0", 1.0),  # control: the * group's own delay, not ours
    (THREE_NAMED, UA, 1.0),
    (THREE_NAMED, "otherbot/2.0", 2.0),
    (THREE_NAMED, "thirdbot/2.0", 0.2),
    (THREE_NAMED, "nobot/2.0", 0.0),  # the * group sets none
])
async def test_the_wait_between_requests_is_the_selected_groups_crawl_delay(make_web, body, agent, delay):
    interval, waits, paths = await paced_interval(make_web, body, agent)
    assert paths == ["/robots.txt"]
    assert interval == max(delay, LOCAL.politeness.min_delay_s)
    if delay >= 1:
        assert waits > delay - 1  # the next request really waits for that group's delay
    else:
        assert waits < 1
    rules = rules_for(body) if agent == UA else None
    if rules is not None:
        assert rules.allowed("http://h/x") is False  # the merged group's rules still apply (§2.1 grammar)


def test_a_crawl_delay_belongs_to_the_user_agent_lines_above_it():
    # In a group's head, a Crawl-delay is the agents' just above it; after the first rule, the whole group's.
    body = ("User-agent: otherbot\nCrawl-delay: 7\nUser-agent: harvester\nUser-agent: thirdbot\nCrawl-delay: 3\n"
            "Request-rate: 1/4s\nDisallow: /x\nCrawl-delay: 0.5\n")
    assert rules_for(body).crawl_delay_s == 3.0  # the slowest of its own (3 and the group-wide 0.5)
    assert rules_for(body).request_rate_s == 4.0
    other = RobotsRules(rules_for(body).state, user_agent="otherbot", settings=RobotsSettings(), now_wall=NOW,
                        now_mono=0)
    assert other.crawl_delay_s == 7.0
    assert other.request_rate_s is None
    assert not other.allowed("http://h/x")  # control: one group, so one set of rules for all three


def test_merged_groups_of_the_same_agent_take_the_slowest_delay_whatever_their_order():
    first = ("User-agent: harvester\nCrawl-delay: 5\nAllow: /\n\nUser-agent: *\nDisallow: /\n\n"
             "User-agent: harvester\n")
    for body in (first + "Crawl-delay: 2\n", first.replace("5", "2") + "Crawl-delay: 5\n"):
        rules = rules_for(body)
        assert rules.crawl_delay_s == 5.0
        assert rules.allowed("http://h/a")
    assert rules_for(first + "Crawl-delay: soon\n").crawl_delay_s == 5.0  # an unreadable value is ignored


async def test_a_robots_fetch_its_run_was_cancelled_during_saves_no_failure_that_parks_the_next_run():
    """A run cancelled while robots.txt is on the wire (a stopped task, the end of a time slot): the fetch its
    waiters shared was left running, the client closed its connection under it, and that failure was saved as
    robots.txt unreachable (``error_cache_s``): the next run parked the host, though robots.txt never failed
    (test_host_policy's run 2, under load). The server holds robots.txt until the first client has closed."""
    asked, answer_now = threading.Event(), threading.Event()

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            asked.set()
            answer_now.wait(HELD_S)
            return robots_txt(request.origin)
        return 200, {"Content-Type": "text/plain"}, b"a page"

    store = MemoryRobots()
    with threaded_site(answer) as origin:
        client = PoliteClient(LOCAL, robots_store=store)
        first = asyncio.create_task(client.fetch(origin + "/page"))
        assert await asyncio.to_thread(asked.wait, HELD_S), "control: robots.txt was asked"
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await client.aclose()
        answer_now.set()
        left = [task for task in asyncio.all_tasks() if task.get_name() == f"robots {origin}"]
        await asyncio.wait_for(asyncio.gather(*left, return_exceptions=True), HELD_S)
        assert origin not in store.states, store.states[origin]  # nothing was learnt: nothing is saved
        async with PoliteClient(LOCAL, robots_store=store) as rerun:
            page = await rerun.fetch(origin + "/page")
            assert rerun.parked(origin) is None
        assert page.status == 200
        assert store.states[origin].status == 200


@contextlib.contextmanager
def dropping_first_connection() -> Iterator[tuple[str, list[str]]]:
    """A loopback server that closes its first connection as soon as the request is read, with no answer (a
    reset, a restart, an overloaded accept queue), and answers every later one: robots.txt allows all, any other
    path is a small page. Yields its origin and the request lines it read, in order ("dropped" marks the first)."""
    listener = socket.create_server(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{listener.getsockname()[1]}"
    seen: list[str] = []

    def serve() -> None:
        first = True
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                line = head.split(b"\r\n", 1)[0].decode()
                if first:
                    first = False
                    seen.append(f"dropped {line}")
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
                    continue
                seen.append(line)
                body = b"User-agent: *\nAllow: /\n" if " /robots.txt " in line else b"a page"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                             + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    thread = threading.Thread(target=serve, daemon=True, name="dropping-first")
    thread.start()
    try:
        yield origin, seen
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (closing alone leaves it blocked on Linux)
        listener.close()
        thread.join(HELD_S)


async def test_a_robots_txt_whose_first_connection_drops_is_asked_again_and_the_host_is_not_parked():
    """One connection dropped before any answer is not RFC 9309 §2.3.1.4's "unreachable": robots.txt is asked
    again (``robots.connect_attempts``) and its answer rules; the host is crawled, not parked for
    ``robots.error_cache_s`` with its work deferred to the next run."""
    store = MemoryRobots()
    local = LOCAL.with_overrides(**{"robots.connect_retry_s": 0.01})  # how often is asserted, not when
    with dropping_first_connection() as (origin, seen):
        async with PoliteClient(local, robots_store=store) as client:
            page = await client.fetch(origin + "/page")
            assert client.parked(origin) is None
    assert seen == ["dropped GET /robots.txt HTTP/1.1", "GET /robots.txt HTTP/1.1", "GET /page HTTP/1.1"]
    assert page.status == 200
    assert store.states[origin].status == 200  # what is kept is the answer, not the dropped connection
