"""Refusals name their real cause (issue 33, item 8): a host spelled in a way HTTP clients read differently is
refused as such where it is typed, and a robots.txt that redirects to a refused address blames that address, not
the seed's own allowed origin."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from harvester import FrontierStore, aharvest
from harvester.errors import ConfigError
from harvester.fetch.http import Fetcher
from harvester.records import DiscoveredUrl, ErrorClass, UrlKind
from harvester.settings import HttpSettings, Settings
from harvester.site_profile import SiteProfile


@pytest.mark.parametrize(("seed", "meant"), [
    ("http://0177.0.0.1/", "127.0.0.1"),  # octal to a browser; httpx: "Invalid IPv4 address"
    ("http://0x7f.0.0.1/", "127.0.0.1"),
    ("http://127.1/", "127.0.0.1"),
    ("http://2130706433/", "127.0.0.1"),
    ("http://1.2.3.4.5/", "four decimal numbers"),
])
def test_a_seed_host_in_an_odd_ipv4_spelling_is_refused_naming_the_address_meant(seed, meant):
    with pytest.raises(ConfigError, match="IPv4 address in a spelling") as refused:
        SiteProfile.build(seeds=(seed,))
    assert meant in str(refused.value)


@pytest.mark.parametrize("seed", ["http://127.0.0.1/", "http://10.1.2.3:8080/", "http://[::1]/", "http://a1.test/",
                                  "http://example.org/", "http://www.2024.example/"])
def test_ordinary_hosts_are_accepted(seed):
    assert SiteProfile.build(seeds=(seed,)).seeds == (seed,)  # the control: the check is about odd spellings only


async def test_a_url_the_http_client_refuses_is_recorded_as_an_invalid_url_not_a_robots_refusal():
    fetcher = Fetcher(HttpSettings(), user_agent="harvester/0.1 (+test)", seeds=("http://127.0.0.1",))
    try:
        result = await fetcher.fetch("http://0177.0.0.1:9/robots.txt")
    finally:
        await fetcher.aclose()
    assert result.error_class is ErrorClass.INVALID_URL and result.status is None, result


@pytest.fixture
async def start() -> AsyncIterator[Callable[[str, Callable[[web.Request], Awaitable[web.StreamResponse]]],
                                            Awaitable[str]]]:
    """``await start(address, handler)``: the origin of a server on that loopback address."""
    runners: list[web.AppRunner] = []

    async def run(address: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> str:
        app = web.Application()
        app.router.add_get("/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, address, 0)
        await site.start()
        return f"http://{address}:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    yield run
    for runner in runners:
        await runner.cleanup()


async def test_a_robots_txt_redirecting_to_a_refused_address_blames_that_address(start, sqlite_url):
    asked: list[str] = []

    async def elsewhere(request: web.Request) -> web.StreamResponse:
        asked.append(request.path)
        return web.Response(text="User-agent: *\nDisallow:\n")

    refused = await start("127.0.0.2", elsewhere)  # loopback the seed did not name: the policy refuses it

    async def seed_site(request: web.Request) -> web.StreamResponse:
        if request.path == "/robots.txt":
            raise web.HTTPMovedPermanently(f"{refused}/robots.txt")
        return web.Response(text="<html><body>a story</body></html>", content_type="text/html")

    origin = await start("127.0.0.1", seed_site)
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/story", UrlKind.DETAIL, "sitemap:x")])
    await aharvest(settings, SiteProfile.build(seeds=(f"{origin}/",)))  # robots.txt's redirect was answered
    with FrontierStore.open(settings) as store:
        info = store.url_info(f"{origin}/story")
        problems = (store.last_run("discover") or {}).get("counters", {}).get("problems") or []
    assert asked == []  # nothing was sent to the refused address
    assert info is not None and info.last_error_class == "address_refused", info
    assert f"{refused}/robots.txt" in (info.last_error or ""), info.last_error
    assert f"where {origin}/robots.txt redirects" in info.last_error
    assert any(f"robots.txt unavailable (address_refused at {refused}/robots.txt)" in p for p in problems), problems
