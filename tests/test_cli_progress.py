"""A run whose output is not a terminal (cron, systemd, ``| tee``) prints progress lines while it runs, and a signal
says what it does: the first stops the run gracefully, the second at once (issue 33, item 5)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harvester.cli_watch import ProgressLines
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing.sites import HostSpec

HARVESTER = str(Path(sys.executable).parent / "harvester")
PROGRESS = re.compile(r"harvest: extract (\d+) pages \((\d+)/min\), .*\n.*harvest: .* discover (\d+) URLs")


def test_a_progress_line_gives_pages_and_rates_per_phase_since_the_last_line():
    lines: list[str] = []
    watch = ProgressLines("harvest", lines.append, every_s=5.0)
    watch.maybe({"queued": 100}, now=0.0)  # the baseline: nothing printed yet
    watch.maybe({"queued": 90, "done": 10}, now=4.9)  # not due
    assert lines == []
    watch.maybe({"queued": 80, "leased": 4, "done": 20, "gone": 2, "failed": 1}, now=5.0)
    assert len(lines) == 1
    extract, discover = lines[0].split("\n")
    assert extract.endswith(" harvest: extract 23 pages (276/min), 2 gone, 1 failed")
    assert discover.endswith(" harvest: 4 claimed, 80 queued; discover 107 URLs (84/min)")
    watch.maybe({"queued": 80, "done": 27, "gone": 2, "failed": 1}, now=10.0)
    assert "extract 30 pages (84/min)" in lines[1]
    big: list[str] = []  # a large harvest's counts: each line still within 80 columns (a log file, a terminal)
    large = ProgressLines("recrawl", big.append, every_s=5.0)
    large.maybe({"queued": 500_000, "leased": 999, "done": 90_000, "gone": 9_999, "failed": 9_999}, now=0.0)
    large.maybe({"queued": 500_000, "leased": 999, "done": 91_000, "gone": 9_999, "failed": 9_999}, now=5.0)
    assert "(12000/min)" in big[0]
    assert [len(line) <= 80 for line in big[0].split("\n")] == [True, True], big


def _start(web_seeds: list[str], db: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path, Path]:
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_"))}
    env |= {"PREFECT_HOME": str(tmp_path / "prefect-home"), "COLUMNS": "200"}
    with out.open("wb") as stdout, err.open("wb") as stderr:  # a file, as cron or systemd give it
        proc = subprocess.Popen([HARVESTER, "harvest", *web_seeds, "--db", str(db), "--per-host", "1"],
                                stdout=stdout, stderr=stderr, env=env, cwd=tmp_path)
    return proc, out, err


def _wait_for(proc: subprocess.Popen[bytes], path: Path, pattern: str, *, timeout_s: float = 120) -> str:
    """Wait until ``path`` holds ``pattern`` (the event), failing if the process ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        assert proc.poll() is None, f"ended ({proc.returncode}) before printing {pattern!r}:\n{text}"
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {pattern!r} in {path.read_text(errors='replace')}")


@pytest.mark.slow
def test_a_harvest_into_a_file_shows_progress_before_it_ends_and_sigint_stops_it_gracefully(make_web, tmp_path):
    web = make_web([HostSpec("a", pages=150, latency_s=0.1)], seed=33)
    db = tmp_path / "crawl.db"
    proc, out, err = _start(web.seeds, db, tmp_path)
    text = _wait_for(proc, out, PROGRESS.pattern)
    assert proc.poll() is None  # printed while the run goes on, not at its end
    first = PROGRESS.search(text)
    assert first is not None and int(first.group(3)) > 0

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    said = err.read_text()
    assert "SIGINT received: stopping gracefully: no new requests are sent, answers in flight are written" in said
    assert "harvest stopped (SIGINT received)" in said and "resume" in said
    with FrontierStore.open(Settings.load(database_url=str(db))) as store:
        states = store.state_counts()
        urls = store.url_states()
    assert "leased" not in states, states  # the leases went back
    assert states.get("queued", 0) > 0, states  # stopped, not finished: a control on the test itself
    details = set(web.truth["a"].allowed_detail_urls())
    answered = {web.origin("a") + r.path for r in web.records() if r.status == 200} & details
    assert answered  # pages were fetched before the stop
    lost = sorted(url for url in answered if urls[url][0] == "queued")
    assert lost == [], f"answered before the stop but not written: {lost[:5]}"


@pytest.mark.slow
def test_a_second_signal_stops_at_once_and_says_so(make_web, tmp_path):
    web = make_web([HostSpec("a", pages=150, latency_s=3.0)], seed=34)  # a graceful stop waits up to 3 s for answers
    proc, out, err = _start(web.seeds, tmp_path / "crawl.db", tmp_path)
    _wait_for(proc, out, PROGRESS.pattern)
    proc.send_signal(signal.SIGTERM)
    _wait_for(proc, err, "SIGTERM received: stopping gracefully")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    said = err.read_text()
    assert "SIGTERM received again: stopping at once" in said
    assert "harvest stopped" not in said  # the graceful ending was not waited for


