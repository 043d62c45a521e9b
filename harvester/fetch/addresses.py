"""The address policy: which IP addresses a fetch may connect to.

A URL, a sitemap entry or a redirect can name a cloud metadata service, a router or the crawler's own machine; so
can a host name whose DNS answer is private. Only globally routable addresses are fetched, plus the networks a
site profile or the settings allow and the exact addresses the seeds resolved to. Pure: never resolves or
connects (``resolver.py`` applies the policy where the transports resolve and connect).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address

from harvester.settings import Network

Address = IPv4Address | IPv6Address

NAT64_PREFIX = IPv6Network("64:ff9b::/96")
"""RFC 6052's well-known prefix: the last 32 bits are an IPv4 address a NAT64 gateway connects to (on an IPv6-only
network with DNS64 every IPv4 site resolves into it, so it is judged by the address it carries)."""

_REASONS = (
    ("unspecified", "is_unspecified"),  # first: 0.0.0.0 and :: are also "private" to ipaddress
    ("loopback", "is_loopback"),
    ("link-local", "is_link_local"),  # 169.254.169.254: cloud metadata services
    ("multicast", "is_multicast"),
    ("reserved", "is_reserved"),  # before private: 240.0.0.0/4 is both, and "reserved" says more
    ("private", "is_private"),
    ("site-local", "is_site_local"),  # fec0::/10, deprecated but routed privately; ipaddress calls it global
)


class AddressRefused(OSError):
    """A connection the policy refuses: no request was sent. An ``OSError`` so that the transports pass it up as
    a failed connect; ``http.py`` turns it into an ``ADDRESS_REFUSED`` result and it never leaves there."""

    def __init__(self, host: str, reasons: Iterable[str]) -> None:
        self.host = host
        self.reasons = tuple(dict.fromkeys(reasons))
        super().__init__(f"address policy refused {host}: {'; '.join(self.reasons) or 'no address'}")


def parse_address(text: str) -> Address | None:
    """An IP address written as a URL host or a resolver answer (IPv6 with or without brackets, a zone index
    allowed), or None when ``text`` is not one."""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 address stands for: IPv4-mapped (``::ffff:a.b.c.d``, which a dual-stack socket
    connects to over IPv4), NAT64 (RFC 6052) and 6to4 (RFC 3056); None otherwise."""
    if isinstance(address, IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64_PREFIX:
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.sixtofour


def refusal_reason(address: Address) -> str | None:
    """Why ``address`` is not fetched by default (``"loopback"``, ``"private"``, ``"link-local"``...), or None
    for a globally routable address. An IPv6 form of an IPv4 address is judged by the IPv4 address."""
    inner = embedded_ipv4(address)
    if inner is not None:
        reason = refusal_reason(inner)
        return None if reason is None else f"{reason} ({inner} as {address})"
    for name, prop in _REASONS:
        if getattr(address, prop, False):
            return name
    if not address.is_global:
        return "not globally routable"  # 100.64.0.0/10 (shared, e.g. 100.100.100.200 metadata) and the like
    return None




SeedOrigin = tuple[Address, int]
"""An address and port a seed resolved to: the exemption covers that service, not every port of the machine."""


@dataclass(slots=True)
class AddressPolicy:
    """The networks allowed beyond the global internet (profile and settings), and the seeds' own origins.

    ``seeds`` holds exact (address, port) pairs, added once at the start of a run (``resolver.seed_addresses``),
    so an intranet crawl or a loopback test web works with default settings while nothing else private is
    reached: not even another port of the seed's machine, which a robots.txt ``Sitemap:`` line or a redirect
    could name (a database's or an admin console's HTTP port). The allowed networks cover every port.
    """

    allow: tuple[Network, ...] = ()
    seeds: set[SeedOrigin] = field(default_factory=set)

    def refusal(self, address: Address, port: int | None = None) -> str | None:
        """Why a connection to ``address`` (at ``port``; None matches no seed) is refused, or None when allowed."""
        reason = refusal_reason(address)
        if reason is None:
            return None
        inner = embedded_ipv4(address)
        forms = (address,) if inner is None else (address, inner)
        for form in forms:
            if (form, port) in self.seeds or any(form in network for network in self.allow):
                return None
        if port is not None and any(form == seed for form in forms for seed, _ in self.seeds):
            return f"{address} port {port} is {reason}, and no seed names that port"
        return f"{address} is {reason}"

    def check_literal(self, host: str, port: int | None = None) -> None:
        """Raise ``AddressRefused`` unless the IP-literal ``host`` may be connected to at ``port`` (a literal that
        does not parse as an address is refused: the transport would connect to something never judged)."""
        address = parse_address(host)
        if address is None:
            raise AddressRefused(host, [f"{host!r} is not an IP address this policy can judge"])
        reason = self.refusal(address, port)
        if reason is not None:
            raise AddressRefused(host, [reason])


def address_refusal(exc: BaseException) -> AddressRefused | None:
    """The ``AddressRefused`` behind an exception a transport raised (aiohttp and httpx wrap it), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 8:
        if isinstance(current, AddressRefused):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
