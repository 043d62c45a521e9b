"""A request that never left carried no validators, and the fetch log does not say it did.

The fetch log keeps, per request, the validators it carried (``fetches.conditional`` / ``if_none_match`` /
``if_modified_since``): the WARC export writes them as the request's headers. A site harvested with ETags is taken
down (its port then has nobody listening); its pages, due again, meet a refused connection. Those fetches are
logged as failures with no validators: nothing reached the site. They were logged as conditional requests with the
stored ETag, set before the request was handed to the transport.
"""

from __future__ import annotations

import socket
from datetime import timedelta

from aiohttp import web
from test_harvest import robots_and_sitemap, settings_for

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

PAGES = [f"/articles/story-{n}" for n in range(3)]


async def handle(request: web.Request) -> web.Response:
    listed = robots_and_sitemap(request, PAGES)
    if listed is not None:
        return listed
    if request.path not in PAGES:
        return web.Response(status=404)
    return web.Response(content_type="text/html", headers={"ETag": f'"{request.path[9:]}"'}, text=(
        f"<html><body><main><article><h1>{request.path}</h1><p>The story of {request.path}, long enough to be "
        "taken for the article body by the extractor.</p></article></main></body></html>"))


async def test_a_page_whose_connection_was_refused_is_logged_with_no_validators_sent(db_url, clock):
    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    origin = f"http://127.0.0.1:{port}"
    # Pages due again an hour or two later; robots.txt, read for a day, is not asked again.
    settings = settings_for(db_url, **{"revisit.default_s": 3600.0, "politeness.max_attempts": 1})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        await runner.cleanup()  # the site is gone: nobody listens on its port now
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))  # control: the port is free (connections to it are refused)
        CLOCK.travel_to(run_at(0) + timedelta(hours=2))
        await phases.extract(store, settings, profile)
        fetches = [fetch for fetch in store.iter_fetches() if fetch.url in {origin + p for p in PAGES}]
    first = [fetch for fetch in fetches if fetch.status == 200]
    refused = [fetch for fetch in fetches if fetch.error_class == "connect"]
    assert len(first) == len(PAGES) and all(fetch.sent == (None, None) for fetch in first)  # control
    assert len(refused) == len(PAGES), [(f.url, f.status, f.error_class) for f in fetches]
    assert all(fetch.outcome == "failed" and fetch.sent is None for fetch in refused), [
        (f.url, f.sent) for f in refused]
