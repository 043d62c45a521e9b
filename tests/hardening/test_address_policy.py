"""Invariant 9: a fetch goes only to an address the policy allows, on every hop, robots.txt and sitemaps included.

A seed site on 127.0.0.1 names other loopback addresses (127.0.0.2, 127.0.0.3, where real servers count what
arrives), a private one (10.0.0.5) and the link-local metadata address (169.254.169.254) in its robots.txt, its
sitemap, its links and its redirects. Those two are named as inputs only: the policy refuses them before any
connect. Linux routes all of 127.0.0.0/8 to the loopback interface, so the servers on .2 and .3 are real.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from ipaddress import ip_address
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from harvester import aharvest
from harvester.errors import ConfigError
from harvester.fetch.addresses import AddressPolicy, AddressRefused, refusal_reason
from harvester.fetch.http import Fetcher
from harvester.frontier import FrontierStore
from harvester.records import ErrorClass
from harvester.settings import HttpSettings, Settings, parse_networks
from harvester.site_profile import SiteProfile

REFUSED_NAMES = ("10.0.0.5", "169.254.169.254")
"""Named in the seed site, never connected to: the policy refuses them whatever the profile allows here."""


# --- the pure classification ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.2", "loopback"),
    ("10.0.0.5", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.100.100.200", "not globally routable"),  # shared address space (a metadata service lives there)
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fc00::5", "private"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.2", "loopback"),  # IPv4-mapped: a dual-stack socket connects to 127.0.0.2
    ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::a00:5", "private"),  # NAT64 of 10.0.0.5
    ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 of 169.254.169.254
    ("8.8.8.8", None),
    ("2606:4700::1111", None),
    ("::ffff:8.8.8.8", None),  # an IPv4-mapped public address is as public as the address it carries
    ("64:ff9b::808:808", None),  # NAT64 of a public address (an IPv6-only network with DNS64)
])
def test_addresses_are_classified_by_what_they_reach(address: str, reason: str | None):
    found = refusal_reason(ip_address(address))
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason), found


def test_an_allowed_network_or_a_seed_origin_lets_a_refused_address_through():
    policy = AddressPolicy(allow=parse_networks(["10.20.0.0/16", "fd00::/8"]), seeds={(ip_address("127.0.0.1"), 8080)})
    assert policy.refusal(ip_address("10.20.3.4"), 5432) is None  # a network allowed: every port
    assert policy.refusal(ip_address("fd00::7")) is None
    assert policy.refusal(ip_address("127.0.0.1"), 8080) is None
    assert policy.refusal(ip_address("::ffff:127.0.0.1"), 8080) is None  # the seed, written as IPv4-mapped IPv6
    assert policy.refusal(ip_address("127.0.0.1"), 6379) == (
        "127.0.0.1 port 6379 is loopback, and no seed names that port")
    assert policy.refusal(ip_address("127.0.0.1")) is not None  # no port known: no seed matches
    assert policy.refusal(ip_address("127.0.0.2"), 8080) == "127.0.0.2 is loopback"  # exact addresses, not a range
    assert policy.refusal(ip_address("10.21.0.1")) == "10.21.0.1 is private"
    assert policy.refusal(ip_address("169.254.169.254")) == "169.254.169.254 is link-local"


@pytest.mark.parametrize("host", ["127.0.0.2", "::ffff:127.0.0.2", "[::1]", "0.0.0.0", "127.1", "1.2.3"])
def test_an_ip_literal_host_is_judged_and_an_unparsable_one_refused(host: str):
    with pytest.raises(AddressRefused):
        AddressPolicy().check_literal(host)
    AddressPolicy(allow=parse_networks(["0.0.0.0/0", "::/0"])).check_literal("127.0.0.2")  # policy off: passes


@pytest.mark.parametrize(("value", "said"), [
    ("10.0.0.5/8", "did you mean '10.0.0.0/8'"),
    ("intranet", "'intranet' is not an IP network"),
    ("10.0.0.0/33", "'10.0.0.0/33' is not an IP network"),
])
def test_a_bad_allowance_is_a_config_error_naming_the_value(value: str, said: str):
    with pytest.raises(ConfigError, match=said) as site_err:
        SiteProfile.build(seeds=("http://127.0.0.1/",), allow_addresses=(value,))
    assert "allow_addresses" in str(site_err.value)
    with pytest.raises(ConfigError, match=said):
        Settings.load(**{"http": {"allow_addresses": (value,)}})


def test_allowances_are_normalised():
    assert SiteProfile.build(seeds=("http://127.0.0.1/",), allow_addresses=(" 10.0.0.0/8", "::1")).allow_addresses \
        == ("10.0.0.0/8", "::1/128")


# --- servers on loopback addresses ---------------------------------------------------------------------------


@dataclass
class Server:
    """One loopback server and every request that reached it."""

    address: str
    port: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def origin(self) -> str:
        return f"http://{self.address}:{self.port}"


Handler = Callable[[web.Request, Server], Awaitable[web.StreamResponse]]


async def page(request: web.Request, server: Server) -> web.StreamResponse:
    where = f"{server.origin}{request.path}"  # one content per URL: none is taken for another's duplicate
    return web.Response(text=f"<html><title>{where}</title><body>page {where}</body></html>", content_type="text/html")


@pytest.fixture
async def start() -> AsyncIterator[Callable[[str, Handler], Awaitable[Server]]]:
    runners: list[web.AppRunner] = []

    async def run(address: str, handler: Handler) -> Server:
        server = Server(address)

        async def record(request: web.Request) -> web.StreamResponse:
            server.paths.append(request.path)
            return await handler(request, server)

        app = web.Application()
        app.router.add_get("/{tail:.*}", record)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, address, 0)
        await site.start()
        server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return server

    yield run
    for runner in runners:
        await runner.cleanup()


def seed_site(targets: list[str]) -> Handler:
    """The seed: robots.txt names a sitemap on every target too; its sitemap lists a page and a redirect to
    every target and the targets themselves; its page links to every target."""

    async def handler(request: web.Request, server: Server) -> web.StreamResponse:
        origin = server.origin
        if request.path == "/robots.txt":
            extra = "".join(f"Sitemap: {t}/sitemap.xml\n" for t in targets)
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n{extra}")
        if request.path == "/sitemap.xml":
            locs = [f"{origin}/", f"{origin}/links"]
            locs += [f"{origin}/redirect/{i}" for i in range(len(targets))]
            locs += [f"{t}/from-sitemap" for t in targets]
            body = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
            return web.Response(content_type="application/xml",
                                text=f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>')
        if request.path.startswith("/redirect/"):
            raise web.HTTPFound(f"{targets[int(request.path.rsplit('/', 1)[1])]}/from-redirect")
        if request.path == "/links":
            links = "".join(f'<a href="{t}/from-link">x</a>' for t in targets)
            return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")
        return await page(request, server)

    return handler


async def harvest(settings: Settings, profile: SiteProfile) -> dict[str, tuple[str, str | None]]:
    """The public library call a user makes (``harvester.aharvest``: discovery, then extraction), then each
    URL's state and error class as the frontier holds them."""
    await aharvest(settings, profile)
    with FrontierStore.open(settings) as store:
        return {url: (info.state, info.last_error_class)
                for url in store.url_states() if (info := store.url_info(url)) is not None}


