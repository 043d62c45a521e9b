"""canonicalize and UrlFilter: many spellings collapse to one form, scope holds, every trap kind stays bounded."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from harvester.rules.scope import UrlFilter, Verdict
from harvester.rules.urls import CANONICAL_VERSION, Canonicalizer, canonicalize, remove_dot_segments
from harvester.settings import MAX_URL_LENGTH, Settings
from harvester.site_profile import Scope, SiteProfile

SETTINGS = Settings()
URLS = SETTINGS.urls
SEED = "http://127.0.0.1:8001/"


def canon(url: str, base: str | None = None) -> str | None:
    return canonicalize(url, base=base, settings=URLS)


def test_canonical_version_is_an_int() -> None:
    assert isinstance(CANONICAL_VERSION, int)
    assert CANONICAL_VERSION >= 1


# --- fixed cases -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_url", "expected"),
    [
        ("HTTP://Example.COM:80/a/./b/../c?utm_source=x&b=2&a=1#frag", "http://example.com/a/c?a=1&b=2"),
        ("https://ex.com", "https://ex.com/"),
        ("https://ex.com:443/%7efoo/%2f?q=%e2%82%ac", "https://ex.com/~foo/%2F?q=%E2%82%AC"),
        ("https://bücher.de/straße", "https://xn--bcher-kva.de/stra%C3%9Fe"),
        ("https://faß.de/", "https://xn--fa-hia.de/"),
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://[2001:DB8::1]/", "http://[2001:db8::1]/"),
        ("  https://a.com/x  ", "https://a.com/x"),
        ("\thttps://a.com/x\n", "https://a.com/x"),
        ("http://a.com/?", "http://a.com/"),
        ("http://a.com:/x", "http://a.com/x"),
        ("http://a.com:080/x", "http://a.com/x"),
        ("https://a.com:8443/x", "https://a.com:8443/x"),
        ("https://a.com/CaseKept/Path", "https://a.com/CaseKept/Path"),
        ("https://a.com/a//b", "https://a.com/a//b"),
        ("https://a.com/a%2Fb", "https://a.com/a%2Fb"),
        ("https://a.com/%41%42", "https://a.com/AB"),
        ("https://a.com/a b", "https://a.com/a%20b"),
        ("https://a.com/x?b=1&a=2&a=1", "https://a.com/x?a=2&a=1&b=1"),
        ("https://a.com/x?UTM_Source=a&gclid=1&fbclid=2&id=3", "https://a.com/x?id=3"),
        ("https://a.com/x?sort=asc&print=1&id=3", "https://a.com/x?id=3"),
        # Parameters that select the content itself stay (dropping them fetched another page, or an error).
        ("https://a.com/index.php?option=com_content&view=article&id=5",
         "https://a.com/index.php?id=5&option=com_content&view=article"),
        ("https://a.com/report?id=9&format=pdf", "https://a.com/report?format=pdf&id=9"),
        ("https://a.com/x?layout=grid&display=all", "https://a.com/x?display=all&layout=grid"),
        ("https://a.com/x?&&id=3&", "https://a.com/x?id=3"),
        ("https://a.com/x?a=&b", "https://a.com/x?a=&b"),
        ("https://a.com/..", "https://a.com/"),
        ("https://a.com/a/b/..", "https://a.com/a/"),
        ("https://a.com/%2e%2e/x", "https://a.com/x"),
        # Userinfo is dropped (RFC 3986 §3.2.1, §7.5): credentials name no other page.
        ("https://user@a.com/x", "https://a.com/x"),
        ("http://ñ:ñ@a.com/x", "http://a.com/x"),
        ("http://%C3%B1:%C3%B1@a.com/x", "http://a.com/x"),
        ("http://u:p@a.com:8080/x", "http://a.com:8080/x"),
        # "[" and "]" are legal only around an IP literal: escaped in path and query, whatever else is there.
        ("https://a.com/a[1]", "https://a.com/a%5B1%5D"),
        ("https://a.com/a[1]%20b", "https://a.com/a%5B1%5D%20b"),
        ("https://a.com/a[1] b", "https://a.com/a%5B1%5D%20b"),
        ("https://a.com/x?f[c]=1", "https://a.com/x?f%5Bc%5D=1"),
        ("https://a.com/x?f[c]=é", "https://a.com/x?f%5Bc%5D=%C3%A9"),
        # A "%" that starts no escape is escaped itself (RFC 3986 §2.4).
        ("https://a.com/a%zz", "https://a.com/a%25zz"),
        ("https://a.com/a%", "https://a.com/a%25"),
        ("https://a.com/x?q=100%", "https://a.com/x?q=100%25"),
    ],
)
def test_canonical_forms(given_url: str, expected: str) -> None:
    assert canon(given_url) == expected
    assert canon(expected) == expected


@pytest.mark.parametrize(
    "given_url",
    [
        "javascript:alert(1)",
        "mailto:a@b.org",
        "tel:+4912345",
        "data:text/html,hi",
        "ftp://x.org/",
        "http://a.com:99999/",
        "http://a.com:8o/",
        "http://xn--zz.com/",
        "http://[::1/",
        "http:///x",
        "",
        "   ",
        "/relative/without/base",
        "//x.com/a",
        # A raw control character refuses the URL, whatever its neighbours (it was accepted next to "é").
        "http://a.com/a\x01",
        "http://a.com/é\x01",
        "http://a.com/x?q=é\x7f",
        # A lone surrogate (a JSON Feed can carry "\ud800") has no UTF-8 form.
        "http://a.com/\ud800",
        "http://a.com/x?q=\udfff",
        "http://\ud800.com/",
    ],
)
def test_unusable_urls_give_none(given_url: str) -> None:
    assert canon(given_url) is None


@pytest.mark.parametrize(
    ("href", "base", "expected"),
    [
        ("../x?b=1&a=2", "http://h.com/a/b/c", "http://h.com/a/x?a=2&b=1"),
        ("./x", "http://h.com/a/b/", "http://h.com/a/b/x"),
        ("x", "http://h.com/a/b", "http://h.com/a/x"),
        ("/x#f", "http://h.com/a/b", "http://h.com/x"),
        ("?page=2", "http://h.com/list?page=1", "http://h.com/list?page=2"),
        ("//other.org/y", "https://h.com/", "https://other.org/y"),
        ("HTTPS://H.COM/Z", "http://h.com/a", "https://h.com/Z"),
        ("#top", "http://h.com/a?b=1", "http://h.com/a?b=1"),
    ],
)
def test_relative_links_resolved_against_the_final_url(href: str, base: str, expected: str) -> None:
    assert canon(href, base) == expected


def test_many_spellings_of_one_url_give_one_canonical_form() -> None:
    spellings = [
        "https://www.example.org/articles/slug-12?b=2&a=1",
        "HTTPS://WWW.EXAMPLE.ORG/articles/slug-12?a=1&b=2",
        "https://www.example.org:443/articles/slug-12?a=1&b=2#comments",
        "https://www.example.org/articles/./slug-12?a=1&utm_source=news&b=2",
        "https://www.example.org/articles/x/../slug-12?fbclid=abc&a=1&b=2",
        "https://www.example.org/%61rticles/slug-12?a=1&b=2",
        "https://www.Example.org/articles/slug-12?a=%31&b=2",
    ]
    relative = [
        ("../slug-12?a=1&b=2", "https://www.example.org/articles/other/x"),
        ("slug-12?b=2&a=1#x", "https://www.example.org/articles/"),
    ]
    forms = {canon(url) for url in spellings} | {canon(href, base) for href, base in relative}
    assert forms == {"https://www.example.org/articles/slug-12?a=1&b=2"}
    # Control: a different path really is a different URL (the set above could not collapse by accident).
    assert canon("https://www.example.org/articles/Slug-12?a=1&b=2") != canon(spellings[0])


def test_remove_dot_segments_rfc3986_examples() -> None:
    # RFC 3986 §5.2.4 worked examples.
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/mid/content=5/../6") == "/mid/6"


# --- properties --------------------------------------------------------------------------------------------

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=10)
_unicode_label = st.sampled_from(["bücher", "faß", "münchen", "пример", "例え", "xn--bcher-kva"])
_host = st.lists(st.one_of(_label, _unicode_label), min_size=1, max_size=3).map(".".join).map(lambda h: h + ".org")
_seg = st.one_of(
    st.text(alphabet="abcXYZ019-._~!$&'()*+,;=:@%éü []", min_size=0, max_size=8),
    st.sampled_from([".", "..", "%2e", "%2E%2E", "%41", "%7e", "%2f", "%zz", "A%20B", "%5b", "[1]"]),
)
_path = st.lists(_seg, max_size=6).map(lambda segs: "/" + "/".join(segs))
_key = st.sampled_from(["a", "b", "id", "page", "utm_source", "Sort", "q", "A", "x%20y", "gclid", "é"])
_pair = st.tuples(_key, st.text(alphabet="abc12=%+ é/?[]", max_size=5)).map(lambda kv: f"{kv[0]}={kv[1]}")
_query = st.lists(_pair, max_size=5).map("&".join)


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP", "Https"]))
    host = draw(_host)
    if draw(st.booleans()):
        host = host.upper()
    port = draw(st.sampled_from(["", ":80", ":443", ":8080", ":"]))
    query = draw(_query)
    fragment = draw(st.sampled_from(["", "#", "#frag", "#a?b"]))
    return f"{scheme}://{host}{port}{draw(_path)}{'?' + query if query else ''}{fragment}"


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(urls())
@example("http://a.org/%2e%2e/%2E/x?b=%41&a=1#f")
def test_canonicalize_is_idempotent(url: str) -> None:
    once = canon(url)
    assert once is not None
    assert canon(once) == once


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_canonicalize_never_crashes_and_is_idempotent_on_any_text(text: str) -> None:
    for candidate in (text, "http://a.org/" + text, "https://" + text):
        once = canon(candidate)
        if once is not None:
            assert canon(once) == once
            assert once.startswith(("http://", "https://"))


@settings(max_examples=300)
@given(urls())
def test_canonical_form_keeps_host_identity_and_drops_fragment(url: str) -> None:
    once = canon(url)
    assert once is not None
    assert "#" not in once
    original = urlsplit(url)
    assert urlsplit(once).hostname == (original.hostname or "").encode("idna").decode("ascii").lower() or (
        not (original.hostname or "").isascii()
    )


@settings(max_examples=200)
@given(st.lists(st.text(alphabet="aBcDeFxYZ-_~09", min_size=1, max_size=8), min_size=1, max_size=5), _host)
def test_path_case_is_never_changed(segments: list[str], host: str) -> None:
    path = "/" + "/".join(segments)
    once = canon(f"https://{host.upper()}{path}")
    assert once is not None
    assert urlsplit(once).path == path


@settings(max_examples=300)
@given(urls())
def test_query_is_sorted_and_tracking_free(url: str) -> None:
    once = canon(url)
    assert once is not None
    query = urlsplit(once).query
    names = [piece.partition("=")[0] for piece in query.split("&")] if query else []
    assert names == sorted(names)
    assert not {name.lower() for name in names} & {"utm_source", "gclid", "sort"}


@settings(max_examples=300)
@given(st.permutations(["a=1", "b=2", "c=3", "utm_medium=x", "d="]))
def test_permuted_queries_give_one_form(pieces: list[str]) -> None:
    assert canon("https://h.org/p?" + "&".join(pieces)) == "https://h.org/p?a=1&b=2&c=3&d="


@settings(max_examples=400)
@given(urls())
def test_fast_path_agrees_with_general_path(url: str) -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    stripped = url.strip()
    assert canonicalizer(url) == canonicalizer.slow(stripped)
    once = canonicalizer.slow(stripped)
    if once is not None:
        assert canonicalizer(once) == canonicalizer.slow(once) == once


@settings(max_examples=300)
@given(st.one_of(_path, st.sampled_from(["/", "//other.org/x", "/a?b=1#f", "x/y", "../z", "?q=1", "#top", ""])), urls())
def test_relative_fast_path_agrees_with_urljoin(href: str, base: str) -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    assert canonicalizer(href, base) == canonicalizer.slow(href.strip(), base)


@settings(max_examples=300)
@given(_host, st.sampled_from(["", ":80", ":443", ":8080", ":08080", ":0", ":65535", ":65536", ":9999999"]),
       _path, _query)
def test_plain_queries_take_the_fast_path_and_agree(host: str, port: str, path: str, query: str) -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    for scheme in ("http", "https"):
        url = f"{scheme}://{host}{port}{path}?{query}"
        assert canonicalizer(url) == canonicalizer.slow(url)


def test_ports_are_normalized_on_the_fast_path() -> None:
    canonicalizer = Canonicalizer(URLS, cache_size=0)
    assert canonicalizer("http://127.0.0.1:8080/a?b=1") == "http://127.0.0.1:8080/a?b=1"
    assert canonicalizer("http://Example.org:80/a") == "http://example.org/a"
    assert canonicalizer("https://example.org:0443/") == "https://example.org/"
    assert canonicalizer("https://example.org:80/") == "https://example.org:80/"
    assert canonicalizer("http://example.org:70000/") is None


# --- scope -------------------------------------------------------------------------------------------------


def _filter(**profile_fields: object) -> UrlFilter:
    profile = SiteProfile(seeds=(SEED,), **profile_fields) if profile_fields else None
    return UrlFilter(SETTINGS, profile, [SEED])


def test_seed_hosts_by_default_port_included() -> None:
    flt = _filter()
    assert flt.check("http://127.0.0.1:8001/a") is None
    # Same host, other scheme: another origin (an http sitemap's https entry was queued on a host speaking no TLS),
    # in scope once the seed is known to have moved there (its homepage's redirect: ``add_host``).
    assert flt.check("https://127.0.0.1:8001/a") is Verdict.OUT_OF_SCOPE
    assert flt.check("http://127.0.0.1:8002/a") is Verdict.OUT_OF_SCOPE
    assert flt.check("http://evil.example/a") is Verdict.OUT_OF_SCOPE
    assert flt.in_scope("http://127.0.0.1:8001/x")
    assert not flt.in_scope("http://127.0.0.1:9/x")
    flt.add_host("https://127.0.0.1:8001")
    assert flt.check("https://127.0.0.1:8001/a") is None and flt.check("http://127.0.0.1:8001/b") is None


def test_an_https_seed_admits_its_http_twin_on_default_ports_only() -> None:
    """An https site naming its pages by http:// (they redirect to https) keeps them; an http seed does not admit
    https (it may speak no TLS), and with an explicit port one port speaks one protocol."""
    flt = UrlFilter(SETTINGS, None, ["https://example.org/"])
    assert flt.check("http://example.org/a") is None and flt.check("http://www.example.org/b") is None
    assert UrlFilter(SETTINGS, None, ["http://example.org/"]).check("https://example.org/a") is Verdict.OUT_OF_SCOPE
    ported = UrlFilter(SETTINGS, None, ["https://example.org:8443/"])
    assert ported.check("http://example.org:8443/a") is Verdict.OUT_OF_SCOPE
    assert ported.check("https://example.org:8443/a") is None


def test_a_site_search_is_no_session_id() -> None:
    # WordPress's search parameter is "s": sites list such pages in their own sitemaps.
    assert _filter().check("http://127.0.0.1:8001/search?s=hello", trusted=True) is None
    assert _filter().check("http://127.0.0.1:8001/forum?sid=0123456789abcdef") is Verdict.TRAP_SESSION_ID


def test_www_variant_of_a_seed_is_in_scope() -> None:
    flt = UrlFilter(SETTINGS, None, ["https://example.org/"])
    assert flt.in_scope("https://www.example.org/a")
    assert not flt.in_scope("https://blog.example.org/a")


def test_profile_domains_allow_subdomains() -> None:
    flt = UrlFilter(SETTINGS, SiteProfile(seeds=("https://example.org/",), scope=Scope(domains=("example.org",))))
    assert flt.in_scope("https://blog.example.org/a")
    assert flt.in_scope("https://example.org/a")
    assert not flt.in_scope("https://badexample.org/a")
    assert not flt.in_scope("https://example.org.evil.com/a")


def test_path_prefix_allow_and_deny_deny_first() -> None:
    scope = Scope(path_prefixes=("/blog/",), allow_patterns=(r"/blog/\d{4}/",), deny_patterns=(r"/blog/2020/",))
    flt = _filter(scope=scope)
    assert flt.check("http://127.0.0.1:8001/blog/2024/x") is None
    assert flt.check("http://127.0.0.1:8001/blog/2020/x") is Verdict.OUT_OF_SCOPE  # allowed, but denied first
    assert flt.check("http://127.0.0.1:8001/blog/about") is Verdict.OUT_OF_SCOPE  # not allowed
    assert flt.check("http://127.0.0.1:8001/shop/2024/x") is Verdict.OUT_OF_SCOPE  # outside the prefix


# --- traps -------------------------------------------------------------------------------------------------

ORIGIN = "http://127.0.0.1:8001"


def calendar_trap() -> Iterator[str]:
    for month in itertools.count():
        yield f"{ORIGIN}/calendar/{2026 + month // 12}/{month % 12 + 1:02d}"


def calendar_query_trap() -> Iterator[str]:
    for month in itertools.count():
        yield f"{ORIGIN}/events?month={month % 12 + 1}&year={2026 + month // 12}"


def facet_trap() -> Iterator[str]:
    for i in itertools.count():
        yield f"{ORIGIN}/shop?color=c{i}"  # one facet at a time: endless values


def facet_combination_trap() -> Iterator[str]:
    for i in itertools.count():
        yield f"{ORIGIN}/shop?color=c{i}&size=s{i}"


def session_trap() -> Iterator[str]:
    for i in itertools.count():
        yield f"{ORIGIN}/articles/page-1?sid={i:032x}"


def jsession_trap() -> Iterator[str]:
    for i in itertools.count():
        yield f"{ORIGIN}/catalog;jsessionid={i:024X}"


def repeated_trap() -> Iterator[str]:
    path = ""
    for i in itertools.count():
        path += "/a" if i % 2 == 0 else "/b"
        yield f"{ORIGIN}{path}/item"


def nested_query_trap() -> Iterator[str]:
    url = "/login"
    for _ in range(40):  # each level re-escapes the last: the length grows geometrically
        url = f"/login?next={quote(url, safe='/')}"
        yield ORIGIN + url


def depth_trap() -> Iterator[str]:
    path = ""
    for i in itertools.count():
        path += f"/d{i}"
        yield f"{ORIGIN}{path}"


def length_trap() -> Iterator[str]:
    path = ""
    for i in range(100):
        path += f"/{'x' * 150}{i}"
        yield f"{ORIGIN}/q?{path}"


TRAPS = {
    Verdict.TRAP_CALENDAR: [calendar_trap, calendar_query_trap],
    Verdict.TRAP_FACETS: [facet_trap, facet_combination_trap],
    Verdict.TRAP_SESSION_ID: [session_trap, jsession_trap],
    Verdict.TRAP_REPEATED_SEGMENTS: [repeated_trap, nested_query_trap],
    Verdict.TRAP_DEPTH: [depth_trap],
    Verdict.TRAP_LENGTH: [length_trap],
}

LOOSE = SETTINGS.with_overrides(
    **{
        "urls.max_calendar_urls": 10**6,
        "urls.max_facet_urls": 10**6,
        "urls.max_facets": 10,
        "urls.session_params": (),
        "urls.max_repeated_segments": 10**6,
        "urls.max_path_depth": 10**6,
    }
)


def _admitted(flt: UrlFilter, stream: Iterator[str], n: int = 2_000) -> int:
    admitted = 0
    for url in itertools.islice(stream, n):
        canonical = canon(url)
        assert canonical is not None
        if flt.check(canonical) is None:
            admitted += 1
    return admitted


@pytest.mark.parametrize(
    ("kind", "make"), [(kind, make) for kind, makers in TRAPS.items() for make in makers],
    ids=lambda v: getattr(v, "__name__", str(v)),  # a function by its name: an address differs per process (xdist)
)
def test_each_trap_kind_admits_at_most_20_urls(kind: Verdict, make: object) -> None:
    flt = UrlFilter(SETTINGS, None, [SEED])
    assert _admitted(flt, make()) <= 20  # type: ignore[operator]
    assert flt.counts[kind.value] > 0
    if kind is Verdict.TRAP_LENGTH:
        # The length rule is the frontier's own limit (``settings.MAX_URL_LENGTH``): it has no looser setting. The
        # bound is real: every URL admitted is storable, and the stream's longer ones are all refused as the trap.
        stream = list(make())  # type: ignore[operator]
        assert flt.counts[kind.value] == len(stream) - _admitted(UrlFilter(SETTINGS, None, [SEED]), iter(stream))
        assert all(len(url) > MAX_URL_LENGTH for url in stream[_admitted(UrlFilter(SETTINGS, None, [SEED]),
                                                                          iter(stream)):])
        return
    # Control: with the thresholds out of the way the same stream is unbounded, so the bound above is real.
    assert _admitted(UrlFilter(LOOSE, None, [SEED]), make(), n=200) > 20  # type: ignore[operator]


def test_dated_permalinks_are_not_calendar_traps() -> None:
    flt = UrlFilter(SETTINGS, None, [SEED])
    urls = [f"{ORIGIN}/2024/05/{day % 28 + 1:02d}/headline-{day}" for day in range(200)]
    assert all(flt.check(url) is None for url in urls)


def test_the_page_budget_is_not_an_admission_verdict() -> None:
    """A URL over the budget is still admitted: it waits in the frontier for a run with room (phases.budget)."""
    flt = UrlFilter(SETTINGS.with_overrides(max_pages_per_host=2), SiteProfile(seeds=(SEED,), max_pages_per_host=2),
                    [])
    assert [flt.check(f"{ORIGIN}/p{i}") for i in range(5)] == [None] * 5
    assert flt.counts == {"ok": 5}


def test_trusted_entries_skip_the_calendar_counter_but_not_scope() -> None:
    flt = UrlFilter(SETTINGS, None, [SEED])
    assert all(flt.check(url, trusted=True) is None for url in itertools.islice(calendar_trap(), 100))
    assert flt.check("http://127.0.0.1:9/x", trusted=True) is Verdict.OUT_OF_SCOPE


def test_verdict_is_trap() -> None:
    assert Verdict.TRAP_CALENDAR.is_trap
    assert not Verdict.OUT_OF_SCOPE.is_trap
    assert not Verdict.OUT_OF_SCOPE.is_trap
    assert Verdict.TRAP_FACETS == "trap:facets"


@given(st.lists(st.sampled_from(["x", "y", "zz"]), min_size=1, max_size=30))
def test_filter_accepts_exactly_what_it_accepted_before(paths: list[str]) -> None:
    assume(len(paths) > 0)
    flt = UrlFilter(SETTINGS, None, [SEED])
    first = [flt.check(f"{ORIGIN}/{p}") for p in paths]
    again = [flt.check(f"{ORIGIN}/{p}") for p in paths]
    assert first == again


def test_test_web_link_spellings_collapse_to_the_true_urls(test_web) -> None:  # type: ignore[no-untyped-def]
    """Every link on every page of host ``a`` (tracking params, fragments, upper-case host, permuted queries,
    relative and dot-segment forms) canonicalizes to a URL the site really has: zero duplicate spellings."""
    import httpx

    from harvester.discovery.listings import extract_links

    truth = test_web.truth["a"]
    details = set(truth.detail_urls())
    pages = [truth.origin + "/", *truth.listing_urls(), *sorted(details)[:40]]
    spellings: dict[str, set[str]] = {}
    with httpx.Client(timeout=30) as client:
        for page_url in pages:
            response = client.get(page_url)
            if response.status_code != 200:
                continue
            for link in extract_links(response.content, base_url=page_url).links:
                canonical = canon(link)
                assert canonical is not None
                spellings.setdefault(canonical, set()).add(link)
    known_other = {truth.origin + "/", truth.origin + "/about/", *truth.listing_urls()}
    unknown = set(spellings) - details - known_other
    assert not unknown, sorted(unknown)[:5]  # a stray spelling would be a duplicate of some page
    linked_details = set(spellings) & details
    assert len(linked_details) > 10
    # Control: the raw spellings really were many (so the collapse above did work).
    assert sum(len(raw) for url, raw in spellings.items() if url in details) > len(linked_details)


def test_filter_memory_is_flat_in_the_number_of_urls() -> None:
    import tracemalloc

    flt = UrlFilter(SETTINGS.with_overrides(max_pages_per_host=10**7), None, [SEED])
    tracemalloc.start()
    try:
        for i in range(50_000):
            assert flt.check(f"{ORIGIN}/articles/story-number-{i}", trusted=True) is None
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # What the filter's own code holds after 50k URLs. Not the process's peak: in the whole suite, threads other
    # tests left behind (a Prefect client's, a server's) allocate meanwhile, and tracemalloc counts every thread.
    held = snapshot.filter_traces([tracemalloc.Filter(True, "*/harvester/*")]).statistics("filename")
    assert sum(stat.size for stat in held) < 2**20  # a set of 50k hashes alone would take ~3.5 MiB
    # Bloom false positives are accepted without being counted: a few hundredths of a percent here.
    assert 49_500 <= flt.accepted_per_host["127.0.0.1:8001"] <= 50_000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["events", "cal", "agenda", "termine", "x"]), min_size=1, max_size=3),
    st.integers(min_value=1990, max_value=2090),
    st.sampled_from(["/{y}/{m:02d}", "/{y}-{m:02d}", "/{y}/{m}/01", "?year={y}&month={m}"]),
)
def test_generated_calendar_traps_are_bounded(prefix: list[str], start: int, form: str) -> None:
    flt = UrlFilter(SETTINGS, None, [SEED])
    base = ORIGIN + "/" + "/".join(prefix)
    admitted = 0
    for month in range(600):
        y, m = start + month // 12, month % 12 + 1
        canonical = canon(base + form.format(y=y, m=m))
        assert canonical is not None
        admitted += flt.check(canonical) is None
    assert admitted <= 20


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(list(URLS.facet_params)), min_size=1, max_size=3, unique=True), st.text("abc", min_size=1)
)
def test_generated_facet_traps_are_bounded(names: list[str], seed_value: str) -> None:
    flt = UrlFilter(SETTINGS, None, [SEED])
    admitted = 0
    for i in range(500):
        query = "&".join(f"{name}={seed_value}{i + k}" for k, name in enumerate(names))
        admitted += flt.check(f"{ORIGIN}/shop?{query}") is None
    assert admitted <= 20


def _crawl(web, name: str, settings_: Settings, limit: int) -> tuple[dict[str, int], int, bool]:  # type: ignore[no-untyped-def]
    """Breadth-first over every link the filter admits (no classifier, no robots): what an unguarded crawler
    would follow. Returns admitted URLs per trap prefix, pages fetched, and whether the frontier ran dry."""
    from collections import deque

    import httpx

    from harvester.discovery.listings import extract_links

    truth = web.truth[name]
    prefixes = truth.trap_prefixes()
    flt = UrlFilter(settings_, None, [truth.origin + "/"])
    admitted = dict.fromkeys(prefixes, 0)
    queue = deque([truth.origin + "/"])
    seen = {truth.origin + "/"}
    fetched = 0
    with httpx.Client(timeout=30) as client:
        while queue and fetched < limit:
            url = queue.popleft()
            response = client.get(url)
            fetched += 1
            if response.status_code != 200 or "html" not in response.headers.get("content-type", ""):
                continue
            for link in extract_links(response.content, base_url=url).links:
                canonical = canonicalize(link, settings=settings_.urls)
                if canonical is None or canonical in seen or "/hostile/" in canonical:
                    continue
                if flt.check(canonical) is not None:
                    continue
                seen.add(canonical)
                for kind, prefix in prefixes.items():
                    if prefix in canonical:
                        admitted[kind] += 1
                queue.append(canonical)
    return admitted, fetched, not queue


def test_test_web_traps_bounded_with_control(test_web) -> None:  # type: ignore[no-untyped-def]
    admitted, fetched, finished = _crawl(test_web, "c", SETTINGS, limit=1500)
    assert finished, f"the crawl did not end within {fetched} fetches: some trap is unbounded"
    assert admitted, "host c has traps"
    for kind, count in admitted.items():
        assert count <= 20, (kind, count)
    # Control: without the trap thresholds the same crawl never runs dry (the traps are real and infinite).
    _, loose_fetched, loose_finished = _crawl(test_web, "c", LOOSE, limit=300)
    assert not loose_finished
    assert loose_fetched == 300


# --- issue 31 item 4: percent-encoded hosts (RFC 3986 §3.2.2) -------------------------------------------------


@pytest.mark.parametrize(("given_url", "expected"), [
    ("https://www.0251-sachverst%c3%a4ndiger.de/", "https://www.xn--0251-sachverstndiger-ozb.de/"),  # encodeURI's
    ("https://www.0251-sachverst%C3%A4ndiger.de:443/a?b=1", "https://www.xn--0251-sachverstndiger-ozb.de/a?b=1"),
    ("https://example%2Ecom/", "https://example.com/"),
    ("http://EXAMPLE%2ecom:8080/x", "http://example.com:8080/x"),
    ("https://u:p@m%C3%BCnchen.example/", "https://xn--mnchen-3ya.example/"),
    ("https://a%C2%ADb/", "https://ab/"),  # a soft hyphen, mapped away by UTS #46 as in a raw host
])
def test_a_percent_encoded_host_is_decoded_then_idna_encoded(given_url: str, expected: str) -> None:
    canonicalizer = Canonicalizer(Settings().urls)
    assert canonicalizer(given_url) == expected
    assert canonicalizer.slow(given_url) == expected
    assert canonicalizer.fetch_form(given_url) == expected  # the form requested: the host as DNS knows it
    raw = given_url.replace("%c3%a4", "ä").replace("%C3%A4", "ä").replace("%2E", ".").replace("%2e", ".")
    assert canonicalizer(raw) == expected  # the same key as the raw spelling


def test_the_fetch_form_of_a_percent_encoded_host_keeps_the_sites_query_order() -> None:
    form = Canonicalizer(Settings().urls).fetch_form("https://www.0251-sachverst%c3%a4ndiger.de/s?z=1&a=2")
    assert form == "https://www.xn--0251-sachverstndiger-ozb.de/s?z=1&a=2"


@pytest.mark.parametrize(("given_url", "reason"), [
    ("http://ho%00st/", "holds '\\x00'"),
    ("http://ho%0Ast/", "holds '\\n'"),
    ("http://ho%20st/", "holds ' '"),
    ("http://ho%2Fst/", "holds '/'"),
    ("http://ho%40st/", "holds '@'"),
    ("http://ho%3Ast:81/", "holds ':'"),
    ("http://ho%25st/", "holds '%'"),  # no second decoding
    ("http://a%b/", "starts no percent-escape"),
    ("https://example.com%80/", "not UTF-8"),
    ("https://%e2%98%83/", "IDNA refuses"),  # a snowman: no IDNA 2008 label
    ("https://%C2%AD/", "IDNA refuses"),  # decodes to nothing
])
def test_a_percent_encoded_host_that_decodes_to_no_host_name_is_refused_with_its_reason(given_url: str,
                                                                                       reason: str) -> None:
    from harvester.rules.urls import host_refusal

    assert canonicalize(given_url, settings=Settings().urls) is None
    refusal = host_refusal(given_url)
    assert refusal is not None and reason in refusal, refusal
    assert host_refusal("https://example%2Ecom/") is None  # control: a good one has no reason


def test_a_seed_with_a_percent_encoded_host_scopes_its_host_in_every_spelling() -> None:
    from harvester.rules.admission import Site

    site = Site(Settings(), SiteProfile(name="sv", seeds=["https://www.0251-sachverst%c3%a4ndiger.de/"]))
    assert site.seeds_of("https://www.xn--0251-sachverstndiger-ozb.de") == [
        "https://www.xn--0251-sachverstndiger-ozb.de/"]
    for spelling in ("https://www.xn--0251-sachverstndiger-ozb.de/a", "https://www.0251-sachverständiger.de/a",
                     "https://www.0251-sachverst%C3%A4ndiger.de/a"):
        assert site.in_scope(spelling), spelling
    assert not site.in_scope("https://www.0251-sachverstandiger.de/a")  # control: another host stays out
