"""A host whose pages answer 500 during one daily run, through the commands cron runs, with default settings.

The run ends after a few requests per URL and per host (it left the host, and the URLs keep their last good
version in ``export --latest``); its counts say what failed and what was left for later; and the next daily run,
24 h after the last started (or a few minutes sooner: cron's minute must not matter), asks the host again,
robots.txt first, and picks up the edit it announces.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harvester.cli import app
from harvester.runtime import CLOCK
from harvester.settings import PolitenessSettings
from harvester.testing.schedule import run_at

HARVESTER = str(Path(sys.executable).with_name("harvester"))
PAGES = 6


class Site:
    """One loopback host: robots.txt, a sitemap with lastmods, ``PAGES`` articles; ``failing`` makes every article
    answer 500 (robots.txt and the sitemap still answer). Every request is logged (path, status)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.failing = False
        self.versions = dict.fromkeys(range(1, PAGES + 1), 1)
        self.lastmod = dict.fromkeys(range(1, PAGES + 1), run_at(0) - timedelta(days=1))
        self.log: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # see harvester.testing.threaded_site
            def do_GET(self) -> None:
                status, body, headers = site.answer(self.path)
                with site.lock:
                    site.log.append((self.path, status))
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, page: int) -> str:
        return f"{self.origin}/articles/{self.name}{page}.html"

    def edit(self, page: int, when: datetime) -> None:
        self.versions[page] += 1
        self.lastmod[page] = when

    def answer(self, path: str) -> tuple[int, bytes, dict[str, str]]:
        if path == "/robots.txt":
            return 200, f"User-agent: *\nAllow: /\nSitemap: {self.origin}/sitemap.xml\n".encode(), \
                {"Content-Type": "text/plain"}
        if path == "/sitemap.xml":
            entries = "".join(f"<url><loc>{self.url(p)}</loc><lastmod>{self.lastmod[p].isoformat()}</lastmod></url>"
                              for p in self.versions)
            return 200, (f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns='
                         f'"http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>').encode(), \
                {"Content-Type": "application/xml"}
        for page, version in self.versions.items():
            if path == f"/articles/{self.name}{page}.html":
                if self.failing:
                    return 500, b"<html><body>Internal Server Error</body></html>", {"Content-Type": "text/html"}
                words = " ".join(f"word{(page * 7 + i) % 50}" for i in range(120))
                html = (f"<html><head><title>{self.name} {page}</title></head><body><article><h1>{self.name} {page} "
                        f"version {version}</h1><p>{words}</p><p>edition v{version}</p></article></body></html>")
                return 200, html.encode(), {"Content-Type": "text/html", "ETag": f'W/"{self.name}{page}v{version}"'}
        return 404, b"not found", {"Content-Type": "text/plain"}

    def pages_asked(self) -> Counter[str]:
        with self.lock:
            return Counter(path for path, _ in self.log if path.startswith("/articles/"))

    def asked(self) -> list[str]:
        with self.lock:
            return [path for path, _ in self.log]

    def clear(self) -> None:
        with self.lock:
            self.log.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class DayOne:
    """Days 0 and 1, run once for the module: the sites, the day-1 database (copied by each test of day 2), and
    what days 0 and 1 left to check."""
    good: Site
    bad: Site
    db: Path
    day0: dict[str, str]
    day1: dict[str, str]
    asked: Counter[str]
    good_asked: Counter[str]
    day1_returncode: int
    counts: dict[str, Any]
    versions: dict[str, tuple[dict[int, int], dict[int, datetime]]]


