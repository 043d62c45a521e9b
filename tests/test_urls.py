"""canonicalize, UrlFilter: spellings collapse to one form, scope holds, traps stay bounded."""

from __future__ import annotations

import pytest

from harvester.settings import Settings
from harvester.urls import CANONICAL_VERSION, Verdict, UrlFilter, canonicalize

SETTINGS = Settings()
URLS = SETTINGS.urls


def canon(url: str, base: str | None = None) -> str | None:
    return canonicalize(url, base=base, settings=URLS)


def test_canonical_version_is_an_int() -> None:
    assert isinstance(CANONICAL_VERSION, int)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("HTTP://Example.COM:80/a/./b/../c?utm_source=x&b=2&a=1#frag", "http://example.com/a/c?a=1&b=2"),
        ("https://ex.com", "https://ex.com/"),
        ("https://ex.com:443/%7efoo/%2f?q=%e2%82%ac", "https://ex.com/~foo/%2F?q=%E2%82%AC"),
        ("https://bücher.de/straße", "https://xn--bcher-kva.de/stra%C3%9Fe"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("  https://a.com/x  ", "https://a.com/x"),
        ("http://a.com/?", "http://a.com/"),
        ("https://a.com/CaseKept/Path", "https://a.com/CaseKept/Path"),
    ],
)
def test_canonical_forms(given: str, expected: str) -> None:
    assert canon(given) == expected


@pytest.mark.parametrize(
    "given", ["javascript:alert(1)", "mailto:a@b.org", "ftp://x.org/", "http://a.com:99999/", "http://xn--zz.com/", ""]
)
def test_unusable_urls_give_none(given: str) -> None:
    assert canon(given) is None


def test_relative_resolved_against_base() -> None:
    assert canon("../x?b=1&a=2", base="http://h.com/a/b/c") == "http://h.com/a/x?a=2&b=1"


def test_filter_scope_and_traps() -> None:
    flt = UrlFilter(SETTINGS, None, ["http://127.0.0.1:8001/"])
    assert flt.check("http://127.0.0.1:8001/a") is None
    assert flt.check("http://127.0.0.1:8002/a") is Verdict.OUT_OF_SCOPE
    assert flt.check("http://127.0.0.1:8001/a?sid=1") is Verdict.TRAP_SESSION_ID
    assert flt.check("http://127.0.0.1:8001/shop?color=red&size=m") is Verdict.TRAP_FACETS
