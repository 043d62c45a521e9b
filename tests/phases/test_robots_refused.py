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
            etag = f'"{path[1]}1"'
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

    disallow[:] = ["/private/y"]  # robots.txt allows /private/x again; the sitemaps are unchanged (304)
    await arecrawl(settings, profile, refresh=True)
    assert answers[("/a.xml", 304)] == answers[("/b.xml", 304)] == 2, answers
    assert refused() == (1, {origin: 1}, 1)


async def test_the_refusals_a_stopped_discovery_read_are_recorded(sqlite_url, serve):
    """The process is stopped while one host's robots.txt is on the wire and the other's sitemap has been read:
    the refusals read are recorded before discovery ends (the rerun reads that sitemap no more)."""
    answers: Counter[tuple[str, int]] = Counter()
    read = await serve(refusing_site(["/private/"], answers))
    held, release = asyncio.Event(), asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        held.set()
        await release.wait()
        return web.Response(text="User-agent: *\nAllow: /\n")

    waiting = await serve(slow)
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
