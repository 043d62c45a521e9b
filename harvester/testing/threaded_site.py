"""A one-off site for a test that needs answers of its own beside the test web: ``http.server`` on 127.0.0.1 in a
daemon thread, each GET answered by a plain function of the request.

Blocking handlers in a thread of their own, so a test drives the site (what it serves today, what it was asked)
from plain code while the CLI, which runs its own event loop, harvests it. Loopback only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOOPBACK = "127.0.0.1"

Answer = tuple[int, dict[str, str], bytes]
"""(status, headers, body) of one answer; the server adds its Content-Length."""


@dataclass(frozen=True, slots=True)
class Asked:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    """Every header, names lowercased: what a WARC request record is checked against."""

    @property
    def origin(self) -> str:
        return f"http://{self.headers['host']}"


@contextmanager
def threaded_site(answer: Callable[[Asked], Answer]) -> Iterator[str]:
    """The origin of a server answering every GET with ``answer(request)`` (HTTP/1.1, keep-alive), stopped when the
    block ends."""

    class Handler(BaseHTTPRequestHandler):
        # Headers and body leave in two writes: with Nagle's algorithm the body waits for the client's ACK of the
        # headers, which Linux delays ~40 ms. Every answer took 40 ms on loopback; no real server's timing is that.
        disable_nagle_algorithm = True
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            status, headers, body = answer(Asked(self.path, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="threaded-site").start()
    try:
        yield f"http://{LOOPBACK}:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def robots_txt(origin: str) -> Answer:
    """A robots.txt that allows everything and names the site's one sitemap (``sitemap``)."""
    return 200, {"Content-Type": "text/plain"}, f"User-agent: *\nSitemap: {origin}/sitemap.xml\n".encode()


def sitemap(origin: str, lastmods: Mapping[str, str | None]) -> Answer:
    """The sitemap of ``lastmods``' paths (path -> its lastmod, None for none)."""
    urls = "".join(f"<url><loc>{origin}{path}</loc>" + (f"<lastmod>{lastmod}</lastmod>" if lastmod else "") + "</url>"
                   for path, lastmod in lastmods.items())
    return 200, {"Content-Type": "application/xml"}, (
        '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"{urls}</urlset>").encode()
