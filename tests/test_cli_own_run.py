"""What a command tells its operator is its own run's (stranger 42): the closing "Last extraction" table of
``harvester extract`` is the run that command ran, not the newest finished one, which another process sharing the
frontier may have finished meanwhile; and an unfinished run another live process of this machine is running is
never resumed (three processes with one User-Agent shared one run row and its counters)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading

from typer.testing import CliRunner

from harvester.cli import app
from harvester.frontier import FrontierStore
from harvester.phases.runs import begin_run
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

PAGES = [f"/p/{n}" for n in range(4)]
OTHER = "http://127.0.0.99:9"
"""The host only the other process's run asked (never contacted: it is a row in that run's counters)."""


def page(path: str) -> bytes:
    return (f"<!doctype html><html><head><title>{path}</title></head><body><main><article><h1>{path}</h1><p>"
            + "Words enough for an article body, plain and meaningful. " * 8 + "</p></article></main></body></html>"
            ).encode()


def test_extracts_closing_table_is_its_own_run_though_another_finished_after_it(migrated_pg_url: str) -> None:
    settings = Settings.load(database_url=migrated_pg_url)
    other_run: list[int] = []
    lock = threading.Lock()

    def another_process_finishes_a_run() -> None:
        # What a second `harvester extract` on this frontier does meanwhile: a run of its own, finished first.
        with FrontierStore.open(settings) as store:
            run = store.start_run("extract", profile=SiteProfile.build(seeds=(f"{OTHER}/",), name="other")
                                  .model_dump(mode="json"), owner="elsewhere:1:extract:x")
            store.finish_run(run, status="completed", counters={"hosts": {OTHER: {
                "fetched": 24, "not_modified": 0, "gone": 0, "errors": {}, "peak_in_flight": 2, "limit": 2}}})
        other_run.append(run)

    def respond(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {path: None for path in PAGES})
        if request.path not in PAGES:
            return 404, {"Content-Type": "text/plain"}, b""
        with lock:  # the first page asked: the extraction's run is open, not yet finished
            if not other_run:
                another_process_finishes_a_run()
        return 200, {"Content-Type": "text/html"}, page(request.path)

    runner = CliRunner()
    with threaded_site(respond) as origin:
        found = runner.invoke(app, ["discover", f"{origin}/", "--db", migrated_pg_url])
        assert found.exit_code == 0, found.output
        done = runner.invoke(app, ["extract", "--db", migrated_pg_url], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert other_run, "control: the other run finished while this extraction ran"
    with FrontierStore.open(settings) as store:
        ours = [run for run in range(1, other_run[0] + 3)
                if (row := store.get_run(run)) and row["phase"] == "extract" and run != other_run[0]]
        assert len(ours) == 1, ours
        assert (store.last_run("extract") or {})["id"] == other_run[0], "control: the other run is the newest"
    shown = re.findall(r"Last extraction \(run (\d+)\)", done.output)
    assert shown == [str(ours[0])], done.output
    assert "127.0.0.99" not in done.output


def test_a_run_a_live_process_is_running_is_not_resumed_one_of_a_dead_process_is(migrated_pg_url: str) -> None:
    settings = Settings.load(database_url=migrated_pg_url)
    with FrontierStore.open(settings):
        pass
    profile = SiteProfile.build(seeds=("http://127.0.0.1:9/",), name="site")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with FrontierStore.open(settings) as store:
            # In a harvest's cycle, which a finished extraction run does not close (a standalone one's would be).
            store.begin_cycle("harvest", profile=profile.model_dump(mode="json"))
            held = store.start_run("extract", profile=profile.model_dump(mode="json"),
                                   owner=f"{socket.gethostname()}:{live.pid}:extract:abcd1234",
                                   user_agent=profile.user_agent or settings.http.user_agent)
        import asyncio

        beside = asyncio.run(begin_run(settings, "extract", profile))
        assert beside != held, "a live process's run was shared"
        live.kill()
        live.wait(timeout=60)
        # The other process died with its run unfinished: the next start resumes that run (and takes it over).
        with FrontierStore.open(settings) as store:
            store.finish_run(beside, status="completed", counters={})
        resumed = asyncio.run(begin_run(settings, "extract", profile))
        assert resumed == held
        with FrontierStore.open(settings) as store:
            owner = (store.get_run(held) or {})["owner"]
        assert owner.split(":")[1] == str(os.getpid())
    finally:
        live.kill()
        live.wait(timeout=60)