def profile_for(seed: Server, targets: list[str], **fields: object) -> SiteProfile:
    """Scope lets every target host in: only the address policy stands between the crawl and them."""
    hosts = tuple(urlsplit(t).hostname or "" for t in targets)
    return SiteProfile.build(seeds=(f"{seed.origin}/",), scope={"domains": hosts}, **fields)


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
async def test_a_harvest_sends_nothing_to_addresses_its_seed_did_not_name(start, sqlite_url, transport: str):
    two = await start("127.0.0.2", page)
    three = await start("127.0.0.3", page)
    targets = [two.origin, three.origin, *(f"http://{name}" for name in REFUSED_NAMES)]
    seed = await start("127.0.0.1", seed_site(targets))
    settings = Settings.load(database_url=sqlite_url, http={"transport": transport})

    states = await harvest(settings, profile_for(seed, targets))

    assert two.paths == [] and three.paths == []  # not robots.txt, not a sitemap, not a page
    assert states[f"{seed.origin}/links"] == ("done", None)  # control: the seed site itself was harvested
    for target in targets:
        for where in ("from-link", "from-sitemap"):
            assert states[f"{target}/{where}"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value), (target, where)
    for i in range(len(targets)):  # the redirect's first hop was fetched, the hop to the refused address not
        assert states[f"{seed.origin}/redirect/{i}"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value)
    assert seed.paths.count("/robots.txt") == 1


async def test_the_profiles_allowance_lets_the_harvest_reach_those_addresses(start, sqlite_url):
    two = await start("127.0.0.2", page)
    three = await start("127.0.0.3", page)
    targets = [two.origin, three.origin, *(f"http://{name}" for name in REFUSED_NAMES)]
    seed = await start("127.0.0.1", seed_site(targets))
    settings = Settings.load(database_url=sqlite_url)

    states = await harvest(settings, profile_for(seed, targets, allow_addresses=("127.0.0.2", "127.0.0.3/32")))

    for server in (two, three):
        assert {"/robots.txt", "/sitemap.xml", "/from-link", "/from-sitemap", "/from-redirect"} <= set(server.paths)
        assert states[f"{server.origin}/from-link"] == ("done", None)
        assert states[f"{server.origin}/from-sitemap"] == ("done", None)
    for i, target in enumerate(targets):
        expected = ("done", None) if i < 2 else ("skipped", ErrorClass.ADDRESS_REFUSED.value)
        assert states[f"{seed.origin}/redirect/{i}"] == expected, target
        assert states[f"{target}/from-link"][1] == expected[1]


