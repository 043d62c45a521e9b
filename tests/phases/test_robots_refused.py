"""The URLs robots.txt refuses, as ``harvester status`` and the harvest's summary count them: each URL once, however
many sources name it, and what robots.txt refuses now, true on a re-crawl whose sitemaps answer 304.

Before, the count was the last discovery's refusals summed over its sources: a URL named by two sitemaps counted
twice, a re-crawl whose sitemaps answered 304 (nothing read, nothing refused again) counted none, and a robots.txt
that allowed a URL again left it counted until its sitemap changed."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from aiohttp import web
from typer.testing import CliRunner

from harvester import aharvest, arecrawl, phases
from harvester.cli import app
from harvester.cli_tables import status_of
from harvester.errors import Interrupted
from harvester.frontier import FrontierStore
from harvester.runtime import clear_stop, request_stop
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

SITEMAPS = {"/a.xml": ("/ok", "/private/x"), "/b.xml": ("/private/x", "/private/y", "/ok/b")}
"""/private/x is named by both sitemaps."""


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def refusing_site(disallow: list[str], answers: Counter[tuple[str, int]]) -> Any:
    """robots.txt disallows ``disallow`` (changeable between runs) and names two sitemaps, which answer 304 to their
    ETag; ``answers`` counts (path, status)."""

    async def handle(request: web.Request) -> web.Response:
        here = f"http://{request.host}"
        path = request.path
        if path == "/robots.txt":
            answers[(path, 200)] += 1
            rules = "".join(f"Disallow: {prefix}\n" for prefix in disallow)
            return web.Response(text=f"User-agent: *\n{rules}Sitemap: {here}/a.xml\nSitemap: {here}/b.xml\n")
        if path in SITEMAPS:
            etag = f'"{path[1]}{len(SITEMAPS[path])}"'  # a new version, a new ETag
            if request.headers.get("If-None-Match") == etag:
                answers[(path, 304)] += 1
                return web.Response(status=304, headers={"ETag": etag})
            answers[(path, 200)] += 1
            locs = "".join(f"<url><loc>{here}{p}</loc></url>" for p in SITEMAPS[path])
            return web.Response(content_type="application/xml", headers={"ETag": etag}, text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{locs}</urlset>'))
        answers[(path, 200)] += 1
        return web.Response(content_type="text/html", text=f"<html><body><main><p>{path} " + "words " * 60
                            + "</p></main></body></html>")

    return handle


async def held_robots(serve: Any) -> tuple[str, asyncio.Event, asyncio.Event]:
    """A host whose robots.txt (allowing everything) is held on the wire until ``release``; ``held`` is set once it
    is asked. Returns its origin, ``held`` and ``release``."""
    held, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        held.set()
        await release.wait()
        return web.Response(text="User-agent: *\nAllow: /\n")

    return await serve(slow), held, release


async def test_robots_refusals_are_counted_once_per_url_and_hold_on_a_recrawl_of_304s(db_url, serve):
    disallow = ["/private/"]
    answers: Counter[tuple[str, int]] = Counter()
    origin = await serve(refusing_site(disallow, answers))
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True):
        pass

    def refused() -> tuple[int, dict[str, int], int]:
        stats = status_of(settings)
        return (stats["last_discover"]["robots_refused"], stats["last_discover"]["robots_refused_by_host"],
                stats["hosts"][origin]["robots_refused"])

    await aharvest(settings, profile)
    assert answers[("/private/x", 200)] == answers[("/private/y", 200)] == 0  # control: refused, never asked
    assert refused() == (2, {origin: 2}, 2)  # /private/x once, though both sitemaps name it
    shown = CliRunner().invoke(app, ["status", "--db", db_url], env={"COLUMNS": "200"}, terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "Disallowed by robots.txt: 2 URLs discovery found, each once" in " ".join(shown.output.split())

    await arecrawl(settings, profile, refresh=True)
    assert answers[("/a.xml", 304)] == answers[("/b.xml", 304)] == 1, answers  # control: nothing read again
    assert refused() == (2, {origin: 2}, 2)

    disallow[:] = ["/private/y"]  # robots.txt allows /private/x again; the sitemaps are unchanged
    await arecrawl(settings, profile, refresh=True)
    # Both name /private/x: read in full (a 304 would name it no more), and the page asked that run.
    assert answers[("/a.xml", 200)] == answers[("/b.xml", 200)] == 2, answers
    assert answers[("/private/x", 200)] == 1, answers
    assert refused() == (1, {origin: 1}, 1)


async def test_the_refusals_a_stopped_discovery_read_are_recorded(sqlite_url, serve):
    """The process is stopped while one host's robots.txt is on the wire and the other's sitemap has been read:
    the refusals read are recorded before discovery ends (the rerun reads that sitemap no more)."""
    answers: Counter[tuple[str, int]] = Counter()
    read = await serve(refusing_site(["/private/"], answers))
    waiting, held, release = await held_robots(serve)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=(f"{read}/", f"{waiting}/"), use_listings=False, use_feeds=False)
    try:
        with FrontierStore.open(settings, upgrade=True) as store:
            run_id = store.start_run("discover")
            discovery = asyncio.create_task(phases.discover(store, settings, profile, run_id=run_id))
            for _ in range(1500):  # until both sitemaps are read (the last's URLs written) and the other host waits
                if held.is_set() and (await asyncio.to_thread(store.url_states)).get(f"{read}/ok/b"):
                    break
                await asyncio.sleep(0.02)
            assert held.is_set() and answers[("/b.xml", 200)] == 1, answers  # control: read, and one held
            request_stop("test: the worker is stopping")
            release.set()
            with pytest.raises(Interrupted):
                await discovery
            assert store.refused_counts() == {read: 2}
    finally:
        clear_stop()


async def test_a_refused_url_no_document_names_any_more_is_no_longer_counted(db_url, serve):
    """b.xml stops naming /private/y (and robots.txt still refuses it): before, the row stayed counted for ever,
    since only a robots.txt allowing it again dropped it."""
    disallow = ["/private/"]
    answers: Counter[tuple[str, int]] = Counter()
    origin = await serve(refusing_site(disallow, answers))
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        assert store.refused_counts() == {origin: 2}  # control
        SITEMAPS["/b.xml"] = ("/private/x", "/ok/b")  # a new version
        try:
            await arecrawl(settings, profile, refresh=True)
            assert answers[("/b.xml", 200)] == 2, answers  # control: read again
        finally:
            SITEMAPS["/b.xml"] = ("/private/x", "/private/y", "/ok/b")
        assert store.refused_counts() == {origin: 1}  # /private/x, still named by both


CHILD = """
import asyncio, sys
from harvester import phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

