"""One escaping rule per character, whatever its neighbours, on both canonicalization paths (issue 20, item 7).

"[" and "]" were escaped only when a space or a non-ASCII character elsewhere in the component forced
``quote``: "/a[1]%20b" and "/a[1] b" became two keys for one page. These properties pin the rule down: a path
segment's (or query parameter's) canonical spelling never depends on the others, and the fast path (``_FAST``)
and the general path (``Canonicalizer.slow``) agree on every URL, including those the fast path declines.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from hypothesis import example, given, settings
from hypothesis import strategies as st

from harvester.rules.urls import Canonicalizer
from harvester.settings import Settings

URLS = Settings().urls

# Everything a path segment may hold literally or by mistake, except "/" "?" "#" (structure) and "." (dot
# segments), plus escapes of reserved, unreserved and non-ASCII characters and broken ones.
_CHARS = "aZ09-_~!$&'()*+,;=:@[]{}|^`\"<> \\é€𝄞%"
_PIECES = st.sampled_from(["%5B", "%5b", "%5D", "%41", "%7E", "%2F", "%zz", "%", "%2", "%C3%A9", "%e2%82%ac"])
_segment = st.lists(st.one_of(st.text(alphabet=_CHARS, min_size=1, max_size=4), _PIECES), max_size=5).map("".join)
_neighbour = st.lists(st.one_of(st.text(alphabet=_CHARS + "/", max_size=4), _PIECES), max_size=5).map("".join)
_value = _segment.map(lambda text: text.replace("&", "").replace("+", ""))


def _canon(url: str) -> str | None:
    return Canonicalizer(URLS, cache_size=0)(url)


@settings(max_examples=500)
@given(_segment, _neighbour)
@example("a[1]", "%20b")
@example("a[1]", " b")
@example("a[1]", "é")
@example("%zz", "é")
def test_a_segments_spelling_does_not_depend_on_its_neighbours(segment: str, neighbour: str) -> None:
    alone = _canon(f"http://h.org/{segment}/z")
    beside = _canon(f"http://h.org/{segment}/{neighbour}")
    assert alone is not None
    assert beside is not None
    assert urlsplit(beside).path.split("/")[1] == urlsplit(alone).path.split("/")[1]


@settings(max_examples=500)
@given(_value, _value)
@example("a[1]", "%20b")
@example("[x]", "é")
def test_a_query_values_spelling_does_not_depend_on_the_others(value: str, other: str) -> None:
    alone = _canon(f"http://h.org/p?k={value}&z=1")
    beside = _canon(f"http://h.org/p?k={value}&m={other}&z=1")
    assert alone is not None
    assert beside is not None
    assert urlsplit(beside).query.split("&")[0] == urlsplit(alone).query.split("&")[0]


@settings(max_examples=500)
@given(_segment, _neighbour)
@example("a[1]", "%20b")
def test_one_page_spelled_with_or_without_escapes_is_one_key(segment: str, neighbour: str) -> None:
    """The canonical form is a fixed point, and re-reading it through either path gives it back."""
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    for url in (f"http://h.org/{segment}/{neighbour}", f"http://h.org/{segment}?q={neighbour}"):
        once = canonicalizer(url)
        assert once == canonicalizer.slow(url)
        if once is not None:
            assert canonicalizer(once) == canonicalizer.slow(once) == once


@settings(max_examples=500)
@given(st.text(alphabet="aZ09-._~!$&'()*+,;=:@/?%[] é", max_size=30), st.sampled_from(["http", "https"]))
def test_the_fast_and_general_paths_agree_on_any_path_and_query(rest: str, scheme: str) -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    url = f"{scheme}://h.org/{rest}"
    assert canonicalizer(url) == canonicalizer.slow(url)


def test_brackets_take_one_spelling_whatever_else_the_component_holds() -> None:
    keys = {_canon(url) for url in ("http://h.org/a[1]%20b", "http://h.org/a[1] b", "http://h.org/a%5B1%5D b",
                                     "http://h.org/a%5b1%5d%20b")}
    assert keys == {"http://h.org/a%5B1%5D%20b"}
    # Control: another page keeps another key.
    assert _canon("http://h.org/a[2] b") != "http://h.org/a%5B1%5D%20b"


def test_userinfo_spellings_are_one_key_and_a_valid_uri() -> None:
    keys = {_canon(url) for url in ("http://ñ:ñ@h.org/x", "http://%C3%B1:%C3%B1@h.org/x", "http://h.org/x",
                                     "http://u:p@h.org:80/x", "http://@h.org/x")}
    assert keys == {"http://h.org/x"}
    # "a@b@h": the host is after the last "@", as RFC 3986 §3.2 reads it (the userinfo cannot hold "@").
    assert _canon("http://good.org@evil.org/") == "http://evil.org/"
