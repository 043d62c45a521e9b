"""A harvest killed (SIGKILL) once its discovery completed, during extraction: the rerun resumes the cycle at its
extraction and asks no robots.txt or sitemap again (README, docs/operations.md §4b: a rerun repeats only what was
in flight). The stranger's black-box test of stop 43 found every robots.txt and sitemap asked again 2-11 s after
it was answered. Through the CLI in a process of its own, on the harvester's clock (``HARVESTER_NOW``), against a
real server whose own log says what was asked: in this process (``LocalSteps``) and through the flows (a Prefect
server, ``SubflowSteps``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from conftest import free_a_dead_runs_site_slot, stop_group

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing.threaded_site import Answer, Asked, threaded_site

HARVESTER = str(Path(sys.executable).parent / "harvester")  # our own console script, no shell
PAGES = [f"/news/story-number-{n}" for n in range(1, 9)]
HELD = PAGES[2]
"""The page whose answer is held until the harvest is killed: extraction is under way, and this is in flight."""


def page(title: str) -> bytes:
    return (f"<!doctype html><html><head><title>{title}</title></head><body><main><article><h1>{title}</h1>"
            f"<p>{'Words enough for an article body, plainly written. ' * 30}</p></article></main></body></html>"
            ).encode()


def discovery_completed(db: Path) -> bool:
    """Whether the frontier file records a completed discovery run (read-only: the harvest is writing it)."""
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return bool(conn.execute(
                "select count(*) from runs where phase = 'discover' and status = 'completed'").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return False


def test_a_harvest_killed_during_extraction_resumes_without_rediscovering(tmp_path: Path) -> None:
    killed_during_extraction(tmp_path, dict(os.environ), on_kill=None)


def test_a_flow_killed_during_extraction_resumes_without_rediscovering(prefect_api, tmp_path: Path) -> None:
    def free_slot() -> None:  # the dead run's slot, else the rerun waits out its lease
        asyncio.run(free_a_dead_runs_site_slot("kill"))

    killed_during_extraction(tmp_path, dict(prefect_api), on_kill=free_slot)


def killed_during_extraction(tmp_path: Path, env: dict[str, str], *, on_kill: Callable[[], None] | None) -> None:
    """Harvest, SIGKILL once discovery completed and a page is in flight, rerun; check the server's log."""
    asked: Counter[str] = Counter()
    lock = threading.Lock()
    held, release = threading.Event(), threading.Event()

    def respond(request: Asked) -> Answer:
        with lock:
            asked[request.path] += 1
        if request.path == "/robots.txt":
            robots = f"User-agent: *\nSitemap: {request.origin}/sitemap.xml\n"
            return 200, {"Content-Type": "text/plain"}, robots.encode()
        if request.path == "/sitemap.xml":
            urls = "".join(f"<sitemap><loc>{request.origin}/sitemap-{n}.xml</loc></sitemap>" for n in (1, 2))
            return 200, {"Content-Type": "application/xml"}, (
                '<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"{urls}</sitemapindex>").encode()
        if request.path in ("/sitemap-1.xml", "/sitemap-2.xml"):
            half = PAGES[:4] if request.path == "/sitemap-1.xml" else PAGES[4:]
            urls = "".join(f"<url><loc>{request.origin}{path}</loc></url>" for path in half)
            return 200, {"Content-Type": "application/xml"}, (
                '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"{urls}</urlset>").encode()
        if request.path == "/":
            return 200, {"Content-Type": "text/html"}, page("Home")
        if request.path in PAGES:
            if request.path == HELD and not release.is_set():
                held.set()
                release.wait(120)
            return 200, {"Content-Type": "text/html"}, page(request.path)
        return 404, {"Content-Type": "text/plain"}, b"not found"

    db = tmp_path / "h.db"
    with threaded_site(respond) as origin:
        command = [HARVESTER, "harvest", f"{origin}/", "--db", f"sqlite:///{db}", "--name", "kill"]
        env = {**env, "HARVESTER_NOW": "2026-12-09T04:00:00Z"}
        with open(tmp_path / "first.out", "wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=tmp_path)
        try:
            assert held.wait(120), (tmp_path / "first.out").read_text()
            deadline = time.monotonic() + 120
            while not discovery_completed(db) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert discovery_completed(db), (tmp_path / "first.out").read_text()
            os.killpg(proc.pid, signal.SIGKILL)
            assert proc.wait(60) == -signal.SIGKILL
        finally:
            stop_group(proc, signal.SIGKILL)
            release.set()
        if on_kill is not None:
            on_kill()
        with FrontierStore.open(Settings.load(database_url=f"sqlite:///{db}")) as store:
            done = {url.removeprefix(origin) for url, (state, _) in store.url_states().items() if state == "done"}
        before = Counter(asked)
        assert all(before[path] == 1 for path in ("/robots.txt", "/sitemap.xml", "/sitemap-1.xml", "/sitemap-2.xml"))
        rerun = subprocess.run(command, env={**env, "HARVESTER_NOW": "2026-12-09T04:01:00Z"}, capture_output=True,
                               text=True, timeout=300, check=False, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    again = {path: n for path, n in (asked - before).items()}
    # Only what was in flight at the kill is asked again (and what was never asked): no discovery document.
    assert not {"/robots.txt", "/sitemap.xml", "/sitemap-1.xml", "/sitemap-2.xml", "/"} & set(again), again
    assert all(asked[path] >= 1 for path in PAGES)
    assert [path for path in PAGES if path in done and asked[path] > 1] == [], (again, done)
