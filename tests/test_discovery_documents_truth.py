"""Seeds, discovery documents and their counts as a stranger's black-box test saw them (stranger31): real servers
on 127.0.0.1 that log every request, the CLI's commands, the server's log the truth.

Each test is one defect found there.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from harvester.testing.threaded_site import Answer, Asked, threaded_site

TEXT = {"Content-Type": "text/plain"}
XML = {"Content-Type": "application/xml"}


def page(path: str) -> Answer:
    body = (f"<!doctype html><html lang='en'><head><title>{path}</title></head><body><main><article><h1>{path}</h1>"
            f"<p>{'Words enough for the extractor to keep a paragraph of this page. ' * 5}</p></article></main>"
            "</body></html>").encode()
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body


def serve(routes: dict[str, Answer], asked: list[Asked]) -> Callable[[Asked], Answer]:
    def answer(request: Asked) -> Answer:
        asked.append(request)
        return routes.get(request.path) or (page(request.path) if "." not in request.path else (404, TEXT, b""))
    return answer


def test_a_seed_whose_host_is_percent_encoded_is_fetched_at_its_decoded_host(cli: Callable[..., str]) -> None:
    """``http://%31%32%37.0.0.%31:PORT/`` (RFC 3986 §3.2.2: 127.0.0.1 percent-encoded) sent no request: its URLs
    were canonicalized to 127.0.0.1, but the address policy's seed origins were resolved from the host as typed
    ("seed host %31%32%37.0.0.%31 does not resolve"), so every fetch was refused as not the seed's own address.
    A seed takes the canonical form every other URL takes, for the address policy too."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {"/robots.txt": (200, TEXT, b"User-agent: *\nAllow: /\n")}
    with threaded_site(serve(routes, asked)) as origin:
        port = origin.rpartition(":")[2]
        out = cli("discover", f"http://%31%32%37.0.0.%31:{port}/")
    assert {"/robots.txt", "/"} <= {r.path for r in asked}, out
    assert "address_refused" not in out


def urlset(origin: str, *paths: str) -> bytes:
    urls = "".join(f"<url><loc>{origin}{path}</loc></url>\n" for path in paths)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{urls}</urlset>\n").encode()


def test_a_page_refused_for_its_media_type_is_failed_not_deferred(cli: Callable[..., str]) -> None:
    """/b.pdf (application/pdf) was asked once, refused as bad_content_type and counted ``failed: 1`` and
    ``deferred: 1``: it stays queued, due only after ``revisit.max_s`` (it would fail the same way now), and the
    cycle counted every queued URL it had fetched as left to the next run. A page that failed every attempt the
    run gives it is failed, not deferred (docs/operations.md, "What the counts mean")."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}
    with threaded_site(serve(routes, asked)) as origin:
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nSitemap: {origin}/sm.xml\n".encode())
        routes["/sm.xml"] = (200, XML, urlset(origin, "/a", "/b.pdf"))
        routes["/b.pdf"] = (200, {"Content-Type": "application/pdf"}, b"%PDF-1.4 not html")
        cli("harvest", f"{origin}/")
        status = json.loads(cli("status", "--json"))
    assert [r.path for r in asked].count("/b.pdf") == 1  # control: asked once, answered
    last = status["last_cycle"]
    assert last["failures"] == {"bad_content_type": 1} and last["failed"] == 1
    assert last["deferred"] == 0, last


def test_the_failures_breakdown_adds_up_to_failed(cli: Callable[..., str]) -> None:
    """/r redirects to another port (out of scope): the cycle said ``failures: {'out_of_scope': 1}`` beside
    ``failed: 0``. ``failures`` breaks ``failed`` down by class; an answer that was not a failed request (a
    redirect left unfollowed) is shown apart, never in that breakdown."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}
    with threaded_site(serve(routes, asked)) as origin, threaded_site(serve({}, asked)) as other:
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nSitemap: {origin}/sm.xml\n".encode())
        routes["/sm.xml"] = (200, XML, urlset(origin, "/a", "/r"))
        routes["/r"] = (301, {"Location": f"{other}/elsewhere"}, b"")
        cli("harvest", f"{origin}/")
        status = json.loads(cli("status", "--json"))
    assert "/r" in [r.path for r in asked]  # control: the redirect was answered
    last = status["last_cycle"]
    assert sum(last["failures"].values()) == last["failed"], last