async def main(db, *seeds):
    settings = Settings.load(database_url=f"sqlite:///{db}")
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, SiteProfile.build(seeds=seeds, use_listings=False, use_feeds=False))

asyncio.run(main(sys.argv[1], *sys.argv[2:]))
"""


async def test_refusals_read_before_a_kill_are_counted(tmp_path, serve):
    """A kill -9 while another host's robots.txt is on the wire: the sitemaps read before it were recorded, and
    so are the URLs they named that robots.txt refuses (before: held in memory until discovery ended, lost with
    the process until the sitemaps were read again, which the rerun does not do)."""
    import subprocess
    import sys

    answers: Counter[tuple[str, int]] = Counter()
    read = await serve(refusing_site(["/private/"], answers))
    waiting, held, release = await held_robots(serve)
    db = tmp_path / "killed.db"
    settings = Settings.load(database_url=f"sqlite:///{db}")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), f"{read}/", f"{waiting}/"])
    try:
        recorded = False
        for _ in range(1200):  # until both sitemaps are recorded while the other host's robots.txt hangs
            await asyncio.sleep(0.05)
            if held.is_set() and db.exists():
                with FrontierStore.open(settings) as store:
                    recorded = all(store.get_document(f"{read}{path}") is not None for path in SITEMAPS)
                if recorded:
                    break
    finally:
        child.kill()
        child.wait()
        release.set()
    assert recorded, answers
    with FrontierStore.open(settings) as store:
        assert store.refused_counts() == {read: 2}


async def test_the_refusals_of_documents_read_before_they_were_recorded_are_read_once(db_url, serve):
    """A frontier as migration 0019 leaves one upgraded from 0016/0017: its sitemaps read (validators kept), no
    refusal recorded for them. Before, a re-crawl of 304s counted none until the sitemaps changed; now each is asked
    once without validators (robots.txt refuses something) and its refusals recorded, then conditionally again."""
    answers: Counter[tuple[str, int]] = Counter()
    origin = await serve(refusing_site(["/private/"], answers))
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        with store.db.engine.begin() as conn:  # the state an upgraded frontier is in
            conn.exec_driver_sql("UPDATE documents SET refusals_read = NULL")
            conn.exec_driver_sql("DELETE FROM robots_refusals")
        assert store.refused_counts() == {}  # control
        await arecrawl(settings, profile, refresh=True)
        assert answers[("/a.xml", 200)] == answers[("/b.xml", 200)] == 2, answers  # asked once in full
        assert store.refused_counts() == {origin: 2}
        await arecrawl(settings, profile, refresh=True)
        assert answers[("/a.xml", 304)] == answers[("/b.xml", 304)] == 1, answers  # then conditionally
        assert store.refused_counts() == {origin: 2}


def test_rows_kept_from_before_0019_go_once_the_hosts_documents_were_all_read(db_url):
    """A row 0019 kept from 0016 names no document (source 0): kept while a document of its host read before 0019 is
    left unread (it may name it), dropped once none is (whatever still names it was written with its document)."""
    from harvester.records import DocumentState
    from harvester.runtime import utcnow

    origin = "http://refusals.example"
    settings = Settings.load(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.name_refused(origin, {"sitemap:x": {}}, replace=False)  # the host's row
        now = utcnow()
        d = store.db.dialect
        with store.db.engine.begin() as conn:
            host_id = conn.exec_driver_sql(f"SELECT id FROM hosts WHERE origin = {d.p}", (origin,)).scalar()
            conn.exec_driver_sql(f"INSERT INTO robots_refusals (host_id, path, source_id, found_at) VALUES "
                                 f"({d.p}, '/private/old', 0, {d.p})", (host_id, d.ts(now)))
        read_before = DocumentState(url=f"{origin}/s.xml", kind="sitemap", content_hash="h", fetched_at=now,
                                    read_at=now, refusals_read=False)
        store.save_document(read_before)
        assert store.keep_refused(origin, lambda url: False) == 1
        assert store.refused_counts() == {origin: 1}
        store.save_document(DocumentState(url=f"{origin}/s.xml", kind="sitemap", content_hash="h2", fetched_at=now,
                                          read_at=now))
        assert store.keep_refused(origin, lambda url: False) == 0
        assert store.refused_counts() == {}
