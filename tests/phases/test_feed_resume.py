"""A paged feed's walk cut by a kill -9 goes on in the rerun of the same run (issue 31: a kill repeats only what was
in flight, and loses nothing either).

The feed's head is read and recorded, then its next page hangs until the process is killed. Before, the rerun found
the head read in this run, skipped the feed, and its later pages waited for the next run (a day later). Now the
head's record keeps the page its walk went on to, and the rerun reads from there: the page in flight and the one
after it, without asking the head again. A real loopback server counts the requests.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

PAGES = {"/feed.xml": ("/feed-older-a.xml", (1, 2)), "/feed-older-a.xml": ("/feed-older-b.xml", (3, 4)),
         "/feed-older-b.xml": (None, (5, 6))}

CHILD = """
import asyncio, sys
from harvester import phases
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

async def main(db, run_id, seed):
    settings = Settings.load(database_url=f"sqlite:///{db}")
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, SiteProfile.build(seeds=(seed,), use_sitemaps=False,
                                                                 use_listings=False), run_id=int(run_id))

asyncio.run(main(*sys.argv[1:]))
"""


def atom(origin: str, path: str) -> str:
    following, stories = PAGES[path]
    link = f'<link rel="next" href="{origin}{following}"/>' if following else ""
    entries = "".join(f"<entry><id>s{n}</id><title>s{n}</title><link href=\"{origin}/story/{n}\"/>"
                      f"<updated>2026-03-0{7 - n}T00:00:00Z</updated></entry>" for n in stories)
    return (f'<feed xmlns="http://www.w3.org/2005/Atom"><id>{origin}{path}</id><title>f</title>'
            f"<updated>2026-03-06T00:00:00Z</updated>{link}{entries}</feed>")


def killed_frontier(tmp_path: Path) -> tuple[Settings, int]:
    """The frontier the child discovers into (``tmp_path``'s killed.db, migrated) and the run it discovers in."""
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'killed.db'}")
    with FrontierStore.open(settings, upgrade=True) as store:
        return settings, store.start_run("discover")


async def kill_when_recorded(tmp_path: Path, code: str, seed: str, *, run_id: int, on_the_wire: Callable[[], bool],
                             recorded: Callable[[FrontierStore], bool], release: asyncio.Event) -> bool:
    """Run ``code`` (discovery of ``seed`` in run ``run_id``) in a child process over ``tmp_path``'s killed.db and
    kill it (SIGKILL) once ``on_the_wire()`` (the answer held until the kill was asked for) and ``recorded`` holds
    of its frontier; then the held answer is let go (``release``). True when that moment came before the bound."""
    db = tmp_path / "killed.db"
    settings = Settings.load(database_url=f"sqlite:///{db}")
    child = subprocess.Popen([sys.executable, "-c", code, str(db), str(run_id), seed], cwd=tmp_path)
    try:
        for _ in range(1200):
            await asyncio.sleep(0.05)
            if on_the_wire() and db.exists():
                with FrontierStore.open(settings) as store:
                    if recorded(store):
                        return True
        return False
    finally:
        child.kill()
        child.wait()
        release.set()


@pytest.mark.parametrize("known_before", [False, True], ids=["new-stories", "stories-known-from-a-sitemap"])
async def test_a_feed_walk_cut_by_a_kill_goes_on_in_the_rerun_of_the_run(tmp_path, serve, known_before):
    """``known_before``: the stories of the page in flight were in the frontier before the feed's first read (a
    sitemap named them). A first read walks every page; before, the resumed walk stopped at that page (not all
    news) and never asked the page after it."""
    asked: Counter[str] = Counter()
    release = asyncio.Event()  # set at the kill: the held answer is let go, the rerun's are not held

    async def handle(request: web.Request) -> web.Response:
        asked[request.path] += 1
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if request.path in PAGES:
            if request.path == "/feed-older-a.xml":
                await release.wait()  # in flight until the kill
            return web.Response(text=atom(origin, request.path), content_type="application/atom+xml")
        return web.Response(text="<html><body>a story</body></html>", content_type="text/html")

    origin = await serve(handle)
    settings, run_id = killed_frontier(tmp_path)
    if known_before:
        with FrontierStore.open(settings) as store:
            store.add_discovered([DiscoveredUrl(url=f"{origin}/story/{n}", kind=UrlKind.DETAIL,
                                                source=f"sitemap:{origin}/sitemap.xml", depth=0, score=0.5)
                                  for n in (3, 4)])
    # until the head is recorded and its next page is on the wire
    recorded = await kill_when_recorded(
        tmp_path, CHILD, f"{origin}/feed.xml", run_id=run_id, on_the_wire=lambda: bool(asked["/feed-older-a.xml"]),
        recorded=lambda store: store.get_document(f"{origin}/feed.xml") is not None, release=release)
    assert recorded, asked
    assert asked["/feed.xml"] == 1 and asked["/feed-older-b.xml"] == 0, asked  # control: cut after the head

    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, SiteProfile.build(
            seeds=(f"{origin}/feed.xml",), use_sitemaps=False, use_listings=False), run_id=run_id)
        states = store.url_states()
    assert asked["/feed.xml"] == 1, asked  # read in this run: not asked again
    assert asked["/feed-older-a.xml"] == 2 and asked["/feed-older-b.xml"] == 1, asked  # before: 1 and 0
    assert all(f"{origin}/story/{n}" in states for n in range(1, 7)), states


