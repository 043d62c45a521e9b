"""RFC 9309 records and groups: a robots.txt body → the one group this crawler obeys, rendered for protego.

protego ends a group at any record that follows a rule, so a ``Crawl-delay`` or an unknown line between two
``User-agent`` lines splits what RFC 9309 §2.1 (and §2.2.4: other records MUST NOT interfere) makes one group.
This module reads the records and groups them per the RFC, picks the groups of our product token (or of ``*``),
and hands protego one ``User-agent: *`` group holding only those rules; protego still matches paths (longest
match, ``*``/``$``, percent-encoding) and parses Crawl-delay / Request-rate / Sitemap values. A Crawl-delay or
Request-rate line belongs to the user-agent lines written just above it, not to the whole merged group: the RFC
does not define those records, and a site that writes ``User-agent: ourbot / Crawl-delay: 10`` then
``User-agent: * / Crawl-delay: 1`` means 10 s for us (issue 31). Pure; never fetches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from protego import Protego

from harvester.settings import PRODUCT_TOKEN_PATTERN

USER_AGENT = frozenset(("user-agent", "useragent", "user agent"))
ALLOW = frozenset(("allow",))
DISALLOW = frozenset(("disallow", "dissallow", "dissalow", "disalow", "diasllow", "disallaw"))
"""Rule keys: the RFC's, plus the misspellings Google's reference parser and protego accept (§2.2.4 allows leniency)."""

SITEMAP = frozenset(("sitemap", "sitemaps", "site-map"))
GROUP_MEMBERS = {"crawl-delay": "Crawl-delay", "crawl delay": "Crawl-delay", "crawldelay": "Crawl-delay",
                 "request-rate": "Request-rate", "request rate": "Request-rate", "requestrate": "Request-rate"}
"""Other records (§2.2.4) that belong to the group being read, rendered under protego's spelling (the run-together
spellings too, which temoto/robotstxt reads: a site that asks for a delay gets it)."""

KNOWN = USER_AGENT | ALLOW | DISALLOW | SITEMAP | frozenset(GROUP_MEMBERS)

_EOL = re.compile(r"\r\n|\r|\n")
"""RFC 9309 §2.1: EOL is CR, LF or CRLF (str.splitlines would also split on form feeds and U+2028)."""

TOKEN_START = re.compile(PRODUCT_TOKEN_PATTERN.strip("^$"))
"""§2.2.1: a product token is letters, ``_`` and ``-``; a name is read up to its first other character."""

_BREAKS = re.compile("[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
"""What protego's str.splitlines reads as a line end inside one RFC line: percent-encoded before rendering (the RFC
encodes such octets before comparing anyway, §2.2.2), so a value can never forge a record of its own."""


@dataclass(frozen=True, slots=True)
class Record:
    """One ``key: value`` line (key lower-cased, comment and surrounding whitespace stripped; ``line`` from 1)."""

    line: int
    key: str
    value: str


@dataclass(slots=True)
class Group:
    """The lower-cased product tokens of one group (``*`` for the global one) and its records in order.

    ``paced``: each Crawl-delay / Request-rate record with the agents it was written for: in the group's head
    (among its user-agent lines), the user-agent lines just above it; after the group's first rule, every agent
    of the group."""

    agents: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    paced: list[tuple[tuple[str, ...], Record]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ParsedRobots:
    """A body read per RFC 9309 §2.1: its groups, its Sitemap values (anywhere in the file), every record."""

    groups: tuple[Group, ...]
    sitemaps: tuple[str, ...]
    records: tuple[Record, ...]


def split_record(line: str) -> tuple[str, str] | None:
    """``key: value`` → (lower-cased key, value); None for a line that is no record.

    As Google's reference parser: a known key may be followed by whitespace instead of the colon ("disallow /"),
    and a value may hold colons of its own ("Sitemap https://…").
    """
    key, colon, value = line.partition(":")
    key = key.strip().lower()
    if colon and (key in KNOWN or not any(ch.isspace() for ch in key)):
        return key, value.strip()
    words = line.split(None, 1)
    if len(words) == 2 and words[0].lower() in KNOWN:
        return words[0].lower(), words[1].strip()
    return (key, value.strip()) if colon else None


def parse(body: str) -> ParsedRobots:
    """Groups per RFC 9309 §2.1: consecutive user-agent lines start a group (blank lines and other records
    between them included, §2.2.4); a user-agent line after a rule starts the next one. Rules before any
    user-agent line belong to no group and are ignored."""
    body = body.removeprefix("\ufeff")
    groups: list[Group] = []
    sitemaps: list[str] = []
    records: list[Record] = []
    current: Group | None = None
    had_rule = False
    heading: list[str] = []  # the user-agent lines a Crawl-delay in the group's head belongs to
    heading_closed = False
    for number, raw in enumerate(_EOL.split(body), start=1):
        parsed = split_record(raw.split("#", 1)[0])
        if parsed is None:
            continue
        record = Record(number, *parsed)
        records.append(record)
        if record.key in USER_AGENT:
            if current is None or had_rule:
                current, had_rule = Group(), False
                groups.append(current)
                heading, heading_closed = [], False
            elif heading_closed:
                heading, heading_closed = [], False
            token = agent_token(record.value)
            current.agents.append(token)
            heading.append(token)
        elif record.key in SITEMAP:
            if record.value:
                sitemaps.append(record.value)
        elif current is not None:
            had_rule |= record.key in ALLOW or record.key in DISALLOW
            current.records.append(record)
            if record.key in GROUP_MEMBERS:
                current.paced.append((tuple(current.agents if had_rule else heading), record))
                heading_closed = not had_rule
            elif not had_rule:
                heading_closed = True  # an unknown record too ends the lines a later Crawl-delay belongs to
    return ParsedRobots(tuple(groups), tuple(sitemaps), tuple(records))


def agent_token(value: str) -> str:
    """A user-agent line's value → the lower-cased token it names: ``*``, or its leading letters, ``_`` and ``-``
    ("Foo Bar" and "FooBot/1.0" name "foo" and "foobot", as Google reads them); "" matches no crawler."""
    value = value.strip()
    if value == "*" or (value.startswith("*") and value[1:2].isspace()):
        return "*"
    match = TOKEN_START.match(value)
    return match.group(0).lower() if match else ""


def selected_agent(parsed: ParsedRobots, token: str) -> str | None:
    """The agent whose groups our crawler obeys (RFC 9309 §2.2.1): ``token`` (lower-cased) when a group names it,
    else ``*`` when a group names that, else None (no group applies: no rules)."""
    token = token.lower()
    for wanted in (token, "*"):
        if any(wanted in group.agents for group in parsed.groups):
            return wanted
    return None


def select(parsed: ParsedRobots, token: str) -> list[Record]:
    """The records our crawler obeys: the rules of every group naming the selected agent (``selected_agent``),
    combined (§2.2.1: groups merge only when they name the same agent), and the Crawl-delay / Request-rate
    records written for that agent (``Group.paced``): another agent's never apply, even in a shared group."""
    wanted = selected_agent(parsed, token)
    if wanted is None:
        return []
    chosen: list[Record] = []
    for group in parsed.groups:
        if wanted not in group.agents:
            continue
        chosen.extend(record for record in group.records if record.key not in GROUP_MEMBERS)
        chosen.extend(record for agents, record in group.paced if wanted in agents)
    return chosen