async def test_pages_answered_404_or_410_are_shown_gone_not_as_errors(serve, sqlite_url):
    from aiohttp import web
    from typer.testing import CliRunner

    from harvester import phases
    from harvester.cli import app
    from harvester.records import DiscoveredUrl, UrlKind
    from harvester.site_profile import SiteProfile

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        status = {"/gone": 404, "/removed": 410, "/private": 403}.get(request.path, 404 if "." in request.path else 200)
        return web.Response(status=status, text="<html><body>a story</body></html>", content_type="text/html")

    origin = await serve(handler)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",))
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}{path}", UrlKind.DETAIL, "sitemap:x")
                              for path in ("/story", "/gone", "/removed", "/private")])
        run_id = await phases.begin_run(settings, "extract", profile)
        result = await phases.extract(store, settings, profile, run_id=run_id)
    await phases.finish_run(settings, run_id, "extract", [result])

    out = CliRunner().invoke(app, ["status", "--json", "--db", sqlite_url])
    assert out.exit_code == 0, out.output
    import json

    status = json.loads(out.output)
    assert origin in status["last_extract"]["hosts"], status
    host = status["last_extract"]["hosts"][origin]
    assert host["gone"] == 2
    assert host["errors"] == {"http_4xx": 1}  # the control: a 403 is still an error of its own
    table = CliRunner().invoke(app, ["status", "--db", sqlite_url], env={"COLUMNS": "200"})
    assert "gone" in table.output and "http_4xx=1" in table.output


async def lines_said(said: list[str], n: int) -> None:
    """Until ``said`` holds ``n`` extraction progress lines."""
    for _ in range(2400):  # each reading comes within PROGRESS_INTERVAL_S: bounded generously, not timed
        if len([line for line in said if " extract " in line]) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(said)


def test_the_pages_a_progress_line_counts_never_go_down_when_done_urls_are_asked_again(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stranger 42: a re-crawl's line went 154 -> 311 -> 218 pages: it counted URLs finished by state, and a re-crawl
    claims done URLs again (leased, no longer finished). It counts the requests completed since the command began."""
    import functools

    from harvester import cli_watch
    from harvester.records import Completion, DiscoveredUrl, UrlKind, UrlState
    from harvester.runtime import utcnow

    origin = "https://a.test"
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:  # a harvested site: 10 pages done
        store.add_discovered([DiscoveredUrl(f"{origin}/story-{n}", UrlKind.DETAIL, "seed") for n in range(10)])
        for url in store.claim("old", hosts=[origin], per_host=10, lease_s=600):
            store.complete("old", Completion(url_id=url.id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                             content_hash="h", next_fetch_at=utcnow()))
    said: list[str] = []
    monkeypatch.setattr(cli_watch, "ProgressLines", functools.partial(cli_watch.ProgressLines, every_s=0.0))
    monkeypatch.setattr(cli_watch, "_say_out", said.append)

    async def recrawl() -> None:
        await lines_said(said, 1)  # a line while everything is done
        with FrontierStore.open(settings) as store:  # the re-crawl claims 5 done URLs and answers 2
            claimed = store.claim("w", hosts=[origin], per_host=5, lease_s=600)
            for url in claimed[:2]:
                store.complete("w", Completion(url_id=url.id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                               content_hash="h", next_fetch_at=utcnow()))
        await lines_said(said, len([line for line in said if " extract " in line]) + 1)

    cli_watch.run_with_progress(settings, "recrawl", recrawl(), settle=False)
    pages = [int(m.group(1)) for m in re.finditer(r"recrawl: extract (\d+) pages", "\n".join(said))]
    assert len(pages) >= 2 and pages == sorted(pages), said
    assert pages[-1] == 2, said  # the requests this command saw answered


ANOTHER_WORKER = """
import sys
from harvester.frontier import FrontierStore
from harvester.records import Completion, UrlState
from harvester.runtime import utcnow
from harvester.settings import Settings

with FrontierStore.open(Settings.load(database_url=sys.argv[1])) as store:
    for url in store.claim("other", hosts=[sys.argv[2]], per_host=3, lease_s=600):
        store.complete("other", Completion(url_id=url.id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                           content_hash="h", next_fetch_at=utcnow()))
"""


def test_the_progress_line_counts_this_process_requests_from_memory_not_the_fetch_log(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shared frontier the line counted every process's requests, and counted the fetch log's rows since the
    command began at every tick (0.3-0.8 s at 1,000,000 rows). It counts this process's own answers, in memory."""
    import functools

    from sqlalchemy import Engine, event

    from harvester import cli_watch
    from harvester.records import Completion, DiscoveredUrl, UrlKind, UrlState
    from harvester.runtime import utcnow

    origin = "https://a.test"
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/story-{n}", UrlKind.DETAIL, "seed") for n in range(10)])
    said: list[str] = []
    monkeypatch.setattr(cli_watch, "ProgressLines", functools.partial(cli_watch.ProgressLines, every_s=0.0))
    monkeypatch.setattr(cli_watch, "_say_out", said.append)
    read_fetches: list[str] = []

    def record(_conn, _cursor, sql, *_args) -> None:  # type: ignore[no-untyped-def]
        if "fetches" in sql:
            read_fetches.append(sql)

    async def extract() -> None:
        await lines_said(said, 1)
        # Another process on the same frontier answers 3 pages; this one answers 2.
        subprocess.run([sys.executable, "-c", ANOTHER_WORKER, sqlite_url, origin], check=True, timeout=120)
        with FrontierStore.open(settings) as store:
            for url in store.claim("w", hosts=[origin], per_host=2, lease_s=600):
                store.complete("w", Completion(url_id=url.id, state=UrlState.DONE, fetched_at=utcnow(), status=200,
                                               content_hash="h", next_fetch_at=utcnow()))
        event.listen(Engine, "before_cursor_execute", record)
        await lines_said(said, len([line for line in said if " extract " in line]) + 2)

    try:
        cli_watch.run_with_progress(settings, "extract", extract(), settle=False)
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    pages = [int(m.group(1)) for m in re.finditer(r"extract: extract (\d+) pages", "\n".join(said))]
    assert pages[-1] == 2, said  # this process's requests, not the other's 3
    assert read_fetches == []  # the ticks read no fetch row