NUMBERED_CHILD = CHILD.replace("use_listings=False)", "use_listings=False, per_host_limit=2)")


def numbered(origin: str, number: int) -> str:
    """Page ``number`` of a numbered RSS feed of 6 pages: its next pages are guessed ahead on a first read."""
    items = "".join(f"<item><title>{n}</title><link>{origin}/story/{n}</link></item>"
                    for n in range(10 * number, 10 * number + 3))
    following = f'<atom:link rel="next" href="{origin}/feed?page={number + 1}"/>' if number < 6 else ""
    return (f'<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel>'
            f"<title>t</title><link>{origin}/</link>{following}{items}</channel></rss>")


async def test_a_resumed_feed_walk_passes_the_guessed_pages_read_before_the_kill(tmp_path, serve):
    """Page 2 of a numbered feed is on the wire at the kill while pages 3 and 4, guessed beside it, were answered and
    recorded. The rerun reads page 2 (in flight) and goes on from page 5: pages 3 and 4 are passed by their records,
    without a request. Before, the resumed walk asked every page after the one in flight again."""
    asked: Counter[str] = Counter()
    release = asyncio.Event()  # set at the kill: the held answer is let go, the rerun's are not held

    async def handle(request: web.Request) -> web.Response:
        where = request.path_qs
        asked[where] += 1
        origin = f"http://{request.host}"
        if where == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if where.startswith("/feed?page="):
            number = int(where.rpartition("=")[2])
            if number > 6:
                return web.Response(status=404)
            if number == 2:
                await release.wait()  # in flight until the kill
            return web.Response(text=numbered(origin, number), content_type="application/rss+xml")
        return web.Response(text="<html><body>a story</body></html>", content_type="text/html")

    origin = await serve(handle)
    settings, run_id = killed_frontier(tmp_path)
    guesses = [f"{origin}/feed?page={n}" for n in (3, 4)]
    # until page 2 is on the wire and the guesses beside it are recorded
    recorded = await kill_when_recorded(
        tmp_path, NUMBERED_CHILD, f"{origin}/feed?page=1", run_id=run_id,
        on_the_wire=lambda: bool(asked["/feed?page=2"]), release=release,
        recorded=lambda store: all((doc := store.get_document(url)) is not None and doc.content_hash is not None
                                   for url in guesses))
    assert recorded, asked
    before = Counter(asked)
    assert before["/feed?page=1"] == 1 and before["/feed?page=5"] == 0, before  # control: cut at page 2

    with FrontierStore.open(settings) as store:
        await phases.discover(store, settings, SiteProfile.build(
            seeds=(f"{origin}/feed?page=1",), use_sitemaps=False, use_listings=False, per_host_limit=2),
            run_id=run_id)
        states = store.url_states()
    rerun = asked - before
    assert rerun["/feed?page=2"] == 1, rerun  # in flight at the kill: asked again
    assert rerun["/feed?page=3"] == rerun["/feed?page=4"] == 0, rerun  # read before the kill: not asked again
    assert rerun["/feed?page=5"] == 1 and rerun["/feed?page=6"] == 1, rerun  # control: the walk went on
    assert all(f"{origin}/story/{n}" in states for page in range(1, 7) for n in range(10 * page, 10 * page + 3)), states
