"""The public reference suites as data, driven through the harvester's real decision path (RobotsRules).

tests/data/robots/google_robotstxt_cases.json: every assertion of google/robotstxt's robots_test.cc;
tests/data/robots/rfc9309_cases.json: every example of RFC 9309 (§2.2.1–§2.2.4, §5.1, §5.2);
tests/data/robots/other_suites_cases.json: CPython's test_robotparser.py (can_fetch, crawl_delay, request_rate),
crawler-commons' SimpleRobotRulesParserTest, temoto/robotstxt's tests and jimsmart/grobotstxt's examples (its
robots_test.go ports robots_test.cc). Each file names its source. Where the RFC overrules a suite, the case says
why (``rfc_overrules``) and the RFC's verdict is asserted.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from harvester.fetch.robots import RobotsRules, decode_robots, product_token
from harvester.fetch.robotstxt import ALLOW, DISALLOW, SITEMAP, USER_AGENT, parse, robots_path
from harvester.records import RobotsState
from harvester.settings import RobotsSettings

DATA = Path(__file__).parents[1] / "data" / "robots"
NOW = datetime(2026, 1, 5, tzinfo=UTC)


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


GOOGLE = load("google_robotstxt_cases.json")
RFC = load("rfc9309_cases.json")
OTHERS = load("other_suites_cases.json")


def of_kind(doc: dict[str, Any], kind: str) -> list[Any]:
    return [pytest.param(case, id=case.get("id") or f"{case.get('section')}:{i}")
            for i, case in enumerate(doc["cases"]) if case.get("kind", "allowed") == kind]


def body_of(doc: dict[str, Any], case: dict[str, Any]) -> bytes:
    if "body_hex" in case:
        return bytes.fromhex(case["body_hex"])
    text = doc["bodies"][case["body_ref"]] if "body_ref" in case else case["body"]
    return str(text).encode("utf-8")


def verdict(body: bytes, user_agent: str, url: str) -> bool:
    """What the harvester decides: the fetched bytes decoded as robots.txt is stored, then RobotsRules."""
    settings = RobotsSettings()
    state = RobotsState(origin="http://foo.bar", status=200, fetched_at=NOW, expires_at=NOW + timedelta(hours=1),
                        body=decode_robots(body, settings.max_bytes))
    return RobotsRules(state, user_agent=user_agent, settings=settings, now_wall=NOW, now_mono=0.0).allowed(url)


@pytest.mark.parametrize("case", of_kind(GOOGLE, "allowed"))
def test_google_allowed(case: dict[str, Any]):
    assert verdict(body_of(GOOGLE, case), case["agent"], case["url"]) is case["allowed"], case.get("rfc_overrules")


@pytest.mark.parametrize("case", of_kind(GOOGLE, "valid_agent"))
def test_google_valid_agent_is_what_the_product_token_setting_accepts(case: dict[str, Any]):
    if case["valid"]:
        assert RobotsSettings(product_token=case["agent"]).product_token == case["agent"]
    else:
        with pytest.raises(ValidationError):
            RobotsSettings(product_token=case["agent"])


@pytest.mark.parametrize("case", of_kind(GOOGLE, "parse"))
def test_google_parse_report(case: dict[str, Any]):
    body = body_of(GOOGLE, case)
    parsed = parse(decode_robots(body, RobotsSettings().max_bytes))
    valid = [r for r in parsed.records if r.key in USER_AGENT | ALLOW | DISALLOW | SITEMAP]
    if "valid_directives" in case:
        assert len(valid) == case["valid_directives"]
    if "unknown_directives" in case:
        assert len(parsed.records) - len(valid) == case["unknown_directives"]
    if "last_line_seen" in case:
        assert max(r.line for r in parsed.records) == case["last_line_seen"]
    if "sitemap" in case:
        assert "".join(parsed.sitemaps) == case["sitemap"]
        state = RobotsState(origin="http://foo.bar", status=200, fetched_at=NOW, expires_at=NOW,
                            body=decode_robots(body, RobotsSettings().max_bytes))
        rules = RobotsRules(state, user_agent="foo", settings=RobotsSettings(), now_wall=NOW, now_mono=0.0)
        assert rules.sitemaps == [case["sitemap"]]


@pytest.mark.parametrize("case", of_kind(GOOGLE, "path"))
def test_google_path_params_query(case: dict[str, Any]):
    assert robots_path(case["input"]) == case["expected"]


@pytest.mark.parametrize("case", of_kind(GOOGLE, "escape"))
def test_google_escape_pattern(case: dict[str, Any]):
    pattern, expected = ("/" + p.lstrip("/") for p in (case["input"], case["expected"]))
    body = f"User-agent: *\nDisallow: /\nAllow: {pattern}\n".encode()
    assert verdict(body, "FooBot", "http://foo.bar" + expected) is True
    assert verdict(body, "FooBot", "http://foo.bar/zzz") is False  # control: the allow rule decides


def test_google_suite_is_whole():
    """Every assertion of robots_test.cc is here (180 EXPECT_* lines; the parse reports hold up to three each)."""
    cases = GOOGLE["cases"]
    assert len(cases) == 191
    assert len({c["id"] for c in cases}) == len(cases)
    overruled = [c for c in cases if "rfc_overrules" in c]
    assert all(c["allowed"] is not c["google_allowed"] for c in overruled)
    assert len(overruled) == 7


@pytest.mark.parametrize("case", of_kind(RFC, "allowed"))
def test_rfc_9309(case: dict[str, Any]):
    assert verdict(case["body"].encode(), case["agent"], case["url"]) is case["allowed"], case["what"]


@pytest.mark.parametrize("case", of_kind(RFC, "token"))
def test_rfc_9309_product_token(case: dict[str, Any]):
    assert product_token(case["user_agent"]) == case["token"]


@pytest.mark.parametrize("case", of_kind(OTHERS, "allowed"))
def test_other_suites(case: dict[str, Any]):
    assert verdict(body_of(OTHERS, case), case["agent"], case["url"]) is case["allowed"], case.get("rfc_overrules")


def rules_of(body: bytes, user_agent: str) -> RobotsRules:
    settings = RobotsSettings()
    state = RobotsState(origin="http://foo.bar", status=200, fetched_at=NOW, expires_at=NOW + timedelta(hours=1),
                        body=decode_robots(body, settings.max_bytes))
    return RobotsRules(state, user_agent=user_agent, settings=settings, now_wall=NOW, now_mono=0.0)


@pytest.mark.parametrize("case", of_kind(OTHERS, "crawl_delay"))
def test_other_suites_crawl_delay(case: dict[str, Any]):
    """The delay of exactly the group RFC 9309 selects (issue 31): crawler-commons' and CPython's cases."""
    rules = rules_of(body_of(OTHERS, case), case["agent"])
    assert rules.crawl_delay_s == case["crawl_delay_s"], case.get("rfc_overrules")
    if "request_rate_s" in case:
        assert rules.request_rate_s == case["request_rate_s"]


@pytest.mark.parametrize("case", of_kind(OTHERS, "status"))
def test_other_suites_status(case: dict[str, Any]):
    state = RobotsState(origin="http://foo.bar", status=case["status"], fetched_at=NOW,
                        expires_at=NOW + timedelta(hours=1), body="")
    rules = RobotsRules(state, user_agent="anybot", settings=RobotsSettings(), now_wall=NOW, now_mono=0.0)
    assert rules.allowed("http://foo.bar/") is case["allowed"]


@pytest.mark.parametrize("case", of_kind(OTHERS, "sitemaps"))
def test_other_suites_sitemaps(case: dict[str, Any]):
    assert rules_of(body_of(OTHERS, case), case["agent"]).sitemaps == case["sitemaps"]


def test_other_suites_differences_are_each_justified():
    """A case where the harvester differs from its suite names an RFC reason, and still differs (else it belongs
    with the agreeing cases): crawler-commons' SimpleRobotRulesParserTest, 434 assertions, 45 overruled."""
    cases = [c for c in OTHERS["cases"] if c["source"] == "crawler-commons"]
    assert len(cases) == 434
    differing = [c for c in cases if "crawler_commons" in c]
    assert len(differing) == 45
    for case in differing:
        assert case["rfc_overrules"] in OTHERS["rfc_reasons"]
        assert case["crawler_commons"] != case.get("allowed", case.get("crawl_delay_s"))
    temoto = [c for c in OTHERS["cases"] if c["source"] == "temoto"]
    assert len(temoto) == 128
    assert [c["rfc_overrules"] for c in temoto if "temoto" in c] == ["token-exact", "no-slash", "no-slash", "no-slash"]
