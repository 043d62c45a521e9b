"""A seed whose http answers redirect to https (the usual move of a site) is harvested at https, its sitemap read
at its https URL and that sitemap's https entries in scope, though the scope is by origin, scheme included
(``rules/scope.py``): the move is recorded (``hosts.moved_to``) and the https origin joins the scope.

Real servers on 127.0.0.46, ports 80 and 443 (a seed on a default port reaches both, docs/internals.md "Address
policy"), the TLS one with a certificate made for the test and trusted by the harvester's context in this process.
"""

from __future__ import annotations

import errno
import socket
import sqlite3
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harvester.fetch import transport
from harvester.runtime import CLOCK

HOST = "127.0.0.46"
HOST_B = "127.0.0.47"
DAY0 = datetime(2026, 12, 8, 3, 0, tzinfo=UTC)


@contextmanager
def _serve(port: int, answer: Callable[[str], tuple[int, dict[str, str], bytes]], log: list[tuple[str, str]],
           scheme: str, tls: ssl.SSLContext | None = None, host: str = HOST) -> Iterator[None]:
    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # see harvester.testing.threaded_site
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            log.append((scheme, self.path))
            status, headers, body = answer(self.path)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EADDRINUSE):
            pytest.skip(f"{host}:{port} cannot be served here: {exc}")
        raise
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def server_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A TLS context for the test's https server, its certificate (made for the test, valid for 127.0.0.46 and
    127.0.0.47) trusted by the harvester's context in this process."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                           f"/CN={HOST}", "-addext", f"subjectAltName=IP:{HOST},IP:{HOST_B}", "-keyout", str(key),
                           "-out", str(cert)], capture_output=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"no certificate could be made: {made.stderr[-300:]!r}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(transport, "shared_ssl_context", lambda: client_tls)
    return context


def test_a_seed_moved_to_https_is_harvested_there_with_its_https_sitemap_in_scope(
    cli: Callable[..., str], tmp_path: Path, server_tls: ssl.SSLContext,
) -> None:
    secure = f"https://{HOST}"
    pages = ["/a", "/b"]

    def plain(path: str) -> tuple[int, dict[str, str], bytes]:
        return 301, {"Location": secure + path}, b""

    def tls_site(path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, f"User-agent: *\nSitemap: {secure}/sitemap.xml\n".encode()
        if path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{secure}{p}</loc></url>" for p in pages)
            return 200, {"Content-Type": "application/xml"}, (
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>').encode()
        if path in pages or path == "/":
            return 200, {"Content-Type": "text/html"}, (
                f"<html><body><main><article><h1>{path}</h1><p>Words enough for the extractor to keep of {path}."
                "</p></article></main></body></html>").encode()
        return 404, {"Content-Type": "text/plain"}, b""

    log: list[tuple[str, str]] = []
    with socket.socket() as probe:  # the address exists on loopback (127.0.0.0/8)
        probe.bind((HOST, 0))
    with _serve(80, plain, log, "http"), _serve(443, tls_site, log, "https", server_tls):
        CLOCK.travel_to(DAY0)
        summary = " ".join(cli("harvest", f"http://{HOST}/").split())
    assert ("https", "/sitemap.xml") in log, (log, summary)
    assert {("https", p) for p in pages} <= set(log), (log, summary)
    with sqlite3.connect(tmp_path / "harvester.db") as conn:
        moved = dict(conn.execute("SELECT origin, moved_to FROM hosts WHERE moved_to IS NOT NULL").fetchall())
        done = {url for url, in conn.execute(
            "SELECT h.origin || u.path FROM urls u JOIN hosts h ON h.id = u.host_id WHERE u.state = 'done'")}
    assert moved == {f"http://{HOST}": secure}
    assert {secure + p for p in pages} <= done


def test_an_https_site_naming_its_pages_by_http_keeps_them(cli: Callable[..., str], tmp_path: Path,
                                                            server_tls: ssl.SSLContext) -> None:
    """An https seed whose sitemap and links name its pages by http:// (a site behind a TLS proxy that writes its
    URLs with the scheme it is reached by inside, or links written before the move), http redirecting to https: the
    usual case on the web. Under the scope by origin the http entries were dropped as ``other_scheme`` and the site
    harvested nothing but its home page. The http origin of an https seed's host (default ports) is the same site."""
    plain_origin, secure = f"http://{HOST_B}", f"https://{HOST_B}"

    def plain(path: str) -> tuple[int, dict[str, str], bytes]:
        return 301, {"Location": secure + path}, b""

    def tls_site(path: str) -> tuple[int, dict[str, str], bytes]:
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, f"User-agent: *\nSitemap: {secure}/sitemap.xml\n".encode()
        if path == "/sitemap.xml":
            urls = "".join(f"<url><loc>{plain_origin}{p}</loc></url>" for p in ("/a", "/b"))
            return 200, {"Content-Type": "application/xml"}, (
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>').encode()
        if path in ("/", "/a", "/b"):
            return 200, {"Content-Type": "text/html"}, (
                f"<html><body><main><article><h1>{path}</h1><p>Words enough for the extractor to keep of {path}."
                "</p></article></main></body></html>").encode()
        return 404, {"Content-Type": "text/plain"}, b""

    log: list[tuple[str, str]] = []
    with socket.socket() as probe:  # the address exists on loopback (127.0.0.0/8)
        probe.bind((HOST_B, 0))
    with _serve(80, plain, log, "http", host=HOST_B), _serve(443, tls_site, log, "https", server_tls, host=HOST_B):
        CLOCK.travel_to(DAY0)
        summary = " ".join(cli("harvest", f"{secure}/").split())
    with sqlite3.connect(tmp_path / "harvester.db") as conn:
        done = {url for url, in conn.execute(
            "SELECT h.origin || u.path FROM urls u JOIN hosts h ON h.id = u.host_id WHERE u.state = 'done'")}
    assert ("https", "/sitemap.xml") in log, (log, summary)
    assert "other_scheme" not in summary, summary
    assert {secure + p for p in ("/a", "/b")} <= done, (done, log, summary)