def cli_on(db_file: Path, cwd: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli(when, *args)``: the command run at ``when`` with default settings (no ``HARVESTER_*`` variable of this
    process). The re-crawls run in a subprocess, bounded (a hung run fails the test, not the suite); the rest in
    this process (typer's runner; the clock put back by the caller), sparing a subprocess's imports."""
    db = f"sqlite:///{db_file}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}

    def cli(when: datetime, *args: str) -> subprocess.CompletedProcess[str]:
        if args[0] == "recrawl":
            # The bound only stops a hung run: with the old defaults this run took about an hour.
            return subprocess.run([HARVESTER, *args, "--db", db], capture_output=True, text=True, timeout=600,
                                  cwd=cwd, env={**env, "HARVESTER_NOW": when.isoformat()}, check=False)
        hidden = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("HARVESTER_")}
        home = Path.cwd()
        try:
            os.chdir(cwd)
            CLOCK.travel_to(when)
            done = CliRunner().invoke(app, [*args, "--db", db])
        finally:
            os.chdir(home)
            os.environ.update(hidden)
        return subprocess.CompletedProcess(args, done.exit_code, done.stdout, done.stderr)

    return cli


def latest_of(cli: Callable[..., subprocess.CompletedProcess[str]], cwd: Path) -> dict[str, str]:
    out = cwd / "latest.jsonl"
    done = cli(run_at(9), "export", "--latest", "--format", "jsonl", "--output", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return {(r := json.loads(line))["url"]: r["etag"] for line in out.read_text().splitlines()}


@pytest.fixture(scope="module")
def day_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DayOne]:
    """Day 0's harvest and day 1's re-crawl, where "bad" answers 500 to every page: the same for every shift of
    day 2, so run once (each test's day 2 runs on its own copy of this database)."""
    good, bad = Site("good"), Site("bad")
    try:
        home = tmp_path_factory.mktemp("daily")
        db = home / "daily.db"
        cli = cli_on(db, home)
        done = cli(run_at(0), "harvest", good.origin, bad.origin)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
        day0 = latest_of(cli, home)

        # Day 1: every page of both hosts announces an edit; "bad" answers 500 to every page.
        for site in (good, bad):
            for page in range(1, PAGES + 1):
                site.edit(page, run_at(1) - timedelta(hours=2))
            site.clear()
        bad.failing = True
        done = cli(run_at(1), "recrawl")
        assert done.returncode in (0, 1), (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
        asked, good_asked = bad.pages_asked(), good.pages_asked()
        day1 = latest_of(cli, home)
        counts = json.loads(cli(run_at(1, shift_s=3600), "status", "--json").stdout)["last_cycle"]
        versions = {site.name: (dict(site.versions), dict(site.lastmod)) for site in (good, bad)}
        yield DayOne(good, bad, db, day0, day1, asked, good_asked, done.returncode, counts, versions)
    finally:
        CLOCK.reset()
        good.close()
        bad.close()


@pytest.mark.parametrize("shift_s", [0.0, -300.0])
def test_a_host_answering_500_is_left_after_a_few_requests_and_asked_again_by_the_next_daily_run(
        tmp_path, day_one, shift_s, clock):
    good, bad, asked, day0, day1 = day_one.good, day_one.bad, day_one.asked, day_one.day0, day_one.day1
    assert {bad.url(p) for p in range(1, PAGES + 1)} <= set(day0)
    politeness = PolitenessSettings()
    assert asked, "control: the failing host was asked"
    assert max(asked.values()) <= politeness.max_attempts, asked
    # A handful of failures in a row parks the host; requests in flight when it parked still land.
    assert sum(asked.values()) <= politeness.park_after_failures + politeness.max_per_host_limit, asked
    assert all(day_one.good_asked[f"/articles/good{p}.html"] == 1 for p in range(1, PAGES + 1))  # control
    for page in range(1, PAGES + 1):
        assert day1[bad.url(page)] == day0[bad.url(page)] == f'W/"bad{page}v1"'  # the last good version stays
        assert day1[good.url(page)] == f'W/"good{page}v2"'
    counts = day_one.counts
    assert counts["status"] != "running", counts
    # Truthful: failed counts the pages asked (each answered 500), deferred every page left to the next run, asked
    # or not (not only those whose retry of a few seconds happened to come due before the cycle closed).
    assert counts["failed"] == len(asked), (counts, asked)
    assert counts["deferred"] == PAGES, (counts, asked)

    # Day 2, 24 h after day 1's run started (or 5 minutes sooner): the host is healthy again, one page edited.
    db = tmp_path / "daily.db"
    shutil.copyfile(day_one.db, db)
    cli = cli_on(db, tmp_path)
    for site in (good, bad):  # the sites as day 1 left them (another shift's day 2 edited "bad")
        site.versions, site.lastmod = (dict(kept) for kept in day_one.versions[site.name])
    bad.failing = False
    bad.edit(3, run_at(2, shift_s=shift_s) - timedelta(hours=1))
    for site in (good, bad):
        site.clear()
    done = cli(run_at(2, shift_s=shift_s), "recrawl")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    assert bad.asked() and bad.asked()[0] == "/robots.txt", bad.asked()[:5]
    day2 = latest_of(cli, tmp_path)
    assert day2[bad.url(3)] == 'W/"bad3v3"', day2[bad.url(3)]
    assert all(day2[bad.url(p)] == f'W/"bad{p}v2"' for p in range(1, PAGES + 1) if p != 3)
