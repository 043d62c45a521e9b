"""A permanent redirect to a URL the frontier has never seen, on a host another extraction process holds, is not
followed: the target's own claim, by the worker holding its host, asks it once. Followed, its answer was kept in
the memory of the worker that followed it, while the target, queued by the redirect's record on the other host,
was claimed and asked again by that host's holder: the page was downloaded twice (issue 32)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from harvester import FrontierStore, phases
from harvester.owners import make_owner, retire_owner
from harvester.phases.budget import PageBudget, page_budget
from harvester.phases.extract_host import ExtractWork
from harvester.phases.leases import lease_clock
from harvester.rules.admission import Site
from harvester.runtime import utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

pytestmark = pytest.mark.postgres

PAGES = 12
LIMIT = 1


def _page(title: str) -> str:
    return (f"<html><head><title>{title}</title></head><body><main><article><h1>{title}</h1><p>"
            + "words of the product page " * 30 + "</p></article></main></body></html>")


def _site(name: str, log: list[tuple[str, str, int]], moved_to: list[str], b_served: asyncio.Event,
          old_asker: list[str]) -> Callable[[web.Request], object]:
    """``PAGES`` detail pages in the sitemap, each answered after 100 ms; on host ``a``, ``/p/old`` (listed first)
    answers 301 to ``moved_to[0]`` (host ``b``'s ``/p/new``, in no sitemap), and its other pages only once host
    ``b`` has served a page (``b_served``): ``b`` is the other process's by then, whichever of the two started
    first (each holds one host at most). ``/p/new`` waits for that too when the process that asked ``/p/old``
    (its user agent, ``old_asker``) asks it, as a redirect followed would; asked by ``b``'s other holder, it does
    not: that holder may claim it before any page of ``b`` (queued by the redirect's record before its first
    claim), and waiting for a page of its own host at one request at a time, it was timed out after 30 s and asked
    again, the first request answered 200 too once ``b`` served a page (a failure of this test's site)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        origin = f"http://{request.host}"
        paths = [f"/p/{n}" for n in range(PAGES)] + (["/p/old"] if name == "a" else [])
        response: web.StreamResponse
        if request.path == "/robots.txt":
            response = web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        elif request.path == "/sitemap.xml":
            entries = "".join(f"<url><loc>{origin}{path}</loc><priority>{1.0 if path == '/p/old' else 0.1}"
                              "</priority></url>" for path in paths)
            response = web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'))
        elif name == "a" and request.path == "/p/old":
            old_asker.append(request.headers.get("User-Agent", ""))
            response = web.Response(status=301, headers={"Location": moved_to[0]})
        elif request.path in paths or (name == "b" and request.path == "/p/new"):
            if name == "b" and request.path != "/p/new":  # not the redirect followed (before the fix)
                b_served.set()
            elif name == "a" or request.headers.get("User-Agent", "") in old_asker:
                await asyncio.wait_for(b_served.wait(), 240)
            await asyncio.sleep(0.1)
            response = web.Response(content_type="text/html", text=_page(f"{name} {request.path}"))
        else:
            response = web.Response(status=404, text="not here")
        log.append((name, request.path, response.status))
        return response

    return handle


async def test_a_redirect_to_a_host_another_process_holds_is_asked_once(
        pg_url: str, serve: Callable[..., object], tmp_path: Path) -> None:
    log: list[tuple[str, str, int]] = []
    moved_to: list[str] = []
    b_served = asyncio.Event()
    old_asker: list[str] = []
    a = await serve(_site("a", log, moved_to, b_served, old_asker))  # type: ignore[operator]
    b = await serve(_site("b", log, moved_to, b_served, old_asker))  # type: ignore[operator]
    moved_to.append(f"{b}/p/new")
    settings = Settings.load(database_url=pg_url)
    profile = SiteProfile.build(seeds=(f"{a}/", f"{b}/"), use_listings=False, use_feeds=False,
                                per_host_limit=LIMIT)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
    log.clear()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect"), "HARVESTER_POLITENESS__MAX_ACTIVE_HOSTS": "1"})
    harvester = str(Path(sys.executable).parent / "harvester")
    # Two processes, each holding one host at most.
    workers = [await asyncio.create_subprocess_exec(
        harvester, "extract", f"{a}/", f"{b}/", "--db", pg_url, "--per-host", str(LIMIT),
        env={**env, "HARVESTER_HTTP__USER_AGENT": f"harvester-redirect-{n}/1.0 (+http://127.0.0.1/contact)"},
        stdout=asyncio.subprocess.DEVNULL, stderr=(tmp_path / f"extract-{n}.log").open("wb"), cwd=tmp_path,
    ) for n in range(2)]
    try:
        codes = await asyncio.wait_for(asyncio.gather(*(w.wait() for w in workers)), 240)
    finally:
        for w in workers:
            if w.returncode is None:
                w.kill()
                await w.wait()
    assert codes == [0, 0], [(tmp_path / f"extract-{n}.log").read_text()[-3000:] for n in range(2)]
    assert ("a", "/p/old", 301) in log, log
    assert [(name, path) for name, path, status in log if status == 200].count(("b", "/p/new")) == 1, log
    with FrontierStore.open(settings) as store:
        info = store.url_info(f"{a}/p/old")
        target = store.url_info(f"{b}/p/new")
    assert info is not None and (info.state, info.final_url) == ("done", f"{b}/p/new"), info
    assert target is not None and target.state == "done", target


async def test_a_host_whose_turn_ended_is_no_longer_held_for_a_redirect_to_it(pg_url: str) -> None:
    """The interleaving the two processes above met under load, forced: this worker held ``b``, ended its turn
    there (its lease handed back), then took ``a``, whose redirect leads to ``b``. The local deadline of ``b``
    outlived the hand-back, so ``b`` still read as held: the redirect was followed and its answer kept here, while
    ``b``'s next holder claimed the queued target and asked it again (200 twice)."""
    a, b = "http://127.0.0.1:9", "http://127.0.0.1:10"
    settings = Settings.load(database_url=pg_url)
    profile = SiteProfile.build(seeds=(f"{a}/", f"{b}/"), use_listings=False, use_feeds=False, per_host_limit=LIMIT)
    with FrontierStore.open(settings, upgrade=True) as store:
        site = Site(settings, profile, keep_reports=False)
        work = ExtractWork(store, settings, site, owner=make_owner("extract-0"), run_id=None, hook=None,
                           budget=PageBudget(store, limit=page_budget(settings, profile), since=utcnow()))
        try:
            for origin in (b, a):  # b's turn, then a's
                work.holds.grant([origin], lease_clock())
                work.leased.add(origin)
            assert work.may_send(b)
            work.exhausted.add(b)  # b's claim found nothing more: its turn is over once its requests are
            await work.turn_over(b)
            assert b not in work.leased and not work.may_send(b)
            # The redirect from a to b's never-seen page is not followed: b's holder asks it, once.
            assert await work._moved.asked_alone(f"{a}/p/old", f"{b}/p/new")
        finally:
            work.leave()
            retire_owner(work.owner)
