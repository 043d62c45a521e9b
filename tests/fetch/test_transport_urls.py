"""``RequestUrls`` gives the ``httpx.URL`` that ``httpx.URL(url)`` gives, for every URL, on its fast path or not."""

from __future__ import annotations

import random

import httpx
import pytest

from harvester.fetch.transport import RequestUrls

ORIGINS = ("http://127.0.0.1:8080", "https://example.com", "http://Example.COM:80", "https://[::1]:8443",
           "http://xn--bcher-kva.example", "http://user@host.example")

PIECES = ("a", "Z", "0", "-", ".", "_", "~", "!", "$", "&", "'", "(", ")", "*", "+", ",", ";", "=", ":", "@", "/",
          "?", "#", "%", "%2f", "%2F", "%zz", " ", "\t", "é", "[", "]", "|", "\\", "^", "`", "{", "}", '"', "<",
          ">", "..", "./", "/./", "/../", "//")


def _same(url: str, urls: RequestUrls) -> None:
    try:
        expected = httpx.URL(url)
    except httpx.InvalidURL:
        with pytest.raises(httpx.InvalidURL):
            urls(url)
        return
    got = urls(url)
    assert got == expected
    assert str(got) == str(expected)
    assert got.raw_path == expected.raw_path
    assert got.netloc == expected.netloc


@pytest.mark.parametrize("origin", ORIGINS)
def test_generated_urls_parse_as_httpx_parses_them(origin: str) -> None:
    rng = random.Random(origin)
    urls = RequestUrls(origin)
    for _ in range(3000):
        tail = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 12)))
        _same(f"{origin}/{tail}", urls)
    for tail in ("", "?", "?a=1&b=2", "a/./b", "a/../b", "a/.", "a/..", ".well-known/x", "a?b/./c", "%41%42"):
        _same(f"{origin}/{tail}", urls)


def test_other_origins_and_odd_urls_take_httpx_parse() -> None:
    urls = RequestUrls("http://127.0.0.1:8080")
    for url in ("http://127.0.0.1:8081/a", "http://127.0.0.1:8080", "http://127.0.0.1:8080?x", "HTTP://h/a",
                "http://127.0.0.1:8080/" + "a" * 5000):
        _same(url, urls)


def test_typical_page_urls_take_the_fast_path() -> None:
    urls = RequestUrls("http://127.0.0.1:8080")
    url = urls("http://127.0.0.1:8080/articles/some-slug-12.html?page=2&sort=new")
    assert str(url) == "http://127.0.0.1:8080/articles/some-slug-12.html?page=2&sort=new"
    assert urls._base is not None  # httpx's parsed form is what the fast path relies on
