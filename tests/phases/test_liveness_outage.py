"""Extraction waits for its liveness session to come back, and does not end with the work queued.

On PostgreSQL a process is alive to others while its liveness session is there (``frontier.liveness``); a
database restart ends that session, and until it is open again no lease of the process is known live, so every
host's turn stops before its first request. Rounds then spun in milliseconds, each counted idle, and the run ended
with exit 0 and most of its URLs queued (``test_db_outage[extraction-restart]``, 1 run in 3: 137 of 182 left).
Here the session is ended by the server (``pg_terminate_backend``) and kept away while the test says, so the
window the restart left to chance is as long as needed.
"""

from __future__ import annotations

import asyncio
import threading

import psycopg

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.frontier import liveness as live
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec

AWAY_S = 3.0
"""How long the session is kept away: a scenario's length, nothing is timed."""


async def test_extraction_waits_for_its_session_and_finishes_every_url(pg_url, make_web, monkeypatch) -> None:
    web = make_web([HostSpec("a", pages=60, latency_s=0.02), HostSpec("b", pages=60, latency_s=0.02)], seed=31)
    details = {url for name in web.names for url in web.truth[name].allowed_detail_urls()}
    settings = Settings.load(database_url=pg_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="away")
    away = threading.Event()
    connect = live.ProcessSession._connect

    def refused_while_away(self: live.ProcessSession) -> psycopg.Connection:
        if away.is_set():
            raise psycopg.OperationalError("the server is restarting (the test keeps the session away)")
        return connect(self)

    monkeypatch.setattr(live.ProcessSession, "_connect", refused_while_away)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        web.clear_records()
        session = store.liveness.session  # type: ignore[attr-defined]
        assert session is not None and session.up
        extraction = asyncio.create_task(phases.extract(store, settings, profile))
        while sum(r.path != "/robots.txt" for r in web.records()) < 20:
            assert not extraction.done(), "extraction finished before the session was ended"
            await asyncio.sleep(0.02)
        away.set()
        with psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as conn:
            ended = conn.execute(  # this database's: the process has one session per database, each so named
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
                " AND datname = current_database()", (session.name,)).fetchall()
        assert ended == [(True,)]
        while session.up:  # the watcher has seen its session end
            await asyncio.sleep(0.02)
        await asyncio.sleep(AWAY_S)
        away.clear()
        await asyncio.wait_for(extraction, 120)
        states = store.url_states()
    left = sorted(url for url in details if states.get(url, ("",))[0] != "done")
    assert left == [], (len(left), left[:3])
