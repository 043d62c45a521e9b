"""A run a rerun does not resume is closed, saying why, not left ``running`` for ever beside the one that replaced it.

A run is resumed only with the User-Agent it sent (its requests all carry its own, as the WARC export says): one
left unfinished from before migration 0013 (``runs.user_agent`` NULL) or one that sent another User-Agent gets a
new run in its cycle. The old row stayed ``running``, two runs of a phase ran at once in the frontier's record, for
ever. Now it is ``abandoned`` with its reason, which ``harvester status`` shows; its cycle and what it stored stay.
"""

from __future__ import annotations

import socket
import subprocess
import sys

from harvester import FrontierStore, aharvest
from harvester.cli_tables import status_of
from harvester.owners import make_owner, retire_owner
from harvester.phases import begin_run
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

UA = "ourbot/2.0 (+https://ours.invalid/bot)"
BEFORE = "ourbot/1.0 (+https://ours.invalid/bot)"


async def test_a_run_killed_before_0013_or_with_another_user_agent_is_closed_abandoned_by_the_rerun(
    make_web, db_url
):
    web = make_web([HostSpec("a", pages=6)], seed=41)
    settings = Settings.load(database_url=db_url).with_overrides(**{"http.user_agent": UA})
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="ua")
    stored = profile.model_dump(mode="json")
    with FrontierStore.open(settings, upgrade=True) as store:
        # A harvest killed in both phases: its extraction from before 0013, its discovery under another User-Agent.
        cycle, _ = store.begin_cycle("harvest", profile=stored)
        old_extract = store.start_run("extract", profile=stored, user_agent=None)
        old_discover = store.start_run("discover", profile=stored, user_agent=BEFORE)

    new_extract = await begin_run(settings, "extract", profile)  # the rerun's extraction starts
    assert new_extract != old_extract  # control: not resumed (another User-Agent)
    shown = status_of(settings)["last_extract"]
    assert shown["run"] == old_extract and shown["status"] == "abandoned", shown
    assert "before migration 0013" in shown["reason"] and f"run {new_extract}" in shown["reason"], shown

    outcome = await aharvest(settings, profile)  # the whole rerun: the same cycle, new runs
    with FrontierStore.open(settings) as store:
        rows = {run_id: store.get_run(run_id) for run_id in (old_extract, old_discover)}
        discovered, extracted = store.last_run("discover"), store.last_run("extract")
    for row in rows.values():
        assert row is not None and row["status"] == "abandoned" and row["finished_at"] is not None, row
        assert row["cycle_id"] == cycle, row  # what it stored stays its cycle's
    assert BEFORE in rows[old_discover]["counters"]["reason"], rows  # type: ignore[index]
    for row in (discovered, extracted):
        assert row is not None and row["status"] == "completed" and row["cycle_id"] == cycle, row
        assert row["id"] not in (old_extract, old_discover), row
    assert outcome.changes["new"] >= len(web.truth["a"].allowed_detail_urls()), outcome.changes


async def test_a_live_workers_run_with_another_user_agent_is_left_running(make_web, db_url):
    """Workers of one harvest may each send their own User-Agent (a stranger's three extraction processes did):
    a worker starting beside a live one must not close that one's run as abandoned. Only a run whose process is
    gone is."""
    web = make_web([HostSpec("a", pages=4)], seed=41)
    settings = Settings.load(database_url=db_url).with_overrides(**{"http.user_agent": UA})
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="ua")
    stored = profile.model_dump(mode="json")
    beside = make_owner("extract")  # a live worker of this process
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            store.begin_cycle("harvest", profile=stored)
            other = store.start_run("extract", profile=stored, owner=beside, user_agent=BEFORE)
        mine = await begin_run(settings, "extract", profile)
        with FrontierStore.open(settings) as store:
            row = store.get_run(other)
    finally:
        retire_owner(beside)
    assert mine != other
    assert row is not None and row["status"] == "running" and row["finished_at"] is None, row


async def test_a_resumed_run_is_its_new_workers_and_not_taken_for_dead(make_web, db_url):
    """A run resumed after its process was killed still named the dead process as its owner: a worker with
    another User-Agent starting beside it closed it as abandoned while it was fetching (review)."""
    web = make_web([HostSpec("a", pages=4)], seed=41)
    settings = Settings.load(database_url=db_url).with_overrides(**{"http.user_agent": UA})
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="ua")
    stored = profile.model_dump(mode="json")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # reaped: its pid is gone
    with FrontierStore.open(settings, upgrade=True) as store:
        store.begin_cycle("harvest", profile=stored)
        killed = store.start_run("extract", profile=stored, owner=f"{socket.gethostname()}:{dead.pid}:extract:0",
                                 user_agent=UA)
    resumed = await begin_run(settings, "extract", profile)  # this process resumes it
    assert resumed == killed  # control
    other = settings.with_overrides(**{"http.user_agent": BEFORE})
    beside = await begin_run(other, "extract", profile)  # a worker with another User-Agent starts beside it
    with FrontierStore.open(settings) as store:
        row = store.get_run(killed)
    assert beside != killed
    assert row is not None and row["status"] == "running", row
