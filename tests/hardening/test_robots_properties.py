"""The robots matcher (harvester.fetch.robots.RobotsRules.allowed) against a small reference implementation of RFC 9309
matching (longest match, ``*`` and ``$``, allow wins ties), plus the RFC's own examples and cases of Google's
reference parser tests (google/robotstxt robots_test.cc) written from their text.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harvester.fetch.robots import RobotsRules
from harvester.records import RobotsState
from harvester.settings import RobotsSettings

NOW = datetime(2026, 1, 5, tzinfo=UTC)
ORIGIN = "http://h.example"


def rules(body: str, agent: str = "foobot/1.0 (+https://x.invalid)") -> RobotsRules:
    state = RobotsState(origin=ORIGIN, status=200, fetched_at=NOW, expires_at=NOW + timedelta(hours=1), body=body)
    return RobotsRules(state, user_agent=agent, settings=RobotsSettings(), now_wall=NOW, now_mono=0.0)


# --- the reference ---------------------------------------------------------------------------------------------


def _regex(pattern: str) -> re.Pattern[str]:
    # RFC 9309 §2.2.3: "*" matches any sequence of characters, a trailing "$" anchors the end of the path.
    anchored = pattern.endswith("$")
    body = pattern[:-1] if anchored else pattern
    return re.compile("".join(".*" if ch == "*" else re.escape(ch) for ch in body) + (r"\Z" if anchored else ""))


def reference_allowed(group: list[tuple[bool, str]], path: str) -> bool:
    """RFC 9309 §2.2.2: the most specific match (the longest pattern, in octets) wins; an equivalent allow and
    disallow rule: allow SHOULD be used; no match: allowed."""
    matches = [(len(pattern), allow) for allow, pattern in group if pattern and _regex(pattern).match(path)]
    if not matches:
        return True
    longest = max(length for length, _ in matches)
    return any(allow for length, allow in matches if length == longest)


patterns = st.builds(
    lambda head, tail, dollar: head + tail + ("$" if dollar else ""),
    st.sampled_from(["/", "/a", "/b", "*", "/*"]),
    st.text(alphabet="ab/.*", max_size=6),
    st.booleans(),
)
groups = st.lists(st.tuples(st.booleans(), patterns), max_size=6)
paths = st.builds(lambda rest: "/" + rest, st.text(alphabet="ab/.", max_size=10))


@settings(max_examples=400, deadline=None)
@given(group=groups, path=paths)
def test_allowed_agrees_with_the_rfc_9309_reference(group: list[tuple[bool, str]], path: str):
    body = "User-agent: *\n" + "".join(f"{'Allow' if allow else 'Disallow'}: {pattern}\n" for allow, pattern in group)
    assert rules(body).allowed(ORIGIN + path) == reference_allowed(group, path), body


@settings(max_examples=200, deadline=None)
@given(group=groups, path=paths)
def test_the_crawlers_own_group_replaces_the_star_group(group: list[tuple[bool, str]], path: str):
    own = "".join(f"{'Allow' if allow else 'Disallow'}: {pattern}\n" for allow, pattern in group)
    body = "User-agent: *\nDisallow: /\n\nUser-agent: FooBot\n" + (own or "Allow: /\n")
    expected = reference_allowed(group, path) if group else True
    assert rules(body).allowed(ORIGIN + path) == expected, body


def test_the_reference_can_fail():
    # Control: the reference really distinguishes outcomes (it is not vacuously agreeing).
    assert reference_allowed([(False, "/a")], "/ab") is False
    assert reference_allowed([(False, "/a$")], "/ab") is True
    assert reference_allowed([(True, "/a"), (False, "/a*")], "/ab") is False  # longer pattern wins
    assert reference_allowed([(True, "/a*"), (False, "/a*")], "/ab") is True  # tie: allow


# --- RFC 9309 §5.1 example ---------------------------------------------------------------------------------

RFC_EXAMPLE = """\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


