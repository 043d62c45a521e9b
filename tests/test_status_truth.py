"""Every count handed over (``status``, the summary the CLI prints, the cycle's counts, ``export``) against what a
little web of our own did and what its access log shows, over daily runs on the harvester's clock.

The web (``http.server`` on 127.0.0.1) serves, on day 0, a page that never changes, one edited overnight, two
deleted overnight (one answering 404, one 410), one that moves overnight (301 to a new address), and one robots.txt
refuses; day 1 adds a page; day 2 brings a deleted page back. The seed ``/`` answers 404 (no home page), as an
API-only or sitemap-only site does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import daily_cli
import pytest
from typer.testing import CliRunner

from harvester.cli import app
from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, sitemap, threaded_site

FILLER = ("This paragraph is long enough for a main-content extractor to take it for the article body, with several "
          "clauses and plain words that carry meaning. ")
HTML = {"Content-Type": "text/html; charset=utf-8"}


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def page(title: str, text: str) -> bytes:
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><main><article>"
            f"<h1>{title}</h1><p>{FILLER}</p><p>{text}</p></article></main></body></html>").encode()


@dataclass
class Web:
    """What the server serves on ``day`` and every answer it sent: (day, path, status)."""

    day: int = 0
    log: list[tuple[int, str, int]] = field(default_factory=list)

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        d = self.day
        if path == "/same":
            return 200, {**HTML, "ETag": '"same"'}, page("Same", "Never changes.")
        if path == "/edited":
            return 200, {**HTML, "ETag": f'"edited-{d}"'}, page("Edited", f"Edition {d}.")
        if path == "/deleted-404":
            return (404, {"Content-Type": "text/plain"}, b"") if d == 1 else (
                200, {**HTML, "ETag": '"d404"'}, page("Deleted 404", "Deleted on day 1, back on day 2."))
        if path == "/deleted-410":
            return (410, {"Content-Type": "text/plain"}, b"") if d else (
                200, {**HTML, "ETag": '"d410"'}, page("Deleted 410", "Gone tomorrow."))
        if path == "/mover":
            return (301, {"Location": "/moved-here"}, b"") if d else (
                200, {**HTML, "ETag": '"mover"'}, page("Mover", "Moves tomorrow."))
        if path == "/moved-here" and d:
            return 200, {**HTML, "ETag": '"moved"'}, page("Moved here", "The page that moved.")
        if path == "/added" and d:
            return 200, {**HTML, "ETag": '"added"'}, page("Added", "New on day 1.")
        if path == "/private/secret":
            return 200, HTML, page("Secret", "robots.txt refuses it.")
        return 404, {"Content-Type": "text/plain"}, b""

    def listed(self) -> list[str]:
        paths = ["/same", "/edited", "/deleted-404", "/deleted-410", "/mover", "/private/secret"]
        return paths + (["/moved-here", "/added"] if self.day else [])

    def lastmod(self, path: str) -> str:
        """When ``path`` last changed, as the sitemap says (truthfully)."""
        changed = {"/edited": self.day, "/moved-here": 1, "/added": 1, "/mover": min(self.day, 1),
                   "/deleted-404": 0 if self.day < 2 else 2}.get(path, 0)
        return (run_at(changed) - timedelta(hours=5)).isoformat()

    def requests(self, day: int) -> list[tuple[str, int]]:
        """(path, status) of the pages asked on ``day``: robots.txt and the sitemap left out."""
        return [(path, status) for d, path, status in self.log
                if d == day and path not in ("/robots.txt", "/sitemap.xml")]


@pytest.fixture
def web() -> Iterator[tuple[str, Web]]:
    state = Web()

    def respond(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            answer: Answer = (200, {"Content-Type": "text/plain"},
                              f"User-agent: *\nDisallow: /private/\nSitemap: {request.origin}/sitemap.xml\n".encode())
        elif request.path == "/sitemap.xml":
            answer = sitemap(request.origin, {path: state.lastmod(path) for path in state.listed()})
        else:
            status, headers, body = state.answer(request.path)
            if status == 200 and "ETag" in headers and request.headers.get("if-none-match") == headers["ETag"]:
                status, headers, body = 304, {"ETag": headers["ETag"]}, b""
            answer = (status, headers, body)
        state.log.append((state.day, request.path, answer[0]))
        return answer

    with threaded_site(respond) as origin:
        yield origin, state


@pytest.fixture
def cli(db_url: str, clock: None) -> Callable[..., str]:
    """``cli(*args)`` → the output of ``harvester ARGS --db <db_url>`` (SQLite and PostgreSQL), run in this process;
    a non-zero exit fails the test with that output."""
    return daily_cli.cli_on(db_url, wide=False)


def run_day(cli: Callable[..., str], site: Web, day: int, origin: str) -> tuple[str, dict]:
    site.day = day
    out = daily_cli.run_day(cli, day, origin)
    return out, json.loads(cli("status", "--json"))


def exported_states(cli: Callable[..., str], out: Path) -> dict[str, str]:
    """url path -> its state as ``export`` says (each URL's versions all say its state now)."""
    cli("export", "-o", str(out))
    return {json.loads(line)["url"].rsplit(":", 1)[1].split("/", 1)[1]: json.loads(line)["state"]
            for line in out.read_text().splitlines()}


def test_moved_and_restored_pages_are_shown_as_the_server_answered(
    web: tuple[str, Web], cli: Callable[..., str], tmp_path: Path
) -> None:
    """Day 1 ``/mover`` answers 301: ``status`` said done (live) while ``export`` said moved, and no summary named it;
    day 2 ``/deleted-404`` is back (a 304 to its old ETag): no summary named it either."""
    origin, site = web
    run_day(cli, site, 0, origin)
    out, status = run_day(cli, site, 1, origin)
    assert ("/mover", 301) in site.requests(1)
    cycle = status["last_cycle"]
    assert cycle["moved_urls"] == [f"{origin}/mover"] and cycle["moved"] == 1
    assert cycle["restored"] == 0 and cycle["restored_urls"] == []
    assert f"  moved: {origin}/mover" in out.splitlines()
    states = exported_states(cli, tmp_path / "all.jsonl")
    assert states["mover"] == "moved"
    # status: the moved URL apart from the live ones, as export says it (done: live pages only).
    host = status["hosts"][origin]["states"]
    assert status["by_state"].get("moved") == host.get("moved") == 1
    live = {path for path, state in states.items() if state == "done"}
    assert status["by_state"]["done"] == len(live) == 4  # same, edited, moved-here, added
    assert "moved" in cli("status")
    # Requests: each page request in the server's log once in fetched; robots.txt's refusal asked nothing.
    assert cycle["fetched"] == len(site.requests(1))
    assert cycle["not_modified"] == sum(answer == 304 for _, answer in site.requests(1))
    assert status["last_discover"]["robots_refused"] == 1
    assert not any(path.startswith("/private/") for _, path, _ in site.log)

    out, status = run_day(cli, site, 2, origin)
    assert ("/deleted-404", 304) in site.requests(2)
    cycle = status["last_cycle"]
    assert cycle["restored_urls"] == [f"{origin}/deleted-404"] and cycle["restored"] == 1
    assert cycle["moved"] == 0  # asked again, still moved: nothing new
    assert f"  restored: {origin}/deleted-404" in out.splitlines()
    assert "restored: 1" in out
    wide = [line for line in out.splitlines() if len(line) > 80 and "://" not in line]
    assert not wide  # .ci/wheel-demo: 80 columns, a URL line aside


def test_db_check_finds_and_recounts_a_queue_count_that_disagrees_with_the_queue(
    web: tuple[str, Web], cli: Callable[..., str], db_url: str
) -> None:
    origin, site = web
    run_day(cli, site, 0, origin)
    from sqlalchemy import create_engine, text

    assert "queue_counts agrees with the queue" in cli("db", "check")
    engine = create_engine(db_url)
    with engine.begin() as conn:  # a trigger dropped by hand, a restore of one table: the count is wrong
        conn.execute(text("INSERT INTO queue_counts (host_id, kind, n) SELECT id, 'detail', 7 FROM hosts"))
    engine.dispose()
    queued_before = json.loads(cli("status", "--json"))["by_state"].get("queued", 0)
    assert queued_before == 7  # what status showed: 7 queued URLs that are not there
    runner = CliRunner()
    checked = runner.invoke(app, ["db", "check", "--db", db_url])
    assert checked.exit_code == 1
    assert "queue_counts disagrees with the queue" in checked.output and "--repair" in checked.output
    repaired = runner.invoke(app, ["db", "check", "--repair", "--db", db_url])
    assert repaired.exit_code == 0, repaired.output
    assert "recounted" in repaired.output
    assert json.loads(cli("status", "--json"))["by_state"].get("queued", 0) == 0
    assert "queue_counts agrees with the queue" in cli("db", "check")


def test_a_404_is_gone_or_missing_alike_in_status_the_summary_and_export(
    web: tuple[str, Web], cli: Callable[..., str], tmp_path: Path
) -> None:
    """The seed ``/`` answers 404 and was never stored: the cycle counted it nowhere (a listing page) while
    ``status`` said gone 1 on day 0, and on day 1 gone 3 beside the summary's 2 and export's 2. One definition:
    gone, a stored page that answered 404/410; missing, a 404/410 never stored (in no export)."""
    origin, site = web
    _, status = run_day(cli, site, 0, origin)
    assert ("/", 404) in site.requests(0)
    cycle = status["last_cycle"]
    assert (cycle["gone"], cycle["missing"]) == (0, 1)
    assert status["by_state"].get("missing") == 1 and status["by_state"].get("gone", 0) == 0
    _, status = run_day(cli, site, 1, origin)
    cycle = status["last_cycle"]
    gone_on_the_wire = sorted(path for path, answer in site.requests(1) if answer in (404, 410) and path != "/")
    assert sorted(url.removeprefix(origin) for url in cycle["gone_urls"]) == gone_on_the_wire
    states = exported_states(cli, tmp_path / "all.jsonl")
    exported_gone = sorted(f"/{path}" for path, state in states.items() if state == "gone")
    assert exported_gone == gone_on_the_wire == ["/deleted-404", "/deleted-410"]
    assert status["by_state"]["gone"] == cycle["gone"] == 2
    assert status["by_state"]["missing"] == 1 and cycle["missing"] == 0  # the seed again: nothing new


def test_a_page_sent_in_brotli_unasked_is_a_lasting_failure_not_a_daily_request(
    cli: Callable[..., str], tmp_path: Path
) -> None:
    """A server sends ``Content-Encoding: br`` though we ask for gzip and deflate only; the harvester decodes
    neither br nor anything it cannot bound, so the page fails ``bad_content``. Over four daily runs (the clock
    24 h apart, its sitemap lastmod new every day, as a site stamping its build time does) it is asked once:
    a failure that would repeat as it is waits ``revisit.max_s``, not a day."""
    asked: list[tuple[int, str]] = []
    day = [0]

    def respond(request: Asked) -> Answer:
        asked.append((day[0], request.path))
        if request.path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, f"Sitemap: {request.origin}/sitemap.xml\n".encode()
        if request.path == "/sitemap.xml":
            stamp = (run_at(day[0]) - timedelta(hours=5)).isoformat()
            return sitemap(request.origin, {"/br": stamp, "/plain": stamp})
        if request.path == "/br":
            return 200, {**HTML, "Content-Encoding": "br"}, b"\x1b\x03\x00\xf8\x8d\x94n\xde\xc4\x03"
        if request.path == "/plain":
            return 200, HTML, page("Plain", f"Day {day[0]}.")
        return 404, {"Content-Type": "text/plain"}, b""

    with threaded_site(respond) as origin:
        for day[0] in range(4):
            CLOCK.travel_to(run_at(day[0]))
            if day[0] == 0:
                cli("db", "upgrade")
            cli("harvest", f"{origin}/") if day[0] == 0 else cli("recrawl")
            status = json.loads(cli("status", "--json"))
            assert status["last_cycle"]["failures"] == ({"bad_content": 1} if day[0] == 0 else {})
    assert [d for d, path in asked if path == "/br"] == [0]
    assert [d for d, path in asked if path == "/plain"] == [0, 1, 2, 3]  # the day's pages were asked
