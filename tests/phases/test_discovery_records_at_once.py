"""A discovery document is recorded when its answer is in, not once the documents asked before it are (issue 31).

A feed read for the first time has its next pages guessed and asked beside the page the walk waits for. Held
until the walk reached them, a kill meanwhile asked them again; now each guess that is a feed with entries is read
and recorded as it comes in. The server holds the walk's page unanswered while its guesses are answered; they must
reach the frontier while it is still held.
"""

from __future__ import annotations

import asyncio
import time

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

RECORD_BOUND_S = 30.0
HELD = "/feed?page=2"


def feed_page(origin: str, number: int) -> str:
    items = "".join(f"<item><title>{n}</title><link>{origin}/posts/{n}</link></item>"
                    for n in range(100 + 5 * number, 105 + 5 * number))
    following = f'<atom:link rel="next" href="{origin}/feed?page={number + 1}"/>' if number < 8 else ""
    return (f'<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>'
            f"<title>t</title><link>{origin}/</link>{following}{items}</channel></rss>")


async def test_guessed_feed_pages_are_recorded_while_the_page_before_them_is_in_flight(sqlite_url, serve):
    from aiohttp import web

    release = asyncio.Event()
    held = asyncio.Event()
    answered: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        origin, where = f"http://{request.host}", request.path_qs
        try:
            if where == "/":
                return web.Response(content_type="text/html", text=(
                    '<html><head><link rel="alternate" type="application/rss+xml" href="/feed?page=1"></head>'
                    "<body>home</body></html>"))
            if where.startswith("/feed?page="):
                if where == HELD:
                    held.set()
                    await release.wait()
                return web.Response(content_type="application/rss+xml",
                                    text=feed_page(origin, int(where.rpartition("=")[2])))
            return web.Response(status=404)
        finally:
            answered.append(where)

    origin = await serve(handle)
    settings = Settings.load(database_url=sqlite_url)
    guesses = [f"{origin}/feed?page={n}" for n in (3, 4)]
    with FrontierStore.open(settings, upgrade=True) as store:
        discovery = asyncio.ensure_future(
            phases.discover(store, settings, SiteProfile.build(seeds=(origin + "/",), per_host_limit=4)))
        try:
            await asyncio.wait_for(held.wait(), 60)
            deadline = time.monotonic() + RECORD_BOUND_S
            recorded: list[str] = []
            while time.monotonic() < deadline:
                recorded = [url for url in guesses
                            if (doc := await asyncio.to_thread(store.get_document, url)) is not None
                            and doc.content_hash is not None]
                if len(recorded) == len(guesses) or discovery.done():
                    break
                await asyncio.sleep(0.05)
            still_held = not release.is_set() and HELD not in answered
        finally:
            release.set()
            await asyncio.wait_for(discovery, 120)
    assert still_held
    assert all(f"/feed?page={n}" in answered for n in (3, 4))  # control: the guesses were asked and answered
    missing = sorted(set(guesses) - set(recorded))
    assert recorded == guesses, f"answered while {HELD} was in flight, not recorded: {missing}"
