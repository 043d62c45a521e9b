"""A discovery killed -9 repeats only what was in flight (issue 31, docs/architecture.md invariant 5).

Through the command: ``harvester discover`` of a loopback site, killed with SIGKILL once the server has been asked
a chosen document (held unanswered: in flight at the kill) and every document it answered so far is in the
frontier, or a generous bound has passed; then run again. The server's log must show no document answered before
the kill asked again but those asked and not answered then. Before issue 31 the seed page, read before the
sitemaps, was recorded only when the listing crawl claimed it after the walk; a sitemap asked ahead waited for the
one before it, and a guessed feed page for the pages before it: all were asked again.
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


def feed_page(origin: str, number: int) -> Answer:
    """Page ``number`` of a numbered RSS feed of 8 pages (RFC 5005 paging): its next pages are guessed ahead."""
    items = "".join(f"<item><title>{n}</title><link>{origin}/posts/{n}</link></item>"
                    for n in range(100 + 5 * number, 105 + 5 * number))
    following = f'<atom:link rel="next" href="{origin}/feed?page={number + 1}"/>' if number < 8 else ""
    return 200, {"Content-Type": "application/rss+xml"}, (
        f'<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel><title>t</title>'
        f"<link>{origin}/</link>{following}{items}</channel></rss>").encode()


class Site:
    """The site: robots.txt names an index of three sitemaps; the seed links to two topic pages and a paged feed."""

    def __init__(self, held: str) -> None:
        self.origin = ""
        self.held_path = held
        """The request the kill is chosen by: held unanswered, in flight when the kill comes."""
        self.lock = threading.Lock()
        self.asked: list[str] = []
        self.answered: list[str] = []
        self.held = threading.Event()
        """Set once the held request is asked (the attempt to kill)."""
        self.release = threading.Event()
        self.holding = True

    def answer(self, request: Asked) -> Answer:
        path = request.path
        with self.lock:
            self.asked.append(path)
        if path == self.held_path and self.holding:
            self.held.set()
            self.release.wait(120)
        answer = self._page(path)
        with self.lock:
            self.answered.append(path)  # the body follows at once: answered, as the harvester sees it
        return answer

    def _page(self, path: str) -> Answer:
        origin = self.origin
        if path == "/robots.txt":
            robots = f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap.xml\n"
            return 200, {"Content-Type": "text/plain"}, robots.encode()
        if path == "/sitemap.xml":
            maps = "".join(f"<sitemap><loc>{origin}/sitemaps/s{n}.xml</loc></sitemap>" for n in (1, 2, 3))
            return xml(f'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{maps}</sitemapindex>')
        if path.startswith("/sitemaps/s"):
            return urlset(origin, 20 * (int(path[len("/sitemaps/s"):-len(".xml")]) - 1))
        if path == "/":
            return html('<link rel="alternate" type="application/rss+xml" href="/feed?page=1">'
                        '<a href="/topics/a/">A</a> <a href="/topics/b/">B</a> <a href="/posts/1">1</a>')
        if path.startswith("/feed?page="):
            return feed_page(origin, int(path.rpartition("=")[2]))
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
                "SELECT h.origin, u.path FROM urls u JOIN hosts h ON h.id = u.host_id"
                " WHERE u.last_fetched_at IS NOT NULL")}
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
    # Held: the first child sitemap, once the seed is read and while the next sitemap, asked ahead, is answered.
    # (A guessed feed page is tested in test_discovery_records_at_once.py, and passed by a rerun after a kill in
    # test_feed_resume.py.)
    held = "/sitemaps/s1.xml"
    site = Site(held)
    db = tmp_path / "killed.db"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}
    with threaded_site(site.answer) as origin:
        site.origin = origin
        command = [HARVESTER, "discover", origin + "/", "--db", f"sqlite:///{db}"]
        killed = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            assert site.held.wait(120), f"the discovery never asked {held}"
            deadline = time.monotonic() + RECORD_BOUND_S
            while True:
                with site.lock:
                    answered = list(site.answered)  # what is asked and not answered now is in flight
                # The seed and the sitemap asked ahead answered (under load, s2 may come after the hold), and
                # everything answered so far in the frontier.
                read = "/" in answered and "/sitemaps/s2.xml" in answered
                if (read and recorded(db, origin, answered)) or time.monotonic() > deadline:
                    break
                assert killed.poll() is None, "the discovery ended before it could be killed"
                time.sleep(0.05)
            with site.lock:
                asked_before = len(site.asked)
            os.killpg(killed.pid, signal.SIGKILL)
            assert killed.wait(60) == -signal.SIGKILL
        finally:
            if killed.poll() is None:
                os.killpg(killed.pid, signal.SIGKILL)
            site.holding = False
            site.release.set()
        assert "/" in answered and "/sitemaps/s2.xml" in answered  # the seed and a sitemap were read before
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        with site.lock:
            rerun = Counter(site.asked[asked_before:])
    assert rerun[held] == 1  # control: the rerun asked what was in flight
    repeated = sorted(path for path in answered if rerun[path])
    assert repeated == [], f"answered before the kill and asked again: {repeated}"