@pytest.mark.parametrize(
    ("agent", "path", "allowed"),
    [
        # foobot may fetch only /example/page.html and /example/allowed.gif.
        ("foobot", "/example/page.html", True),
        ("foobot", "/example/allowed.gif", True),
        ("foobot", "/example/other.html", False),
        ("foobot", "/publications/", False),
        # barbot and bazbot: everything but /example/page.html.
        ("barbot", "/example/page.html", False),
        ("bazbot", "/example/page.html", False),
        ("barbot", "/example/other.html", True),
        ("bazbot", "/image.gif", True),
        # quxbot: an empty group, everything.
        ("quxbot", "/example/page.html", True),
        ("quxbot", "/x.gif", True),
        # Everyone else: nothing under /example/, no .gif, but /publications/.
        ("otherbot", "/example/page.html", False),
        ("otherbot", "/image.gif", False),
        ("otherbot", "/image.gif?size=2", True),
        ("otherbot", "/publications/", True),
        ("otherbot", "/publications/cover.html", True),
        ("otherbot", "/", True),
    ],
)
def test_rfc_9309_example(agent: str, path: str, allowed: bool):
    assert rules(RFC_EXAMPLE, agent=f"{agent}/2.1").allowed(ORIGIN + path) is allowed


@pytest.mark.parametrize(
    ("body", "path", "allowed"),
    [
        # §5.2: the most specific match wins.
        ("User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
         "/example/page/", True),
        ("User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n",
         "/example/page/disallowed.gif", False),
        # §2.2.1: the product token matches case-insensitively; groups for one agent are combined.
        ("User-agent: FOOBOT\nDisallow: /a\n", "/a", False),
        ("User-agent: foobot\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\nUser-agent: foobot\nDisallow: /b\n",
         "/b", False),
        ("User-agent: foobot\nDisallow: /a\n\nUser-agent: other\nDisallow: /\n\nUser-agent: foobot\nDisallow: /b\n",
         "/c", True),
        # §2.2.2: paths are case-sensitive.
        ("User-agent: *\nDisallow: /x/\n", "/X/", True),
        # §2.3.1: /robots.txt is always allowed.
        ("User-agent: *\nDisallow: /\n", "/robots.txt", True),
        # §2.2.2: an empty Disallow disallows nothing.
        ("User-agent: *\nDisallow:\n", "/anything", True),
    ],
)
def test_rfc_9309_rules(body: str, path: str, allowed: bool):
    assert rules(body).allowed(ORIGIN + path) is allowed


# --- google/robotstxt robots_test.cc cases (the RFC-conforming ones) ----------------------------------------------


