"""robots.txt and sitemaps as a stranger's black-box test saw them (stranger42b): real servers on 127.0.0.1 that log
every request, the CLI's harvest and recrawl, the server's log the truth.

Each test is one defect found there: a robots.txt line cut at the 500 KiB limit read as a rule the site never wrote,
a robots.txt redirected to another origin sent to with the wrong URL's ETag, and a sitemap broken midway losing its
tail without a word.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from harvester.runtime import CLOCK
from harvester.testing.threaded_site import Answer, Asked, threaded_site

LIMIT = 500 * 1024
TEXT = {"Content-Type": "text/plain"}
XML = {"Content-Type": "application/xml"}
DAY0 = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


def page(path: str) -> Answer:
    body = (f"<!doctype html><html lang='en'><head><title>{path}</title></head><body><main><article><h1>{path}</h1>"
            f"<p>{'Words enough for the extractor to keep a paragraph of this page. ' * 5}</p></article></main>"
            "</body></html>").encode()
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body


def urlset(origin: str, *paths: str) -> bytes:
    urls = "".join(f"<url><loc>{origin}{path}</loc></url>\n" for path in paths)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{urls}</urlset>\n").encode()


def cut_robots(head: str, cut_line: str, at: str) -> bytes:
    """``head``, comment lines, then ``cut_line`` placed so that the 500 KiB limit falls right after its prefix
    ``at``, then a tail past the limit."""
    body = head.encode()
    while len(body) < LIMIT - 300:
        body += b"# " + b"x" * 76 + b"\n"
    body += b"#" + b"z" * (LIMIT - len(body) - len(at) - 2) + b"\n"
    body += cut_line.encode() + b"\n" + b"# tail\n" * 100
    assert body[:LIMIT].endswith(at.encode()) and not body[:LIMIT].endswith(cut_line.encode())
    return body


def serve(routes: dict[str, Answer], asked: list[Asked]) -> Callable[[Asked], Answer]:
    def answer(request: Asked) -> Answer:
        asked.append(request)
        return routes.get(request.path) or (page(request.path) if "." not in request.path else (404, TEXT, b""))
    return answer


def test_a_robots_line_cut_at_the_500_kib_limit_is_no_rule(cli: Callable[..., str]) -> None:
    """The cut fell right after ``Allow: /private`` of ``Allow: /private-pub``: the fragment tied ``Disallow:
    /private`` and won, and /private1 was fetched. On a second site ``Disallow: /syyy`` cut to ``Disallow: /s``
    blocked /second and the known-path probe /sitemap.xml. A line the cut falls in is no rule (RFC 9309's grammar
    ends each with an EOL); a rule written whole before the cut still holds."""
    asked: list[Asked] = []
    allow: dict[str, Answer] = {}
    block: dict[str, Answer] = {}
    with threaded_site(serve(allow, asked)) as one, threaded_site(serve(block, asked)) as two:
        allow["/robots.txt"] = (200, TEXT, cut_robots(
            f"Sitemap: {one}/map.xml\nUser-agent: *\nDisallow: /private\n", "Allow: /private-pub", "Allow: /private"))
        allow["/map.xml"] = (200, XML, urlset(one, "/private1", "/private2", "/open"))
        block["/robots.txt"] = (200, TEXT, cut_robots("User-agent: *\nDisallow: /early\n", "Disallow: /syyyyyyyyy",
                                                      "Disallow: /s"))
        block["/sitemap.xml"] = (200, XML, urlset(two, "/early", "/second", "/other"))
        cli("harvest", f"{one}/", f"{two}/")
    got = {(r.origin, r.path) for r in asked}
    assert (one, "/open") in got  # control: the first site was crawled
    assert not {(one, "/private1"), (one, "/private2"), (two, "/early")} & got
    assert {(two, "/sitemap.xml"), (two, "/second"), (two, "/other")} <= got


def test_a_robots_redirect_to_another_origin_sends_each_url_only_its_own_validators(
    cli: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """/robots.txt → 301 /r1.txt → 302 another origin's /r2.txt (ETag "r2"). The next day /robots.txt and /r1.txt
    were sent If-None-Match "r2" (a tag they never issued) and /r2.txt, which issued it, was asked unconditionally
    and answered in full. Validators go to the URL that issued them alone (RFC 9110 §13.1.2)."""
    monkeypatch.setenv("HARVESTER_HTTP__ALLOW_ADDRESSES", '["127.0.0.1"]')  # the other origin: another port
    asked: list[Asked] = []
    first: dict[str, Answer] = {}
    modified = "Mon, 30 Nov 2026 00:00:00 GMT"
    robots = b""

    def target(request: Asked) -> Answer:
        asked.append(request)
        if request.path != "/r2.txt":
            return 404, TEXT, b""
        if request.headers.get("if-none-match") == '"r2"':
            return 304, {"ETag": '"r2"'}, b""
        return 200, {**TEXT, "ETag": '"r2"', "Last-Modified": modified}, robots

    with threaded_site(serve(first, asked)) as one, threaded_site(target) as two:
        robots = f"User-agent: *\nDisallow: /blocked\nSitemap: {one}/map.xml\n".encode()
        first["/robots.txt"] = (301, {"Location": "/r1.txt"}, b"")
        first["/r1.txt"] = (302, {"Location": f"{two}/r2.txt"}, b"")
        first["/map.xml"] = (200, XML, urlset(one, "/blocked", "/open"))
        CLOCK.travel_to(DAY0)
        cli("harvest", f"{one}/")
        day1 = len(asked)
        CLOCK.travel_to(DAY0 + timedelta(hours=24))
        cli("recrawl")
    assert any(r.path == "/open" for r in asked) and not any(r.path == "/blocked" for r in asked)  # rules read
    sent = [(r.path, r.headers.get("if-none-match"), r.headers.get("if-modified-since")) for r in asked[day1:]
            if r.path in ("/robots.txt", "/r1.txt", "/r2.txt")]
    assert sent == [("/robots.txt", None, None), ("/r1.txt", None, None), ("/r2.txt", '"r2"', modified)]


def test_a_sitemap_broken_midway_is_reported_with_what_was_kept(cli: Callable[..., str]) -> None:
    """``<<broken & </oops>`` after the 4th of 6 entries: lxml's recovery ended the file there without a word, and
    the sitemap was shown read whole (url_count 4, no problem). The entries before the break are kept, and the
    summary and status name the document, where the XML broke and how many entries were kept."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}
    with threaded_site(serve(routes, asked)) as origin:
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nSitemap: {origin}/broken.xml\n".encode())
        entry = f"<url><loc>{origin}/p3</loc></url>".encode()
        body = urlset(origin, *(f"/p{i}" for i in range(6))).replace(entry, entry + b"<<broken & </oops>")
        routes["/broken.xml"] = (200, XML, body)
        summary = " ".join(cli("harvest", f"{origin}/").split())
        status = json.loads(cli("status", "--json"))["last_discover"]["problems"]
        shown = " ".join(cli("status").split())
    assert {f"/p{i}" for i in range(4)} <= {r.path for r in asked}  # what was read is kept
    said = f"sitemap {origin}/broken.xml is broken: malformed XML at line 6"
    assert said in summary and "4 entries kept" in summary
    assert any(said in problem and "4 entries kept" in problem for problem in status)
    assert said in shown


