"""Seeds, discovery documents and their counts as a stranger's black-box test saw them (stranger31): real servers
on 127.0.0.1 that log every request, the CLI's commands, the server's log the truth.

Each test is one defect found there.
"""

from __future__ import annotations

from collections.abc import Callable

from harvester.testing.threaded_site import Answer, Asked, threaded_site

TEXT = {"Content-Type": "text/plain"}


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
