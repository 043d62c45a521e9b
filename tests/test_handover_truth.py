"""What the harvester hands over, checked from the outside as a stranger did: a real HTTP server on 127.0.0.1 that
logs every request it receives, the CLI, and the exports read back with warcio and json.

Each test is one defect such a stranger found: the WARC claiming the exporting process's User-Agent, URLs refused by
robots.txt shown nowhere but the run's record, a moved page exported as ``done``, summary lists cut without saying
so, and the WARC's left-out line counting URLs never requested as failed requests.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator

from harvester.cli import app

FILLER = "Plain words that make a paragraph long enough for the main-content extractor to keep it. " * 6
DROP = "drop"
"""A route that closes the connection without an answer: a request sent that gets no HTTP answer."""

Route = tuple[int, dict[str, str], bytes] | str


class Site:
    """``routes``: path -> (status, headers, body) or DROP, changeable between runs; ``received``: (path, headers
    with lower-case names) of every request, in order; ``origin``: where it listens."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.received: list[tuple[str, dict[str, str]]] = []
        self.origin = ""

    def page(self, path: str, title: str, *, etag: str | None = None) -> None:
        body = (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><main><article>"
                f"<h1>{title}</h1><p>{title}. {FILLER}</p></article></main></body></html>").encode()
        self.routes[path] = (200, {"Content-Type": "text/html; charset=utf-8", **({"ETag": etag} if etag else {})},
                             body)

    def robots(self, *disallow: str) -> None:
        lines = ["User-agent: *", *(f"Disallow: {path}" for path in disallow), f"Sitemap: {self.origin}/sitemap.xml"]
        self.routes["/robots.txt"] = (200, {"Content-Type": "text/plain"}, ("\n".join(lines) + "\n").encode())

    def sitemap(self, *paths: str) -> None:
        urls = "".join(f"<url><loc>{self.origin}{path}</loc></url>" for path in paths)
        self.routes["/sitemap.xml"] = (200, {"Content-Type": "application/xml"}, (
            '<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{urls}</urlset>").encode())

    def asked(self, path: str) -> list[dict[str, str]]:
        return [headers for got, headers in self.received if got == path]


@pytest.fixture
def site() -> Iterator[Site]:
    state = Site()

    class Handler(BaseHTTPRequestHandler):
        disable_nagle_algorithm = True  # see harvester.testing.threaded_site
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = state.routes.get(self.path, (404, {}, b""))
            if route == DROP:
                self.close_connection = True
                return
            status, headers, body = route  # type: ignore[misc]
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.origin = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


Cli = Callable[..., str]


def cli_on(db: str) -> Cli:
    """``run(*args, ua=...)`` → the output of ``harvester ARGS --db DB`` in a process environment whose
    ``HARVESTER_HTTP__USER_AGENT`` is ``ua`` (None: unset, the default User-Agent)."""
    runner = CliRunner()

    def run(*args: str, ua: str | None = None) -> str:
        out = runner.invoke(app, [*args, "--db", db], env={"HARVESTER_HTTP__USER_AGENT": ua, "COLUMNS": "200"},
                            terminal_width=200)
        assert out.exit_code == 0, out.output
        return " ".join(out.output.split())

    return run


@pytest.fixture
def sqlite_cli(tmp_path: Path, clock: None) -> Cli:
    return cli_on(f"sqlite:///{tmp_path / 'h.db'}")


def warc_records(path: Path) -> list[tuple[str, Any, Any, bytes]]:
    with path.open("rb") as stream:
        return [(r.rec_type, r.rec_headers, r.http_headers, r.content_stream().read()) for r in ArchiveIterator(stream)]


def warcinfo_fields(records: list[tuple[str, Any, Any, bytes]]) -> list[tuple[str, str]]:
    kind, _, _, block = records[0]
    assert kind == "warcinfo"
    return [tuple(line.split(": ", 1)) for line in block.decode().splitlines() if line]  # type: ignore[misc]


SENT = "sentbot/1.0 (+http://127.0.0.1/sent)"
LATER = "laterbot/2.0 (+http://127.0.0.1/later)"
OTHER = "otherbot/9.9 (+http://127.0.0.1/other)"


def test_the_warc_says_the_user_agent_each_request_was_sent_with_not_the_exporters(
    site: Site, db_url: str, tmp_path: Path, clock: None,
) -> None:
    """The WARC's request records and warcinfo took the User-Agent from the exporting process's settings: an export
    run elsewhere (cron, another shell) claimed ``otherbot``, or the default, for requests that carried ``sentbot``.
    Each record must carry what its run sent, the server's log being the truth; a run from before the User-Agent
    was recorded gets none, and the warcinfo says it is not known."""
    from sqlalchemy import create_engine, text

    run = cli_on(db_url)
    run("db", "upgrade")  # a PostgreSQL frontier is never migrated behind its operator's back
    site.robots()
    site.sitemap("/a", "/b")
    site.page("/", "Home")
    site.page("/a", "Alpha", etag='"a1"')
    site.page("/b", "Beta", etag='"b1"')
    run("harvest", f"{site.origin}/", ua=SENT)
    between = datetime.now(UTC).isoformat()
    site.page("/b", "Beta again", etag='"b2"')
    run("recrawl", "--refresh", ua=LATER)
    truth = {(f"{site.origin}{path}", headers["user-agent"]) for path, headers in site.received
             if path in ("/", "/a", "/b")}
    assert {ua for _, ua in truth} == {SENT, LATER}  # control: two User-Agents went out, each to both pages

    for name, ua in (("other.warc.gz", OTHER), ("default.warc.gz", None)):
        warc = tmp_path / name
        run("export", "--format", "warc", "-o", str(warc), ua=ua)
        records = warc_records(warc)
        claimed = {(h.get_header("WARC-Target-URI"), http.get_header("User-Agent"))
                   for kind, h, http, _ in records if kind == "request"}
        assert claimed == truth, name
        assert [v for k, v in warcinfo_fields(records) if k == "http-header-user-agent"] == sorted([SENT, LATER])

    warc = tmp_path / "since.warc.gz"  # the re-crawl alone: its User-Agent only, in the warcinfo too
    run("export", "--format", "warc", "--since", between, "-o", str(warc), ua=OTHER)
    records = warc_records(warc)
    assert {http.get_header("User-Agent") for kind, _, http, _ in records if kind == "request"} == {LATER}
    assert [v for k, v in warcinfo_fields(records) if k == "http-header-user-agent"] == [LATER]

    # The harvest's runs as a frontier from before migration 0013 holds them: no User-Agent recorded.
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE runs SET user_agent = NULL WHERE user_agent = :ua"), {"ua": SENT})
    engine.dispose()
    warc = tmp_path / "old.warc.gz"
    assert "was not recorded" in run("export", "--format", "warc", "-o", str(warc), ua=OTHER)
    records = warc_records(warc)
    claimed = {(h.get_header("WARC-Target-URI"), http.get_header("User-Agent"))
               for kind, h, http, _ in records if kind == "request"}
    assert claimed == {(url, ua if ua == LATER else None) for url, ua in truth}
    fields = warcinfo_fields(records)
    assert [v for k, v in fields if k == "http-header-user-agent"] == [LATER]
    assert "not known" in dict(fields)["description"]


def test_urls_robots_txt_refuses_are_counted_per_host_in_the_harvest_summary_and_status(
    site: Site, sqlite_cli: Cli,
) -> None:
    """docs/getting-started.md §8 promised that URLs robots.txt disallows show as ``disallowed``: a sitemap naming
    /private/x under ``Disallow: /private/`` was rightly never asked, and nothing but the run's JSON record said
    so. The harvest's summary and ``status`` (text and JSON) must count them per host."""
    site.robots("/private/")
    site.sitemap("/ok", "/private/x", "/private/y")
    site.page("/", "Home")
    site.page("/ok", "Fine")
    site.page("/private/x", "Secret")
    output = sqlite_cli("harvest", f"{site.origin}/")
    assert not site.asked("/private/x") and not site.asked("/private/y")  # control: refused without a request
    host = site.origin.removeprefix("http://")
    assert re.search(r"Disallowed by robots\.txt: 2 URLs discovery found, each once \(robots\.txt as the last "
                     r"discovery, run \d+, read it\)", output)
    assert f"per host: {host} 2" in output
    assert f"per host: {host} 2" in sqlite_cli("status")
    status = json.loads(sqlite_cli("status", "--json"))
    assert status["hosts"][site.origin]["robots_refused"] == 2
    assert status["last_discover"]["robots_refused_by_host"] == {site.origin: 2}


def test_a_page_that_now_answers_a_permanent_redirect_is_moved_in_the_full_export(
    site: Site, sqlite_cli: Cli, tmp_path: Path,
) -> None:
    """The full JSONL export said ``state: done`` ("live", docs/export.md) for a URL that now answers 301, while
    ``--latest`` rightly left it out. Its versions must say ``moved``; the target's say ``done``."""
    site.robots()
    site.sitemap("/old", "/stays")
    site.page("/", "Home")
    site.page("/old", "Moving page")
    site.page("/stays", "Staying page")
    sqlite_cli("harvest", f"{site.origin}/")
    site.routes["/old"] = (301, {"Location": f"{site.origin}/new"}, b"")
    site.page("/new", "Moving page")
    site.sitemap("/new", "/stays")
    sqlite_cli("recrawl", "--refresh")
    assert site.asked("/new")  # control: the redirect was followed
    full = tmp_path / "all.jsonl"
    sqlite_cli("export", "-o", str(full))
    states = {(line["url"], line["state"]) for line in map(json.loads, full.read_text().splitlines())}
    assert (f"{site.origin}/old", "moved") in states
    assert (f"{site.origin}/stays", "done") in states
    assert not {(url, state) for url, state in states if url == f"{site.origin}/old" and state != "moved"}
    latest = tmp_path / "latest.jsonl"
    sqlite_cli("export", "--latest", "-o", str(latest))
    assert f"{site.origin}/old" not in {json.loads(line)["url"] for line in latest.read_text().splitlines()}


def test_every_list_the_summary_cuts_says_how_many_it_left_out(site: Site, sqlite_cli: Cli) -> None:
    """Day 1 said ``new: 18`` and listed 15 URLs, with no word of the other 3."""
    paths = [f"/p/{i}" for i in range(19)]
    site.robots()
    site.sitemap(*paths)
    site.page("/", "Home")
    for i, path in enumerate(paths):
        site.page(path, f"Page number {i}")
    output = sqlite_cli("harvest", f"{site.origin}/")
    listed = re.findall(r" new: (http\S+)", output)
    assert "new: 19 " in output
    assert 0 < len(listed) < 19
    assert f"... and {19 - len(listed)} more new" in output
    assert f"... and {19 - len(listed)} more new" in sqlite_cli("status")


def test_the_warc_left_out_line_tells_failed_requests_from_urls_never_asked(
    site: Site, sqlite_cli: Cli, tmp_path: Path,
) -> None:
    """The WARC export said "7 without an HTTP answer" where 3 requests had failed and 4 URLs were never requested
    (``unsent``). A request that got no answer and a URL completed without a request are told apart, each counted
    as the server saw it."""
    site.robots()
    site.sitemap("/a", "/broken")
    site.page("/", "Home")
    site.page("/a", "Alpha")
    site.routes["/broken"] = DROP
    sqlite_cli("harvest", f"{site.origin}/")
    # robots.txt redirects to an address the policy refuses (a loopback address the seed did not name): nothing is
    # sent there, and the URLs due are completed without a request. (A robots.txt that refuses a stored URL no
    # longer makes one: the rules' change re-judges the URL at discovery, with no fetch at all; nor does an
    # unavailable one, a 5xx: the host is left alone, its URLs deferred uncompleted.)
    site.routes["/robots.txt"] = (301, {"Location": "http://127.0.0.2:9/robots.txt"}, b"")
    day1 = len(site.received)
    sqlite_cli("recrawl", "--refresh")
    assert "/a" not in [path for path, _ in site.received[day1:]]  # control: never sent on day 2
    output = sqlite_cli("export", "--format", "warc", "-o", str(tmp_path / "all.warc.gz"))
    failed = int(re.search(r"(\d+) failed without an HTTP answer", output).group(1))  # type: ignore[union-attr]
    unsent = int(re.search(r"(\d+) never sent", output).group(1))  # type: ignore[union-attr]
    assert failed == len(site.asked("/broken")) > 0  # each request the server got and never answered
    assert unsent >= 1
    assert "without an HTTP answer" not in output.replace("failed without an HTTP answer", "")
