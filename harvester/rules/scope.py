"""Crawl scope and trap filters: which canonical URLs a site's crawl takes, with a count
per verdict for the discovery report. Small per-site state (counters, learned trap patterns), never I/O."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from enum import StrEnum
from urllib.parse import unquote

from harvester.rules.urls import canonicalizer_for
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

MAX_TRAP_EXAMPLES = 5
"""Rejected URLs remembered per verdict for the discovery report."""

MAX_TRAP_PATTERNS = 10_000
"""Calendar and facet patterns tracked per site; new ones past this are refused as traps."""




class Verdict(StrEnum):
    """Why ``UrlFilter.check`` refused a URL (None means accepted)."""

    OUT_OF_SCOPE = "out_of_scope"
    TRAP_LENGTH = "trap:length"
    TRAP_DEPTH = "trap:depth"
    TRAP_REPEATED_SEGMENTS = "trap:repeated_segments"
    TRAP_SESSION_ID = "trap:session_id"
    TRAP_FACETS = "trap:facets"
    TRAP_CALENDAR = "trap:calendar"

    @property
    def is_trap(self) -> bool:
        return self.value.startswith("trap:")


_YEAR = re.compile(r"(?:19|20|21)\d\d")
_DATE_SEGMENT = re.compile(r"(?:19|20|21)\d\d(?:[-_.]?(?:0?[1-9]|1[0-2])(?:[-_.]?(?:0?[1-9]|[12]\d|3[01]))?)?")
_SMALL_NUMBER = re.compile(r"\d{1,2}")
_DATE_PARAMS = frozenset(("date", "day", "month", "year", "week", "y", "m", "d", "ym", "cal", "calendar", "from", "to"))


def _split_host_path(url: str) -> tuple[str, str, str]:
    """(netloc, path, query) of a canonical URL, without re-parsing."""
    rest = url.partition("://")[2]
    slash = rest.find("/")
    netloc, path_query = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    path, _, query = path_query.partition("?")
    return netloc, path, query


def _origins(canonical: str) -> tuple[str, ...]:
    """A canonical URL's origin (scheme included: http://h and https://h are two origins, RFC 6454, and a
    sitemap's URLs are of its own protocol, sitemaps.org) and its www twin's; for https on the default port, the
    http ones too.

    An https site naming its own pages by http:// (a sitemap written behind a TLS proxy, links from before its
    move) is common on the web, and its http answers redirect to https: dropped as another origin, such a site
    yielded its home page and nothing else. The reverse is not admitted: an http site's https twin may speak no
    TLS at all (an http sitemap's https entries, queued, parked their host every run); a seed that moved to https
    is admitted there by its recorded move (``UrlFilter.add_host``). With an explicit port, one port speaks one
    protocol: no twin."""
    scheme, _, rest = canonical.partition("://")
    netloc = rest.partition("/")[0]
    twin = netloc[4:] if netloc.startswith("www.") else "www." + netloc
    if scheme == "https" and ":" not in netloc.rpartition("]")[2]:
        return f"https://{netloc}", f"https://{twin}", f"http://{netloc}", f"http://{twin}"
    return f"{scheme}://{netloc}", f"{scheme}://{twin}"


def _calendar_pattern(path: str, query: str) -> str | None:
    """The URL's pattern with its date generalized when it ENDS in a date (a calendar page); else None.

    /calendar/2026/11, /events/2026-11-05 and /agenda?month=11&year=2026 are calendar pages; a news article
    /2026/11/05/some-headline is not (the date is followed by a slug), so dated permalinks are never capped.
    """
    segments = [seg for seg in path.split("/") if seg]
    cut = len(segments)
    while cut > 0 and (_SMALL_NUMBER.fullmatch(segments[cut - 1]) or _DATE_SEGMENT.fullmatch(segments[cut - 1])):
        cut -= 1
    tail = segments[cut:]
    date_in_path = bool(tail) and _DATE_SEGMENT.fullmatch(tail[0]) is not None and _YEAR.match(tail[0]) is not None
    date_params: list[str] = []
    if query:
        for piece in query.split("&"):
            name, _, value = piece.partition("=")
            if name.lower() in _DATE_PARAMS and (_DATE_SEGMENT.fullmatch(value) or _SMALL_NUMBER.fullmatch(value)):
                date_params.append(name.lower())
    if not date_in_path and not date_params:
        return None
    head = "/".join(segments[:cut] if date_in_path else segments)
    return head + ("/{date}" if date_in_path else "") + "?" + "&".join(sorted(date_params))


class UrlFilter:
    """Scope and trap decisions for one site, with counts per verdict for the discovery report.

    Built once per site. Stateless checks (scope, length, depth, repeated segments, session ids) are pure;
    calendar and facet pages are counted per instance, so one instance must see all of a site's URLs.
    Re-checking an accepted URL accepts it again without counting it twice.

    The page budget is not decided here: a URL over it is still known, and waits in the frontier for a run with
    room (``harvester.phases.budget``). Refusing it at admission lost it for good once its sitemap answered 304.
    """

    def __init__(self, settings: Settings, profile: SiteProfile | None = None, seeds: Iterable[str] = ()) -> None:
        urls = settings.urls
        self._max_length = urls.max_url_length
        self._max_depth = urls.max_path_depth
        self._max_repeats = urls.max_repeated_segments
        self._segments_needed = min(self._max_depth, self._max_repeats)
        self._max_facets = urls.max_facets
        self._max_calendar = urls.max_calendar_urls
        self._max_facet_urls = urls.max_facet_urls
        self._session = frozenset(name.lower() for name in urls.session_params)
        self._facets = frozenset(name.lower() for name in urls.facet_params)
        canon = canonicalizer_for(urls)
        seed_list = list(seeds) + (list(profile.seeds) if profile else [])
        self._hosts: set[str] = set()
        """The seeds' origins, scheme included (``_origins``: an https seed's http twin is the same site): a link or
        sitemap entry on an http seed's host name under https is another origin, in scope only where a move
        (``add_host``) or the profile's domains admit it.
        Keyed by host alone, an http site's sitemap naming https://its-host/x queued it on a host that speaks
        no TLS: parked as "robots.txt unavailable" and the page deferred every run."""
        for seed in seed_list:
            canonical = canon(seed)
            if canonical is None:
                continue
            # www.example.org and example.org are one site in practice (the usual redirect pair).
            self._hosts.update(_origins(canonical))
        scope = profile.scope if profile else None
        self._domains = tuple(scope.domains) if scope else ()
        self._prefixes = tuple(scope.path_prefixes) if scope else ()
        self._allow = [re.compile(p) for p in scope.allow_patterns] if scope else []
        self._deny = [re.compile(p) for p in scope.deny_patterns] if scope else []
        # No deny, prefix or allow rule: a seed host's URL is in scope without further checks.
        self._plain_scope = not (self._deny or self._prefixes or self._allow)
        self._accepted = _SeenBits()
        self._accepted_per_host: Counter[str] = Counter()
        self._calendar: dict[str, set[int]] = {}
        self._faceted: dict[str, set[int]] = {}
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[str]] = {}

    # -- scope

    def add_host(self, origin: str) -> None:
        """Put ``origin`` (and its www twin) in scope, as a seed's: where a seed host moved to (its http → https
        move included: the redirect recorded as ``hosts.moved_to``)."""
        self._hosts.update(_origins(origin + "/"))

    def denied(self, url: str) -> bool:
        """The operator's deny patterns refuse ``url``: they hold even where the scope is widened."""
        return bool(self._deny) and any(p.search(url) for p in self._deny)

    def in_scope(self, url: str) -> bool:
        """Scope only (no traps): for redirect hops and sitemap entries of a canonical URL."""
        return self._scope(url, *_split_host_path(url))

    def _scope(self, url: str, netloc: str, path: str, query: str) -> bool:
        # Deny first: an operator's deny list beats every allow rule.
        if self.denied(url):
            return False
        host = netloc.rpartition("@")[2]
        scheme = url.partition("://")[0] + "://"
        if scheme + netloc not in self._hosts and scheme + host not in self._hosts:
            hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if not any(hostname == d or hostname.endswith("." + d) for d in self._domains):
                return False
        if self._prefixes and not path.startswith(self._prefixes):
            return False
        return not self._allow or any(p.search(url) for p in self._allow)

    # -- the full check

    def check(self, url: str, *, trusted: bool = False) -> Verdict | None:
        """None when ``url`` (canonical) may be queued; else why not. Counts every verdict.

        ``trusted``: the URL comes from a finite list the site publishes (sitemap, feed), so the calendar and
        facet counters do not apply; scope and the stateless trap checks still do.
        """
        verdict = self._check(url, trusted)
        key = verdict.value if verdict is not None else "ok"
        self.counts[key] += 1
        if verdict is not None:
            examples = self.examples.setdefault(key, [])
            if len(examples) < MAX_TRAP_EXAMPLES:
                examples.append(url)
        return verdict

    def _check(self, url: str, trusted: bool) -> Verdict | None:
        # _split_host_path, inlined: this runs for every URL discovery finds.
        scheme, _, rest = url.partition("://")
        slash = rest.find("/")
        netloc, path_query = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
        path, _, query = path_query.partition("?")
        if not (self._plain_scope and url[: len(scheme) + 3 + len(netloc)] in self._hosts) and not self._scope(
                url, netloc, path, query):
            return Verdict.OUT_OF_SCOPE
        if len(url) > self._max_length:
            return Verdict.TRAP_LENGTH
        if (query or ";" in path) and self._has_session_id(path, query):
            return Verdict.TRAP_SESSION_ID
        facets = self._facet_names(query) if query else 0
        if facets > self._max_facets:
            return Verdict.TRAP_FACETS
        # The segment checks need the segments only when there may be enough of them to matter (every URL
        # of a sitemap passes here, and most paths are short).
        slashes = path.count("/")
        segments = [seg for seg in path.split("/") if seg] if slashes > self._segments_needed or query else []
        if len(segments) > self._max_depth:
            return Verdict.TRAP_DEPTH
        if (
            len(segments) > self._max_repeats
            and len(set(segments)) < len(segments)  # cheap: most paths repeat nothing
            and Counter(segments).most_common(1)[0][1] > self._max_repeats
        ):
            return Verdict.TRAP_REPEATED_SEGMENTS
        if query and self._repeats_in_query(query, segments):
            return Verdict.TRAP_REPEATED_SEGMENTS
        key = hash(url)
        if key in self._accepted:
            return None
        if not trusted:
            if facets and not self._admit(self._faceted, f"{netloc}{path}", key, self._max_facet_urls):
                return Verdict.TRAP_FACETS
            pattern = _calendar_pattern(path, query)
            # One bucket per calendar (the path before the date), whatever its query spellings: the bound is per
            # trap, not per URL shape, so /cal/2026/1?day=N and /cal/2026/02 share it.
            bucket = netloc + pattern.partition("?")[0] if pattern is not None else ""
            if pattern is not None and not self._admit(self._calendar, bucket, key, self._max_calendar):
                return Verdict.TRAP_CALENDAR
        self._accepted.add(key)
        self._accepted_per_host[netloc] += 1
        return None

    @staticmethod
    def _admit(table: dict[str, set[int]], pattern: str, key: int, cap: int) -> bool:
        seen = table.get(pattern)
        if seen is None:
            if len(table) >= MAX_TRAP_PATTERNS:
                return False  # a site minting endless calendar/facet paths: the paths themselves are the trap
            seen = table[pattern] = set()
        if key in seen:
            return True
        if len(seen) >= cap:
            return False
        seen.add(key)
        return True

    def _has_session_id(self, path: str, query: str) -> bool:
        if ";" in path:
            # Path parameters: /page;jsessionid=ABC (Java servlets).
            for param in path.split(";")[1:]:
                if param.partition("=")[0].lower() in self._session:
                    return True
        if query:
            for piece in query.split("&"):
                if piece.partition("=")[0].lower() in self._session:
                    return True
        return False

    def _repeats_in_query(self, query: str, segments: list[str]) -> bool:
        """One parameter name repeated too often, or the page's own path nested in its query
        (/login?next=/login?next=...): both grow without bound when links are built from the current URL."""
        names = Counter(piece.partition("=")[0] for piece in query.split("&"))
        if names and names.most_common(1)[0][1] > self._max_repeats:
            return True
        if segments and len(segments[-1]) >= 3 and "%" in query:
            decoded = unquote(query)
            return decoded.count(segments[-1]) > self._max_repeats - 1
        return False

    def _facet_names(self, query: str) -> int:
        return len({name for piece in query.split("&") if (name := piece.partition("=")[0].lower()) in self._facets})

    @property
    def accepted_per_host(self) -> dict[str, int]:
        return dict(self._accepted_per_host)


class _SeenBits:
    """Constant-memory "was this URL accepted before": a Bloom filter over the URL hash (2 MiB, 2 probes).

    A false positive (about 1% at a million URLs) re-accepts a new URL without spending calendar or facet quota:
    a trap's cap overshoots by that much at worst, and memory stays flat however many URLs a site has.
    """

    __slots__ = ("_bits",)

    BITS = 1 << 24

    def __init__(self) -> None:
        self._bits = bytearray(self.BITS >> 3)

    def __contains__(self, key: int) -> bool:
        bits = self._bits
        a = key & (self.BITS - 1)
        b = (key >> 24) & (self.BITS - 1)
        return bool(bits[a >> 3] & (1 << (a & 7))) and bool(bits[b >> 3] & (1 << (b & 7)))

    def add(self, key: int) -> None:
        a = key & (self.BITS - 1)
        b = (key >> 24) & (self.BITS - 1)
        self._bits[a >> 3] |= 1 << (a & 7)
        self._bits[b >> 3] |= 1 << (b & 7)
