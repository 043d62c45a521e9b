"""A recrawl killed -9 and run again decides the contradicting 304s as the uninterrupted run would (stranger-ops,
stop 46): the host's record was tested in the run before the kill (its first 304s asked again in full), so the
resumed run believes the 304s that follow. Kept in the process only, that was forgotten with it: the rerun probed
one more page, asked again without validators (the server's log: /p/29 answered 304, then asked in full).

Through the commands (``harvester harvest``, then ``harvester recrawl`` 24 h later, killed -9 part way and run again
minutes after), on a real server on 127.0.0.1 whose log is the truth.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from daily_cli import CliAt

from harvester.rules.revisit import REASK_PROBES
from harvester.testing.threaded_site import Answer, Asked, threaded_site

DAY0 = datetime(2026, 12, 8, 3, 0, tzinfo=UTC)
PAGES = [f"/p/{n}" for n in range(1, 13)]
WAIT_S = 60.0
"""The most any wait of this test lasts (each ends on the event it waits for)."""


def _db_shows(db: Path, sql: str) -> int:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute(sql).fetchone()[0] or 0)
    except sqlite3.OperationalError:  # locked or not yet there: asked again
        return 0


def test_a_recrawl_killed_9_and_resumed_believes_the_304s_its_record_was_tested_for(tmp_path: Path) -> None:
    """Every page keeps its ETag and answers 304; the sitemap dates every page after our copy the next day (a site
    stamping its lastmods). Day 1's run asks the first ``REASK_PROBES`` 304s again in full, and believes the rest:
    ``REASK_PROBES`` full requests, killed or not. The kill falls after those re-asks were decided and recorded
    (their full requests held by the server until then), with pages still to ask: the rerun resumes the run and
    must not probe one more, nor ask again a page whose 304 was recorded before the kill."""
    day = [0]
    attempt = [1]
    release = threading.Event()
    log: list[tuple[int, int, str, bool, int]] = []
    """(day, attempt, path, sent with validators, status) per page request."""

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, (
                f"User-agent: *\nCrawl-delay: 0.3\nSitemap: {origin}/sitemap.xml\n").encode()
        if request.path == "/sitemap.xml":
            lastmod = "2026-11-30T00:00:00Z" if day[0] == 0 else "2026-12-09T01:00:00Z"
            urls = "".join(f"<url><loc>{origin}{p}</loc><lastmod>{lastmod}</lastmod></url>" for p in PAGES)
            return 200, {"Content-Type": "application/xml"}, (
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>').encode()
        if request.path not in PAGES:
            return 404, {"Content-Type": "text/plain"}, b""
        etag = f'"{request.path[3:]}"'
        conditional = request.headers.get("if-none-match") == etag
        if day[0] == 1 and attempt[0] == 1 and not conditional:
            release.wait(WAIT_S)  # a re-ask of the run to be killed: held until the kill
        status = 304 if conditional else 200
        log.append((day[0], attempt[0], request.path, conditional, status))
        headers = {"Content-Type": "text/html", "ETag": etag, "Last-Modified": "Mon, 30 Nov 2026 00:00:00 GMT"}
        body = b"" if conditional else (f"<html><body><main><article><h1>{request.path}</h1><p>The same words of "
                                        f"{request.path}, long enough for the extractor to keep.</p></article>"
                                        "</main></body></html>").encode()
        return status, headers, body

    db = tmp_path / "killed.db"
    cli = CliAt(f"sqlite:///{db}", tmp_path)
    with threaded_site(answer) as origin:
        cli(DAY0, "harvest", f"{origin}/")
        assert {p for d, _, p, _, s in log if d == 0 and s == 200} == set(PAGES)  # control: all stored on day 0
        day[0] = 1
        killed = subprocess.Popen(cli.command(DAY0 + timedelta(hours=24, minutes=2), "recrawl"), cwd=tmp_path,
                                  env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + WAIT_S
            # The re-asks decided and recorded: the host's tally written after the completions that dropped their
            # validators.
            while _db_shows(db, "SELECT max(lastmod_reasks) FROM hosts") < REASK_PROBES:
                assert killed.poll() is None, "the re-crawl ended before it could be killed"
                assert time.monotonic() < deadline, "no re-ask was recorded"
                time.sleep(0.02)
        finally:
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
            release.set()
        recorded = _db_shows(db, f"SELECT count(*) FROM urls WHERE last_status = 304 AND etag IS NOT NULL"
                                 f" AND last_fetched_at >= {int((DAY0 + timedelta(hours=24)).timestamp() * 1e6)}")
        with sqlite3.connect(db) as conn:
            believed = {path for path, in conn.execute(
                "SELECT path FROM urls WHERE last_status = 304 AND etag IS NOT NULL AND last_fetched_at >= ?",
                (int((DAY0 + timedelta(hours=24)).timestamp() * 1e6),))}
        first = [entry for entry in log if entry[0] == 1]
        assert len({p for _, _, p, _, _ in first}) < len(PAGES), "every page was asked before the kill"
        attempt[0] = 2
        cli(DAY0 + timedelta(hours=24, minutes=5), "recrawl")
    second = [(path, conditional, status) for d, a, path, conditional, status in log if d == 1 and a == 2]
    assert recorded == len(believed)
    # The re-asks decided before the kill are asked in full in the rerun; no page more.
    assert sum(1 for _, conditional, _ in second if not conditional) == REASK_PROBES, second
    # A 304 recorded before the kill is not asked again.
    assert not believed & {path for path, _, _ in second}, (believed, second)
    assert {path for path, _, _ in second} | {p for _, _, p, _, _ in first} == set(PAGES)  # control: all asked