def test_a_sitemaps_odd_entries_are_named_where_the_operator_looks(cli: Callable[..., str]) -> None:
    """Several ``<loc>`` in one ``<url>`` (an unclosed element) and a ``<loc>`` holding a control character: each
    ``<loc>`` read is kept and the refused one never asked, but the sitemap's problems stayed in the run's per-host
    report, out of the summary and ``status`` (stranger 45: ``status --json`` problems empty)."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}
    with threaded_site(serve(routes, asked)) as origin:
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nSitemap: {origin}/odd.xml\n".encode())
        body = urlset(origin, "/p0", "/p3").replace(
            f"<loc>{origin}/p0</loc>".encode(), f"<loc>{origin}/p0</loc><loc>{origin}/p1</loc>".encode())
        body = body.replace(b"</urlset>", f"<url><loc>{origin}/p\x01x</loc></url></urlset>".encode())
        routes["/odd.xml"] = (200, XML, body)
        summary = " ".join(cli("harvest", f"{origin}/").split())
        status = json.loads(cli("status", "--json"))["last_discover"]["problems"]
    assert {"/p0", "/p1", "/p3"} <= {r.path for r in asked}
    assert not any("\x01" in r.path or r.path.startswith("/p%01") or r.path == "/px" for r in asked)
    said = f"sitemap {origin}/odd.xml: 1 <url> elements with several <loc>"
    assert said in summary
    assert any(said in problem and "control character" in problem for problem in status), status
