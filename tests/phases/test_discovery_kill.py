"""A discovery killed -9 repeats only what was in flight (issue 31, docs/architecture.md invariant 5).

Through the command: ``harvester discover`` of a loopback site, killed with SIGKILL once the server has been asked
the last sitemap (held unanswered: the request in flight at the kill) and every document it answered before is
in the frontier, or a generous bound has passed; then run again. The server's log must show no document it
answered before the kill asked again. Before issue 31 the seed page, read before the sitemaps, was recorded only
when the listing crawl claimed it after the walk, and a sitemap asked ahead waited for the one before it: both
were asked again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from harvester.testing.threaded_site import Answer, Asked, threaded_site

HARVESTER = str(Path(sys.executable).with_name("harvester"))

HELD = "/sitemaps/s3.xml"
"""The request the kill is chosen by: held unanswered, so the walk is in flight there when the kill comes."""

RECORD_BOUND_S = 30.0
"""How long the answered documents are given to reach the frontier before the kill is sent anyway."""


def html(body: str) -> Answer:
    return 200, {"Content-Type": "text/html; charset=utf-8"}, f"<html><body>{body}</body></html>".encode()


def xml(body: str) -> Answer:
    return 200, {"Content-Type": "application/xml"}, (
        f'<?xml version="1.0" encoding="UTF-8"?>{body}').encode()


def urlset(origin: str, first: int) -> Answer:
    locs = "".join(f"<url><loc>{origin}/posts/{n}</loc></url>" for n in range(first, first + 20))
    return xml(f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>')


class Site:
    """The site: robots.txt names an index of three sitemaps; the seed links to two topic pages and a feed."""

    def __init__(self) -> None:
        self.origin = ""
        self.lock = threading.Lock()
        self.asked: list[str] = []
        self.answered: list[str] = []
        self.held = threading.Event()
        """Set once ``HELD`` is asked (the attempt to kill)."""
        self.release = threading.Event()
        self.holding = True

    def answer(self, request: Asked) -> Answer:
        path = request.path
        with self.lock:
            self.asked.append(path)
        if path == HELD and self.holding:
            self.held.set()
            self.release.wait(120)
        answer = self._page(path)
        with self.lock:
            self.answered.append(path)  # the body follows at once: answered, as the harvester sees it
        return answer

    def _page(self, path: str) -> Answer:
        origin = self.origin
        if path == "/robots.txt":
            return 200, {"Content-Type": "text/plain"}, f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap.xml\n".encode()
        if path == "/sitemap.xml":
            maps = "".join(f"<sitemap><loc>{origin}/sitemaps/s{n}.xml</loc></sitemap>" for n in (1, 2, 3))
            return xml(f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{maps}</sitemapindex>')
        if path.startswith("/sitemaps/s"):
            return urlset(origin, 20 * (int(path[len("/sitemaps/s"):-len(".xml")]) - 1))
        if path == "/":
            return html('<a href="/topics/a/">A</a> <a href="/topics/b/">B</a> <a href="/posts/1">1</a>')
        if path.startswith("/topics/"):
            return html("".join(f'<a href="/posts/{n}">{n}</a>' for n in range(5)))
        return 404, {"Content-Type": "text/plain"}, b"not here"


def recorded(db: Path, origin: str, paths: list[str]) -> bool:
    """Whether every discovery document in ``paths`` is in the frontier: a sitemap in ``documents``, robots.txt in
    ``hosts``, the seed page fetched (its outcome written)."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            documents = {url for (url,) in conn.execute("SELECT url FROM documents WHERE fetched_at IS NOT NULL")}
            robots = conn.execute("SELECT count(*) FROM hosts WHERE robots_fetched_at IS NOT NULL").fetchone()[0]
            fetched = {origin + path for (origin, path) in conn.execute(
                "SELECT h.origin, u.path FROM urls u JOIN hosts h ON h.id = u.host_id WHERE u.last_fetched_at IS NOT NULL")}
    except sqlite3.Error:
        return False
    for path in paths:
        if path == "/robots.txt":
            if not robots:
                return False
        elif origin + path not in documents | fetched:
            return False
    return True


def test_a_discovery_killed_9_asks_again_only_what_was_in_flight(tmp_path):
    site = Site()
    db = tmp_path / "killed.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}
    with threaded_site(site.answer) as origin:
        site.origin = origin
        command = [HARVESTER, "discover", origin + "/", "--db", f"sqlite:///{db}"]
        killed = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert site.held.wait(120), "the discovery never asked the last sitemap"
            with site.lock:
                before = [path for path in site.answered if path != HELD]
            deadline = time.monotonic() + RECORD_BOUND_S
            while not recorded(db, origin, before) and time.monotonic() < deadline:
                assert killed.poll() is None, "the discovery ended before it could be killed"
                time.sleep(0.05)
            with site.lock:
                answered = [path for path in site.answered if path != HELD]
                asked_before = len(site.asked)
            os.killpg(killed.pid, signal.SIGKILL)
            assert killed.wait(60) == -signal.SIGKILL
        finally:
            if killed.poll() is None:
                os.killpg(killed.pid, signal.SIGKILL)
            site.holding = False
            site.release.set()
        assert "/" in answered and "/sitemaps/s1.xml" in answered  # the seed and a sitemap were read before
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        with site.lock:
            rerun = Counter(site.asked[asked_before:])
    assert "/topics/a/" in rerun  # control: the rerun had work left, and did it
    repeated = sorted(path for path in answered if rerun[path])
    assert repeated == [], f"answered before the kill and asked again: {repeated}"