@pytest.mark.parametrize(
    ("body", "path", "allowed"),
    [
        # ID_GlobalGroups_Secondary: a specific group overrides the global one, even when it comes later.
        ("user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n", "/x/y", False),
        ("allow: /\nuser-agent: FooBot\ndisallow: /\n", "/x/y", False),  # rules before any group are ignored
        # ID_AllowDisallow_Value_CaseSensitive.
        ("user-agent: FooBot\ndisallow: /x/\n", "/x/y", False),
        ("user-agent: FooBot\ndisallow: /X/\n", "/x/y", True),
        # ID_LongestMatch.
        ("user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "/x/page.html", False),
        ("user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "/x/page.html", True),
        ("user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "/x/", False),
        ("user-agent: FooBot\ndisallow: \nallow: \n", "/", True),
        ("user-agent: FooBot\ndisallow: /\nallow: /\n", "/", True),  # equivalent: allow wins
        ("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "/page.html", False),
        ("user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "/page", True),
        ("user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "/x/page.html", True),  # 8 octets > 7
        ("user-agent: FooBot\nallow: /x/page.\ndisallow: /*.html\n", "/x/y.html", False),
        ("user-agent: FooBot\ndisallow: /x/\nuser-agent: *\nallow: /x/\n", "/x/page", False),  # own group only
        # ID_SpecialCharacters.
        ("User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/bar/quz", False),
        ("User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/quz", True),
        ("User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo//quz", True),
        ("User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "/foo/bax/quz", True),
        ("User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar", False),
        ("User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/qux", True),
        ("User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/", True),
        ("User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "/foo/bar/baz", True),
        ("User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "/foo/bar", True),
        ("User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "/foo/quz", False),
        # ID_Encoding: percent-encoded patterns match the encoded URL.
        ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n",
         "/foo/bar?qux=taz&baz=http://foo.bar?tar&par", True),
        ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "/foo/bar/%E3%83%84", True),
        ("User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%E3%83%84\n", "/foo/bar/\u30c4", True),
        # ID_UserAgentValueCaseInsensitive / Google matches the product token only.
        ("User-Agent: foo bar\nDisallow: /\n", "/x", True),  # "foo bar" is not a product token of foobot
        ("User-Agent: FOOBOT\nDisallow: /\n", "/x", False),
    ],
)
def test_google_reference_parser_cases(body: str, path: str, allowed: bool):
    assert rules(body, agent="FooBot/2.1 (+https://x.invalid)").allowed(ORIGIN + path) is allowed


# --- RFC 9309 §2.2.4: other records never change which group applies ----------------------------------------------

AGENTS = ["FooBot", "foobot", "*", "BarBot", "other"]
OTHER_RECORDS = ["Crawl-delay: 3", "Sitemap: http://h.example/s.xml", "Request-rate: 1/2s", "X-Unknown: v",
                 "# a comment", "", "Host: h.example", "Noindex: /x"]

group_specs = st.lists(
    st.tuples(st.lists(st.sampled_from(AGENTS), min_size=1, max_size=3), groups.filter(bool)), min_size=1, max_size=3
)


def _body(spec: list[tuple[list[str], list[tuple[bool, str]]]], noise: list[list[str]]) -> str:
    """The groups of ``spec``, each user-agent line followed by its slice of ``noise`` (other records)."""
    lines: list[str] = []
    slots = iter(noise)
    for agents, rules_ in spec:
        for agent in agents:
            lines.append(f"User-agent: {agent}")
            lines.extend(next(slots, []))
        lines.extend(f"{'Allow' if allow else 'Disallow'}: {pattern}" for allow, pattern in rules_)
    return "\n".join(lines) + "\n"


@settings(max_examples=300, deadline=None)
@given(spec=group_specs, noise=st.lists(st.lists(st.sampled_from(OTHER_RECORDS), min_size=1, max_size=3), max_size=12),
       path=paths, agent=st.sampled_from(["FooBot/1.0", "BarBot", "nobody/2"]))
def test_records_between_user_agent_lines_do_not_change_the_verdict(spec, noise, path, agent):
    clean = _body(spec, [])
    noisy = _body(spec, noise)
    assert rules(noisy, agent).allowed(ORIGIN + path) == rules(clean, agent).allowed(ORIGIN + path), noisy


@settings(max_examples=200, deadline=None)
@given(spec=group_specs, path=paths)
def test_the_verdict_is_the_reference_over_the_combined_groups(spec, path):
    # §2.2.1: every group naming the crawler, combined; else every * group; else nothing applies.
    token = "foobot"
    own = [rule for agents, group in spec if token in {a.lower() for a in agents} for rule in group]
    star = [rule for agents, group in spec if "*" in agents for rule in group]
    named = any(token in {a.lower() for a in agents} for agents, _ in spec)
    chosen = own if named else star
    assert rules(_body(spec, []), "FooBot/1.0").allowed(ORIGIN + path) == reference_allowed(chosen, path)


@settings(max_examples=300, deadline=None)
@given(body=st.text(max_size=400), path=st.text(max_size=40), agent=st.text(max_size=30))
def test_arbitrary_bodies_never_raise(body: str, path: str, agent: str):
    verdict = rules(body, agent or "x").allowed(ORIGIN + "/" + path)
    assert isinstance(verdict, bool)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(body: bytes):
    from harvester.fetch.robots import decode_robots

    assert isinstance(rules(decode_robots(body, 500 * 1024)).allowed(ORIGIN + "/a"), bool)
