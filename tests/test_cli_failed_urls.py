"""A harvest whose page requests all fail exits 3, and every harvest names its failed URLs with their reasons; its
output off a terminal (cron, ``> log``) cuts no table cell (ops48).

Before: a host answering 500 to every page (robots.txt and the sitemap fine) ended rc=0 with "6 failed" and its host
parked; the summary, ``status`` and ``status --json`` gave counts, never which URLs failed nor why; and the closing
tables were squeezed to 80 columns in a log (the parked reason read ``5 / con / fai / (co``).

The CLI runs as an operator's cron job runs it: its own process, stdin from /dev/null, output captured (no TTY).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harvester.cli_process import EXIT_CODES
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

HARVESTER = str(Path(sys.executable).with_name("harvester"))
HTML = {"Content-Type": "text/html"}
TIMEOUT_S = 0.5


def page(path: str) -> Answer:
    body = f"<html><head><title>{path}</title></head><body><article><p>{'words ' * 80}{path}</p></article></body>"
    return 200, HTML, f"{body}</html>".encode()


def harvester(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``harvester ARGS`` as cron runs it: no terminal anywhere, no COLUMNS, no Prefect server."""
    quiet = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8",
             "PREFECT_HOME": str(tmp_path / "prefect"), "HARVESTER_POLITENESS__BACKOFF_BASE_S": "0.05",
             "HARVESTER_POLITENESS__BACKOFF_MAX_S": "0.2", "HARVESTER_HTTP__TIMEOUT_S": str(TIMEOUT_S), **env}
    return subprocess.run([HARVESTER, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=quiet, start_new_session=True)


def test_every_page_failing_exits_3_and_names_them(tmp_path: Path) -> None:
    # Five detail pages: extraction alone meets the five distinct failures that park the host. With four, parking
    # hung on the seed page's 500 (discovery's) being counted after the sitemap's 200, which answer order decides.
    paths = [f"/p/{n}" for n in range(5)]

    def answer(asked: Asked) -> Answer:
        if asked.path == "/robots.txt":
            return robots_txt(asked.origin)
        if asked.path == "/sitemap.xml":
            return sitemap(asked.origin, dict.fromkeys(paths, "2026-12-01"))
        return 500, HTML, b"<html><body>down</body></html>"

    with threaded_site(answer) as origin:
        db = f"sqlite:///{tmp_path / 'h.db'}"
        done = harvester(["harvest", f"{origin}/", "--db", db], tmp_path)
        status = json.loads(harvester(["status", "--json", "--db", db], tmp_path).stdout)
    assert done.returncode == 3, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    assert "every page request failed" in done.stderr, done.stderr
    failed = {row["url"]: row["reason"] for row in status["last_cycle"]["failed_urls"]}
    # The host is parked at its fifth distinct failure: the last page may never be asked (whether the seed page's
    # 500 counts before the sitemap's 200 resets the streak is answer order), so it may be queued, not failed.
    asked = {f"{origin}{path}" for path in ["/", *paths]}
    assert len(failed) >= 5 and set(failed) <= asked, failed
    assert set(failed.values()) == {"http_5xx 500"}, failed
    for url in failed:  # the closing summary names them, as the error line names the first ones
        assert f"failed: {url} (http_5xx 500)" in done.stdout, done.stdout
    # The parked host's row, whole in a log: its reason and its errors were cut to "5 / con / fai / (co".
    assert "5 consecutive failures (connect/protocol/timeout/5xx)" in done.stdout, done.stdout
    assert "http_5xx=" in done.stdout and "…" not in done.stdout, done.stdout
    assert EXIT_CODES[3].startswith("every page request") and EXIT_CODES[2].startswith("bad input")
    docs = (Path(__file__).parents[1] / "docs" / "operations.md").read_text(encoding="utf-8")
    for code in EXIT_CODES:  # the documented table is the one the command keeps
        assert re.search(rf"^\| `?{code}`? \|", docs, re.MULTILINE), f"exit {code} not in docs/operations.md"


def test_failed_urls_and_their_reasons_exactly_and_no_cell_cut_in_a_log(tmp_path: Path) -> None:
    """A partial failure still exits 0; the URLs still failing when the cycle ended are named, each with its class
    and status, and no others: not a page that failed once and answered on its retry, not a 404."""
    tries: dict[str, int] = {}
    failing = {"/p/busy": (503, "http_5xx 503"), "/p/broken": (500, "http_5xx 500"),
               "/p/forbidden": (403, "http_4xx 403")}
    paths = ["/p/ok", "/p/flaky", "/p/missing", "/p/slow", *failing]

    def answer(asked: Asked) -> Answer:
        tries[asked.path] = tries.get(asked.path, 0) + 1
        if asked.path == "/robots.txt":
            return robots_txt(asked.origin)
        if asked.path == "/sitemap.xml":
            return sitemap(asked.origin, dict.fromkeys(paths, "2026-12-01"))
        if asked.path in failing:
            return failing[asked.path][0], HTML, b"<html><body>no</body></html>"
        if asked.path == "/p/flaky" and tries[asked.path] == 1:
            return 503, HTML, b"<html><body>busy</body></html>"
        if asked.path == "/p/missing":
            return 404, HTML, b"<html><body>not found</body></html>"
        if asked.path == "/p/slow":
            time.sleep(3 * TIMEOUT_S)
        return page(asked.path)

    with threaded_site(answer) as origin:
        db = f"sqlite:///{tmp_path / 'h.db'}"
        done = harvester(["harvest", f"{origin}/", "--db", db], tmp_path,
                         HARVESTER_POLITENESS__PARK_AFTER_FAILURES="50")
        status = json.loads(harvester(["status", "--json", "--db", db], tmp_path).stdout)
        shown = harvester(["status", "--db", db], tmp_path).stdout
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert tries["/p/flaky"] == 2, tries  # control: it failed once, then answered
    truth = {f"{origin}{path}": reason for path, (_, reason) in failing.items()} | {f"{origin}/p/slow": "timeout"}
    cycle = status["last_cycle"]
    assert {row["url"]: row["reason"] for row in cycle["failed_urls"]} == truth, cycle["failed_urls"]
    assert cycle["failed_url_count"] == len(truth) and cycle["failed"] > len(truth), cycle  # requests: retries too
    for out in (done.stdout, shown):
        listed = {line.strip() for line in out.splitlines() if line.strip().startswith("failed: ")}
        assert listed == {f"failed: {url} ({reason})" for url, reason in truth.items()}, out
        assert "…" not in out, out  # no cell cut short
        assert "timeout=" in out and "http_5xx=" in out, out  # the errors column, whole
    # Off a terminal the progress bar is not drawn: the plain lines' closing reading says it, with the time.
    assert not re.search(r"harvest: .*\d+/\d+ +\d:\d\d:\d\d$", done.stdout, re.MULTILINE), done.stdout
    closing = r"^\d\d:\d\d:\d\d harvest: \d+ done(, \d+ queued for later)?; ended after \d:\d\d:\d\d$"
    assert re.search(closing, done.stdout, re.MULTILINE), done.stdout


def test_an_extraction_alone_whose_page_requests_all_fail_exits_3_and_one_answered_exits_0(tmp_path: Path) -> None:
    """``harvester extract`` run on its own (a cron job that discovers weekly and extracts daily) follows the rule
    of harvest and recrawl: it exited 0 when every page request it sent failed."""
    paths = [f"/p/{n}" for n in range(3)]
    up: set[str] = set()
    served: list[str] = []
    day = datetime.now(UTC).replace(microsecond=0)
    at = {"HARVESTER_NOW": day.isoformat()}

    def answer(asked: Asked) -> Answer:
        if asked.path == "/robots.txt":
            return robots_txt(asked.origin)
        if asked.path == "/sitemap.xml":
            return sitemap(asked.origin, dict.fromkeys(paths, "2026-12-01"))
        if asked.path in up:
            served.append(asked.path)
            return page(asked.path)
        return 503, HTML, b"<html><body>down</body></html>"

    with threaded_site(answer) as origin:
        db = f"sqlite:///{tmp_path / 'h.db'}"
        found = harvester(["discover", f"{origin}/", "--db", db], tmp_path, **at)
        assert found.returncode == 0, found.stderr[-3000:]
        failing = harvester(["extract", "--db", db], tmp_path, **at)
        assert failing.returncode == 3, (failing.returncode, failing.stdout[-3000:], failing.stderr[-3000:])
        assert "every page request failed" in failing.stderr, failing.stderr
        assert "http_5xx" in failing.stderr, failing.stderr
        up.add(paths[0])  # one page answers: the pages' problem, reported by the counts, not the run's
        # A later extraction, past the park the failures set (``politeness.park_s``, 24 h for a run outside a cycle).
        later = (day + timedelta(hours=25)).isoformat()
        partial = harvester(["extract", "--db", db], tmp_path, HARVESTER_NOW=later)
        assert partial.returncode == 0, (partial.returncode, partial.stdout[-3000:], partial.stderr[-3000:])
        assert served == [paths[0]], served
