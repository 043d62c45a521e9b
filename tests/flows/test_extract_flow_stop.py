"""Extraction's workers (extract_flow's, and harvest()'s) met by the process's stop: each writes what it has on the
wire before the run ends, so its rerun fetches none of it again (issue 31: "a kill (or a stop) repeats only what was
in flight").

Before, the first worker to end with the stop raised ``Interrupted`` out of the workers' task group, which cancelled
its sibling with a page on the wire: the rerun fetched that page again. The servers force the order: a page of host
A is held on the wire when the stop is requested (from A's own handler) until the other worker's task has ended
with the stop; host B's first page is held until the stop was requested, so its worker's next request meets it.
Each worker holds one host at a time (``max_active_hosts`` 1), so the hosts are served by both workers.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from conftest import prepared

from harvester.errors import Interrupted
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.runtime import clear_stop
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.stopping_site import StoppingSite
from harvester.testing.threaded_site import Answer, threaded_site

PAGES = 4


class Site(StoppingSite):
    """A loopback site of ``PAGES`` posts: its first post asked is held on the wire until ``until``."""

    def holds(self, path: str) -> bool:
        return path != "/robots.txt" and all(asked == "/robots.txt" for asked, _ in self.asked)

    def page(self, path: str) -> Answer:
        return 200, {"Content-Type": "text/html"}, f"<html><body>{self.origin}{path}</body></html>".encode()


@pytest.mark.parametrize("steps", ["extract_flow", "library"])
async def test_stopped_extraction_workers_each_write_what_they_have_on_the_wire(
    prefect_api, sqlite_url, monkeypatch, stopped, steps
):
    """``library``: ``harvest()``'s extraction step (``LocalSteps.extract``), whose workers were a task group too."""
    from harvester.flows import extract as flows_extract
    from harvester.flows.extract import extract_flow
    from harvester.phases.cycles import LocalSteps

    monkeypatch.setenv("HARVESTER_POLITENESS__MAX_ACTIVE_HOSTS", "1")
    other_stopped, a_held = threading.Event(), threading.Event()
    b = Site(a_held, threading.Event())
    a = Site(other_stopped, a_held, stop_first=True)

    def ended_with_the_stop() -> None:
        # A worker ended with the stop while A's page is on the wire: the other one, serving B (A's own drains it
        # first). A's page is answered now.
        with a.lock:
            if a_held.is_set() and not [path for path in a.answered if path != "/robots.txt"]:
                other_stopped.set()

    worker_task, local_worker = flows_extract.extract_worker, LocalSteps._worker

    async def spied_task(*args: Any) -> Any:
        try:
            return await worker_task(*args)
        except Interrupted:
            ended_with_the_stop()
            raise

    async def spied_local(self: LocalSteps, *args: Any) -> Any:
        try:
            return await local_worker(self, *args)
        except Interrupted:
            ended_with_the_stop()
            raise

    monkeypatch.setattr(flows_extract, "extract_worker", spied_task)
    monkeypatch.setattr(LocalSteps, "_worker", spied_local)
    with threaded_site(a.answer) as a.origin, threaded_site(b.answer) as b.origin:
        overrides = prepared(sqlite_url)
        settings = Settings.load(database_url=sqlite_url)
        posts = [f"{site.origin}/posts/{n}" for site in (a, b) for n in range(1, PAGES + 1)]
        with FrontierStore.open(settings) as store:
            store.add_discovered([DiscoveredUrl(url=url, kind=UrlKind.DETAIL, source="seed", score=0.5)
                                  for url in posts])
        profile = SiteProfile.build(seeds=(a.origin + "/", b.origin + "/"), name="stopping-workers",
                                    per_host_limit=1)

        async def extraction() -> None:
            if steps == "library":
                await LocalSteps(settings, profile, workers=2).extract()
            else:
                await extract_flow(profile, workers=2, overrides=overrides)

        with pytest.raises(Interrupted):
            await extraction()
        assert other_stopped.is_set()  # control: B's worker ended with the stop while A's page was held
        with a.lock, b.lock:
            answered = {"a": list(a.answered), "b": list(b.answered)}
            asked_before = {"a": len(a.asked), "b": len(b.asked)}

        clear_stop()
        await extraction()
        with a.lock, b.lock:
            rerun = {name: Counter(path for path, _ in site.asked[asked_before[name]:])
                     for name, site in (("a", a), ("b", b))}
    asked_again = {name: sorted(path for path in answered[name] if path != "/robots.txt" and rerun[name][path])
                   for name in ("a", "b")}
    assert asked_again == {"a": [], "b": []}, f"answered in the stopped run and asked again: {asked_again}"
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    assert {url: states[url][0] for url in posts if states[url][0] != "done"} == {}, (rerun, answered)