async def test_the_settings_allowance_counts_too(start, sqlite_url):
    two = await start("127.0.0.2", page)
    seed = await start("127.0.0.1", seed_site([two.origin]))
    settings = Settings.load(database_url=sqlite_url, http={"allow_addresses": ("127.0.0.0/8",)})
    states = await harvest(settings, profile_for(seed, [two.origin]))
    assert "/from-link" in two.paths and states[f"{two.origin}/from-link"] == ("done", None)


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore"])
async def test_a_host_name_resolving_to_a_refused_address_is_refused(start, sqlite_url, tmp_path, transport: str):
    # localhost resolves (through the production resolver, getaddrinfo) to 127.0.0.1; the seed is on 127.0.0.2.
    one = await start("127.0.0.1", page)
    named = f"http://localhost:{one.port}"
    seed = await start("127.0.0.2", seed_site([named]))
    settings = Settings.load(database_url=sqlite_url, http={"transport": transport})

    states = await harvest(settings, profile_for(seed, [named]))
    assert one.paths == []
    assert states[f"{named}/from-link"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value)
    assert states[f"{seed.origin}/redirect/0"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value)

    # Control: allowed, the same name is fetched (a fresh frontier: the refused URLs are final in the first).
    allowed = settings.with_overrides(database_url=f"sqlite:///{tmp_path / 'allowed.db'}")
    states = await harvest(allowed, profile_for(seed, [named], allow_addresses=("127.0.0.1",)))
    assert {"/robots.txt", "/from-link", "/from-redirect"} <= set(one.paths)
    assert states[f"{named}/from-link"] == ("done", None)


@pytest.mark.parametrize("transport", ["aiohttp", "httpcore", "http2"])
@pytest.mark.parametrize("spelling", [
    "127.0.0.2", "127.0.0.2.", "[::ffff:127.0.0.2]", "[::ffff:7f00:2]",  # literals: judged before aiohttp connects
    "2130706434", "127.2",  # legacy numeric forms socket would map onto 127.0.0.2: refused as unjudgeable
    "0x7f000002",  # not a literal to aiohttp: getaddrinfo maps it to 127.0.0.2, which the resolver drops
])
async def test_every_spelling_of_a_refused_address_is_refused_at_the_fetch(start, transport: str, spelling: str):
    two = await start("127.0.0.2", page)
    seed = await start("127.0.0.1", page)
    fetcher = Fetcher(HttpSettings(transport=transport), user_agent="harvester/0.1 (+test)", seeds=(seed.origin,))
    try:
        ok = await fetcher.fetch(f"{seed.origin}/")
        result = await fetcher.fetch(f"http://{spelling}:{two.port}/x")
    finally:
        await fetcher.aclose()
    assert ok.ok  # control: the seed's own address is fetched
    assert two.paths == []
    assert result.error_class is ErrorClass.ADDRESS_REFUSED and result.status is None, result.error


async def test_a_redirect_hop_to_a_refused_address_sends_nothing_there(start, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="harvester.fetch.http")
    two = await start("127.0.0.2", page)

    async def hop(request: web.Request, server: Server) -> web.StreamResponse:
        raise web.HTTPMovedPermanently(f"{two.origin}/moved")

    seed = await start("127.0.0.1", hop)
    fetcher = Fetcher(HttpSettings(), user_agent="harvester/0.1 (+test)", seeds=(seed.origin,))
    try:
        result = await fetcher.fetch(f"{seed.origin}/old")
    finally:
        await fetcher.aclose()
    assert result.error_class is ErrorClass.ADDRESS_REFUSED and result.status == 301
    assert result.redirects == (f"{two.origin}/moved",) and result.final_url == f"{two.origin}/moved"
    assert seed.paths == ["/old"] and two.paths == []
    logged = [r for r in caplog.records if getattr(r, "error_class", None) == "address_refused"]
    assert len(logged) == 1 and "127.0.0.2 is loopback" in logged[0].getMessage()


async def test_the_seed_exemption_covers_the_seeds_port_not_every_port_of_its_address(start, sqlite_url, tmp_path):
    """robots.txt, the sitemap, a link and a redirect of the seed on 127.0.0.1 name another service on the same
    address (another port): nothing reaches it, where the exemption once covered the seed's whole machine. The
    profile's allowance still lets it in (control)."""
    other = await start("127.0.0.1", page)
    seed = await start("127.0.0.1", seed_site([other.origin]))
    settings = Settings.load(database_url=sqlite_url)

    states = await harvest(settings, profile_for(seed, [other.origin]))
    assert other.paths == []
    assert states[f"{seed.origin}/links"] == ("done", None)  # control: the seed's own port is harvested
    assert states[f"{other.origin}/from-link"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value)
    assert states[f"{seed.origin}/redirect/0"] == ("skipped", ErrorClass.ADDRESS_REFUSED.value)

    allowed = settings.with_overrides(database_url=f"sqlite:///{tmp_path / 'allowed.db'}")
    states = await harvest(allowed, profile_for(seed, [other.origin], allow_addresses=("127.0.0.1",)))
    assert {"/robots.txt", "/sitemap.xml", "/from-link", "/from-redirect"} <= set(other.paths)
    assert states[f"{other.origin}/from-link"] == ("done", None)
