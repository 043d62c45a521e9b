"""extraction: what is kept from a page, the main-content hash, charsets, bounds, and the user hook."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from harvester.errors import ConfigError
from harvester.extraction import Page, decode_html, extract_page, load_hook
from harvester.records import ErrorClass, FetchResult
from harvester.settings import Settings

PAGES = Path(__file__).parent / "data" / "pages"
URL = "https://news.example.org/news/harbour-bridge-reopens-4411?ref=home"
SETTINGS = Settings()


def fetched(body: bytes, *, url: str = URL, content_type: str | None = "text/html; charset=utf-8",
            headers: dict[str, str] | None = None, etag: str | None = '"v1"') -> FetchResult:
    return FetchResult(
        url=url, final_url=url, status=200, started_at=0.0, elapsed_s=0.01, content_type=content_type,
        etag=etag, last_modified="Mon, 10 Jun 2024 08:00:00 GMT", body=body, bytes_read=len(body),
        headers=headers or {},
    )


def page(name: str) -> bytes:
    return (PAGES / name).read_bytes()


def test_article_metadata_is_kept():
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS)
    record = out.page
    assert record.final_url == URL
    assert record.status == 200
    assert record.etag == '"v1"'
    assert record.last_modified == "Mon, 10 Jun 2024 08:00:00 GMT"
    assert record.title == "Harbour bridge reopens after repairs | The Coastal Times"
    assert record.description == "The harbour bridge reopened on Monday after eight months of repairs."
    assert record.language == "en-GB"
    assert record.canonical_url == "https://news.example.org/news/harbour-bridge-reopens-4411"
    assert record.body == page("article_day1.html")
    assert len(record.content_hash) == 64
    assert int(record.content_hash, 16) >= 0


def test_jsonld_blocks_parsed_and_invalid_ones_counted():
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS)
    assert [block["@type"] for block in out.page.jsonld] == ["NewsArticle"]
    assert out.page.jsonld[0]["author"]["name"] == "Ana Ruiz"
    assert out.jsonld_invalid == 1


def test_jsonld_nan_and_comment_wrapped():
    html = (b'<html><head><script type="application/ld+json"><!-- {"a": 1} --></script>'
            b'<script type="application/ld+json">{"b": NaN}</script></head><body><p>x</p></body></html>')
    out = extract_page(fetched(html), settings=SETTINGS)
    assert out.page.jsonld == [{"a": 1}]
    assert out.jsonld_invalid == 1


def test_outlinks_resolved_against_final_url_with_next_and_canonical():
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS)
    links = set(out.outlinks)
    assert "https://news.example.org/news/ferry-timetable-change-4409?utm_source=article#top" in links
    assert "https://news.example.org/news/tram-extension-4402" in links
    assert "https://news.example.org/news/" in links  # nav links are outlinks too (the caller filters)
    assert out.feeds == ("https://news.example.org/feed.xml",)  # rel=alternate: a feed, not an outlink
    assert "https://news.example.org/static/site.css" not in links
    assert out.next_pages == ("https://news.example.org/news/page/2",)
    assert "https://news.example.org/news/harbour-bridge-reopens-4411" in links  # canonical
    assert not any(link.startswith(("javascript:", "mailto:")) for link in links)


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.glob("*.html")))
def test_a_page_is_parsed_once_and_its_links_are_the_link_extractors(name, monkeypatch):
    """The tree parsed for the metadata is the one the links are read from (a second parse doubled the cost)."""
    import lxml.html

    from harvester.discovery.listings import extract_links

    body = page(name)
    expected = extract_links(body, base_url=URL, content_type="text/html; charset=utf-8")
    parses = []
    real = lxml.html.document_fromstring
    monkeypatch.setattr(lxml.html, "document_fromstring", lambda *a, **k: parses.append(1) or real(*a, **k))
    out = extract_page(fetched(body), settings=SETTINGS)
    assert len(parses) == 1
    assert set(expected.links) <= set(out.outlinks)
    assert out.next_pages == tuple(expected.next_pages)
    assert out.feeds == tuple(expected.feeds)
    assert out.robots_nofollow == expected.robots_nofollow


def test_meta_robots_nofollow_yields_no_outlinks():
    body = b'<html><head><meta name="robots" content="noindex, nofollow"></head><body><a href="/x">x</a></body></html>'
    out = extract_page(fetched(body), settings=SETTINGS)
    assert out.outlinks == ()
    assert out.robots_noindex
    # control: the same page without the directive has its link
    control = extract_page(fetched(body.replace(b"nofollow", b"follow")), settings=SETTINGS)
    assert control.outlinks == ("https://news.example.org/x",)


@pytest.mark.parametrize(
    ("header", "nofollow", "noindex"),
    [
        ("noindex, nofollow", True, True),
        ("none", True, True),
        ("NoFollow", True, False),
        ("googlebot: nofollow", False, False),  # another crawler's directive
        ("harvester: nofollow, noarchive", True, False),  # ours (the User-Agent's product token)
        ("unavailable_after: 25 Jun 2010 15:00:00 PST, nofollow", True, False),  # a valued directive, not a name
        ("otherbot: noindex, harvester: nofollow", True, False),  # two crawlers on one line
        ("googlebot: noarchive\nnoindex", False, True),  # two header lines: the prefix ends with its line
        ("noarchive", False, False),
    ],
)
def test_x_robots_tag_header_counts_as_meta_robots(header, nofollow, noindex):
    body = b'<html><body><a href="/x">x</a></body></html>'
    out = extract_page(fetched(body, headers={"x-robots-tag": header}), settings=SETTINGS)
    assert (out.robots_nofollow, out.robots_noindex) == (nofollow, noindex)
    assert out.outlinks == (() if nofollow else ("https://news.example.org/x",))


@pytest.mark.parametrize(
    ("name", "nofollow"),
    [
        ("robots", True),  # every crawler's
        ("ROBOTS", True),
        ("harvester", True),  # ours (the User-Agent's product token)
        ("googlebot", False),  # another crawler's directive, as in the header
        ("otherbot", False),
    ],
)
def test_meta_robots_directives_apply_to_every_crawler_or_to_ours(name, nofollow):
    body = f'<html><head><meta name="{name}" content="nofollow"></head><body><a href="/x">x</a></body></html>'
    out = extract_page(fetched(body.encode()), settings=SETTINGS)
    assert out.robots_nofollow is nofollow
    assert out.outlinks == (() if nofollow else ("https://news.example.org/x",))


def test_base_href_is_honoured():
    html = b'<html><head><base href="https://cdn.example.org/root/"></head><body><a href="x">x</a></body></html>'
    out = extract_page(fetched(html), settings=SETTINGS)
    assert out.outlinks == ("https://cdn.example.org/root/x",)


def test_main_content_hash_ignores_timestamps_ads_and_random_ids():
    day1 = extract_page(fetched(page("article_day1.html")), settings=SETTINGS)
    rerender = extract_page(fetched(page("article_day1_rerender.html")), settings=SETTINGS)
    assert page("article_day1.html") != page("article_day1_rerender.html")  # control: the bytes differ
    assert day1.content_hash == rerender.content_hash


def test_main_content_hash_changes_with_the_article_text():
    day1 = extract_page(fetched(page("article_day1.html")), settings=SETTINGS)
    changed = extract_page(fetched(page("article_day2_changed.html")), settings=SETTINGS)
    assert day1.content_hash != changed.content_hash


def test_densest_block_without_landmarks():
    original = page("no_landmarks.html")
    rerender = original.replace(b"12:01:07", b"23:59:59").replace(b"118822", b"118999")
    edited = original.replace(b"zweiter Absatz", b"dritter Absatz")
    first = extract_page(fetched(original), settings=SETTINGS)
    assert first.page.language == "de"
    assert first.content_hash == extract_page(fetched(rerender), settings=SETTINGS).content_hash
    assert first.content_hash != extract_page(fetched(edited), settings=SETTINGS).content_hash


def test_whitespace_is_normalized_in_the_hash():
    a = b"<html><body><main><p>one two</p>\n<p>three</p></main></body></html>"
    b = b"<html><body><main>\n  <p>one   two</p>\n\n\t<p>three</p>  </main></body></html>"
    assert extract_page(fetched(a), settings=SETTINGS).content_hash == \
        extract_page(fetched(b), settings=SETTINGS).content_hash


def test_pages_sharing_a_description_differ_by_title_and_structured_data():
    # A shop's product pages: one boilerplate description in <main>, the product in the title and JSON-LD.
    def product(name: str, price: str, title: str | None = None) -> bytes:
        ld = f'{{"@type": "Product", "name": "{name}", "offers": {{"price": "{price}"}}}}'
        return (f"<html><head><title>{title or name}</title><script type='application/ld+json'>{ld}</script>"
                "</head><body><main><p>Hand-made in our workshop from certified wood. Ships in 2 days.</p>"
                "</main></body></html>").encode()

    def digest(body: bytes) -> str:
        record = extract_page(fetched(body), settings=SETTINGS).page
        assert record is not None
        return record.content_hash

    board, spoon = digest(product("Walnut board", "40")), digest(product("Oak spoon", "12"))
    assert board != spoon  # not duplicates of each other
    assert digest(product("Walnut board", "45")) != board  # a new price is a change
    assert digest(product("Walnut board", "40")) == board  # the same page rendered again is not
    rated = product("Walnut board", "40").replace(b'"Product",', b'"Product", "aggregateRating": '
                                                  b'{"ratingValue": "4.7", "reviewCount": "31"}, '
                                                  b'"dateModified": "2026-12-04T08:00:00Z",')
    assert digest(rated) == board  # counters, ratings and a render-time dateModified are no change


def test_latin1_without_charset_does_not_crash_and_keeps_accents():
    body = page("latin1_no_charset.html")
    out = extract_page(fetched(body, content_type="text/html"), settings=SETTINGS)
    assert out.page.title == "Café crème"
    assert out.encoding == "cp1252"


@pytest.mark.parametrize(
    ("body", "content_type", "encoding"),
    [
        ("<p>é</p>".encode(), "text/html; charset=UTF-8", "utf-8"),
        ("<p>é</p>".encode("iso-8859-1"), "text/html; charset=iso-8859-1", "cp1252"),
        ('<meta charset="windows-1251"><p>ж</p>'.encode("cp1251"), "text/html", "cp1251"),
        ('<meta http-equiv="Content-Type" content="text/html; charset=koi8-r"><p>ж</p>'.encode("koi8-r"), None,
         "koi8-r"),
        (b"\xef\xbb\xbf<p>\xc3\xa9</p>", "text/html; charset=iso-8859-1", "utf-8"),  # BOM wins over header
        ("<p>é</p>".encode(), "text/html; charset=no-such-charset", "utf-8"),
    ],
)
def test_charset_detection(body, content_type, encoding):
    text, used = decode_html(body, content_type)
    assert used == encoding
    assert "\ufffd" not in text


def test_language_from_content_language_header():
    html = b"<html><head><title>t</title></head><body><p>text</p></body></html>"
    out = extract_page(fetched(html, headers={"Content-Language": "fr-CA, en"}), settings=SETTINGS)
    assert out.page.language == "fr-CA"


def test_canonical_from_link_header_when_html_has_none():
    html = b"<html><body><p>text</p></body></html>"
    headers = {"link": '<https://news.example.org/a>; rel="preload", </canon>; rel="canonical"'}
    out = extract_page(fetched(html, headers=headers), settings=SETTINGS)
    assert out.page.canonical_url == "https://news.example.org/canon"


def test_deeply_nested_and_huge_documents_are_bounded():
    deep = b"<html><body>" + b"<div>" * 200_000 + b"<p>deep text</p>" + b"</div>" * 200_000 + b"</body></html>"
    out = extract_page(fetched(deep), settings=SETTINGS)
    assert len(out.content_hash) == 64
    many = b"<html><body>" + b'<a href="/p%d">x</a>' * 1 + b"".join(
        b'<a href="/p%d">link</a>' % i for i in range(30_000)) + b"</body></html>"
    out = extract_page(fetched(many), settings=SETTINGS)
    assert len(out.outlinks) == 10_000


@pytest.mark.parametrize("body", [b"", b"   ", b"\x00\x01\x02", b"<", b"<html></html>", b"\xff\xfe\x00"])
def test_empty_and_garbage_bodies_do_not_crash(body):
    out = extract_page(fetched(body), settings=SETTINGS)
    assert len(out.content_hash) == 64
    assert out.page.body == body


def test_non_html_is_hashed_raw_without_parsing():
    body = b"%PDF-1.7 binary"
    out = extract_page(fetched(body, content_type="application/pdf"), settings=SETTINGS)
    assert out.page.title is None
    assert out.outlinks == ()
    assert out.page.content_type == "application/pdf"


# --- the user hook ------------------------------------------------------------------------------------------


@pytest.fixture
def hook_module(tmp_path, monkeypatch):
    source = textwrap.dedent(
        """
        import datetime

        not_callable = 42

        def fields(page):
            heading = page.tree.findtext(".//h1")
            return {"heading": heading, "title_len": len(page.title), "tags": ("a", "b"),
                    "has_article": page.jsonld[0]["@type"], "header_names": sorted(page.headers)}

        def boom(page):
            raise RuntimeError("selector .price not found")

        def bad_value(page):
            return {"when": datetime.datetime(2024, 1, 1)}

        def not_a_dict(page):
            return ["x"]

        def mutates(page):
            page.jsonld[0]["@type"] = "Changed"
            try:
                page.title = "x"
            except AttributeError:
                return {"read_only": True}
            return {"read_only": False}
        """
    )
    (tmp_path / "my_hooks_mod.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_hooks_mod"
    sys.modules.pop("my_hooks_mod", None)


def test_hook_fields_are_stored(hook_module):
    hook = load_hook(f"{hook_module}:fields")
    out = extract_page(fetched(page("article_day1.html"), headers={"X-Test": "1"}), settings=SETTINGS, hook=hook)
    assert not out.failed
    assert out.page.fields == {
        "heading": "Harbour bridge reopens after repairs",
        "title_len": len(out.page.title or ""),
        "tags": ["a", "b"],
        "has_article": "NewsArticle",
        "header_names": ["x-test"],
    }
    json.dumps(out.page.fields)


def test_hook_that_raises_fails_the_page_with_its_error(hook_module):
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS, hook=load_hook(f"{hook_module}:boom"))
    assert out.failed
    assert out.error_class is ErrorClass.HOOK_FAILED
    assert "RuntimeError: selector .price not found" in (out.error or "")
    assert out.page.fields == {}
    assert out.page.hook_error == {"class": "RuntimeError", "message": "selector .price not found"}  # stored so
    # control: the same page without the hook does not fail
    assert not extract_page(fetched(page("article_day1.html")), settings=SETTINGS).failed


@pytest.mark.parametrize("name", ["bad_value", "not_a_dict"])
def test_hook_returning_non_json_fails_the_page(hook_module, name):
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS, hook=load_hook(f"{hook_module}:{name}"))
    assert out.error_class is ErrorClass.HOOK_FAILED
    assert "JSON" in (out.error or "")
    assert out.page.hook_error is not None and out.page.hook_error["class"] == "BadReturn"
    assert "JSON" in out.page.hook_error["message"]


def test_hook_gets_a_read_only_page_and_a_copy_of_jsonld(hook_module):
    out = extract_page(fetched(page("article_day1.html")), settings=SETTINGS,
                       hook=load_hook(f"{hook_module}:mutates"))
    assert out.page.fields == {"read_only": True}
    assert out.page.jsonld[0]["@type"] == "NewsArticle"
    assert Page.__dataclass_params__.frozen  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("my_hooks_mod:missing", "has no attribute 'missing'"),
        ("my_hooks_mod:not_callable", "not a callable"),
        ("nocolon", "expected 'module:function'"),
    ],
)
def test_load_hook_errors_name_the_field_and_value(hook_module, spec, needle):
    with pytest.raises(ConfigError) as info:
        load_hook(spec)
    message = str(info.value)
    assert "extractor" in message
    assert repr(spec) in message
    assert needle in message


# --- against the test web -----------------------------------------------------------------------------------


def test_web_pages_hash_stable_across_renders_and_changes_only_when_content_does(make_web):
    import httpx

    from harvester.testing.sites import HostSpec

    web = make_web([HostSpec(name="x", pages=40)], seed=3)

    def hashes(client: httpx.Client) -> dict[str, tuple[str, bytes]]:
        out = {}
        for url in web.truth["x"].detail_urls():
            response = client.get(url)
            assert response.status_code == 200
            result = FetchResult(url=url, final_url=url, status=200, started_at=0.0, elapsed_s=0.0,
                                 content_type=response.headers.get("content-type"), body=response.content,
                                 headers=dict(response.headers))
            out[url] = (extract_page(result, settings=SETTINGS).content_hash, response.content)
        return out

    with httpx.Client() as client:
        first = hashes(client)
        again = hashes(client)
        change = web.advance_day(changed=0.25, new=0.0, gone=0.0)
        day2 = hashes(client)
    assert {u: h for u, (h, _) in first.items()} == {u: h for u, (h, _) in again.items()}
    changed = change.all("changed")
    assert changed  # control: the day did change some pages
    assert {u for u in first if first[u][0] != day2[u][0]} == changed
    rerendered = [u for u in first if u not in changed and first[u][1] != day2[u][1]]
    # the test web re-renders unchanged pages with a new timestamp/ad block: bytes differ, the hash does not
    assert rerendered or any(first[u][1] != again[u][1] for u in first)


def test_html_served_without_a_content_type_is_sniffed():
    body = b"<!DOCTYPE html><html><head><title>Untyped</title></head><body><main><p>Text.</p><a href='/x'>x</a>" \
           b"</main></body></html>"
    out = extract_page(fetched(body, content_type=None), settings=SETTINGS)
    assert out.page is not None and out.page.title == "Untyped"
    assert out.outlinks == ("https://news.example.org/x",)


def test_a_profiles_own_user_agent_names_the_crawler_meta_tags_address():
    body = b'<html><head><meta name="ourbot" content="nofollow"></head><body><a href="/x">x</a></body></html>'
    ours = extract_page(fetched(body), settings=SETTINGS, user_agent="ourbot/2.0 (+https://ours.invalid/bot)")
    assert ours.robots_nofollow
    assert not extract_page(fetched(body), settings=SETTINGS).robots_nofollow  # control: the settings' agent