def render(records: list[Record], sitemaps: tuple[str, ...] = ()) -> str:
    """The selected records as one ``User-agent: *`` group for protego, with the Sitemap lines after it. Of
    several Crawl-delay (or Request-rate) values, only the slowest valid one is rendered (protego keeps the last):
    merged groups that each set one leave the crawler the most polite pace, whatever their order."""
    lines = ["User-agent: *"]
    for record in records:
        if record.key in ALLOW or record.key in DISALLOW:
            lines.append(f"{'Allow' if record.key in ALLOW else 'Disallow'}: {_rule_value(record)}")
    for spelling in ("Crawl-delay", "Request-rate"):
        values = [_safe(r.value) for r in records if GROUP_MEMBERS.get(r.key) == spelling]
        slowest = max(values, key=lambda value: _interval_s(spelling, value), default=None)
        if slowest is not None:
            lines.append(f"{spelling}: {slowest}")
    lines.extend(f"Sitemap: {_safe(url)}" for url in sitemaps)
    return "\n".join(lines) + "\n"


def _interval_s(spelling: str, value: str) -> float:
    """Seconds between requests that one Crawl-delay / Request-rate value asks for, read as protego reads it;
    -1 for a value protego ignores (so any valid one is slower)."""
    parser = Protego.parse(f"User-agent: *\n{spelling}: {value}\n")
    if spelling == "Crawl-delay":
        delay = parser.crawl_delay("*")
        return float(delay) if delay is not None else -1.0
    rate = parser.request_rate("*")
    return float(rate.seconds) / float(rate.requests) if rate is not None and rate.requests > 0 else -1.0


def _rule_value(record: Record) -> str:
    value = query_slashes(_safe(record.value))
    if record.key in ALLOW and value.endswith("/index.html"):
        # protego (as Google) reads "Allow: /d/index.html" as also allowing "/d/"; RFC 9309 §2.2.2 matches the
        # path as written. A trailing "*" matches the same paths and keeps protego's extension off (the rule
        # then counts one octet longer in the longest-match comparison: the one known difference).
        value += "*"
    return value


def _safe(value: str) -> str:
    return _BREAKS.sub(lambda m: "".join(f"%{byte:02X}" for byte in m.group(0).encode()), value)


_QUERY_SLASH = re.compile("%2F", re.IGNORECASE)


def query_slashes(value: str) -> str:
    """``%2F`` after the first ``?`` read as ``/``: in a query "/" separates nothing, so both spellings are one
    (RFC 9309 §2.2.2's table matches "?baz=https://foo.bar" and "?baz=https%3A%2F%2Ffoo.bar" alike). protego keeps
    ``%2F`` apart from ``/``, rightly in the path, where it is a separator."""
    path, mark, query = value.partition("?")
    return path + mark + _QUERY_SLASH.sub("/", query) if mark else value


def group_body(body: str, token: str) -> str:
    """``body`` reduced to what ``token``'s crawler obeys, in a form protego parses as the RFC would."""
    parsed = parse(body)
    return render(select(parsed, token), parsed.sitemaps)


def robots_path(url: str) -> str:
    """What rules match against (RFC 9309 §2.2.2): the path, params and query of ``url``, no fragment; "/" when
    there is none. Accepts the schemeless forms Google's reference parser accepts ("example.com/a", "//h/a")."""
    rest = url[2:] if url.startswith("//") else url
    scheme = rest.find("://")
    delimiter = _first_of(rest, "/?;")
    if scheme != -1 and scheme < delimiter:
        rest = rest[scheme + 3:]
    rest = rest.split("#", 1)[0]
    start = _first_of(rest, "/?;")
    if start == len(rest):
        return "/"
    path = rest[start:]
    return query_slashes(path if path.startswith("/") else "/" + path)


def _first_of(text: str, chars: str) -> int:
    return min((i for i in (text.find(ch) for ch in chars) if i != -1), default=len(text))
