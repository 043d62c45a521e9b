"""A moved URL's revisits, at the daily cadence, against the server's own access log.

``/p/old`` answers 301 to ``/p/new`` from day 2; ``/p/new`` is a page of its own, listed and read from day 1, with
an ETag (a 304 to a matching If-None-Match) and bytes that never change. Every day's run is compared with what the
server logged that day: each URL asked at most once; ``/p/old`` with its own validators (its page's on day 2, when it
first answers 301; none after: a moved URL keeps none), never the target's; the target never downloaded in full
again (it has validators of its own: asked conditionally or left to its own revisit); the run's ``fetched`` and
``not_modified`` the server's counts, its fetch log and WARC the server's log, and the export's versions of
``/p/new`` the one it has.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web
from test_harvest import settings_for
from warcio.archiveiterator import ArchiveIterator

from harvester import aharvest, arecrawl
from harvester.export import export_warc
from harvester.frontier import FrontierStore
from harvester.phases.cycles import Cycle
from harvester.phases.moved_answers import MovedAnswers
from harvester.phases.results import PhaseResult
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import Changes
from harvester.testing.schedule import run_at

LASTMOD = datetime(2026, 1, 1, 12, tzinfo=UTC)
PAGES = ("/p/1", "/p/2", "/p/old", "/p/new")


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def _page(title: str, text: str) -> str:
    return (f"<html><head><title>{title}</title></head><body><main><article><h1>{title}</h1><p>{text} "
            + "words of the product page " * 30 + "</p></article></main></body></html>")


BODIES = {path: _page(path, f"product {path}") for path in PAGES}
ETAGS = {path: f'"{abs(hash(body)):x}"' for path, body in BODIES.items()}


@dataclass
class Site:
    """The site of one test and its access log: (day, path, status, If-None-Match) per request."""

    day: int = 1
    log: list[tuple[int, str, int, str | None]] = field(default_factory=list)
    listed: tuple[str, ...] = ("/p/1", "/p/old", "/p/new")
    lastmods: dict[str, datetime] = field(default_factory=dict)
    """Sitemap lastmods that differ from ``LASTMOD``."""
    priorities: dict[str, float] = field(default_factory=dict)
    """Sitemap priorities (none given: the protocol's default)."""
    moving: tuple[str, ...] = ("/p/old",)
    """What answers 301 to ``/p/new`` from day 2."""
    target_read: int = 1
    """The day ``/p/new`` is first read: day 1 when listed, else day 2, through the redirect."""
    hold: Callable[[web.Request], object] | None = None
    """Awaited before a page is answered (``hold(request)``), to keep a request in flight."""

    def moved(self) -> bool:
        return self.day >= 2

    async def handle(self, request: web.Request) -> web.StreamResponse:
        origin = f"http://{request.host}"
        response: web.StreamResponse
        path = request.path
        if path == "/robots.txt":
            response = web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        elif path == "/sitemap.xml":
            entries = "".join(
                f"<url><loc>{origin}{p}</loc><lastmod>{self.lastmods.get(p, LASTMOD).isoformat()}</lastmod>"
                + (f"<priority>{self.priorities[p]}</priority>" if p in self.priorities else "") + "</url>"
                for p in self.listed)
            response = web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'))
        elif path not in BODIES:
            response = web.Response(status=404, text="not here")
        else:
            if self.hold is not None:
                await self.hold(request)  # type: ignore[misc]
            if path in self.moving and self.moved():
                response = web.Response(status=301, headers={"Location": origin + "/p/new"})
            elif request.headers.get("If-None-Match") == ETAGS[path]:
                response = web.Response(status=304, headers={"ETag": ETAGS[path]})
            else:
                response = web.Response(content_type="text/html", text=BODIES[path], headers={"ETag": ETAGS[path]})
        if path not in ("/robots.txt", "/sitemap.xml"):
            self.log.append((self.day, path, response.status, request.headers.get("If-None-Match")))
        return response

    def asked(self, day: int) -> list[tuple[str, int, str | None]]:
        return [(path, status, sent) for d, path, status, sent in self.log if d == day]


def _warc_requests(settings: Settings, path: Path) -> dict[str, list[str | None]]:
    """The WARC export read back with warcio: target URI -> the If-None-Match of each of its request records."""
    with FrontierStore.open(settings) as store, path.open("wb") as out:
        export_warc(store.iter_fetches(), out, filename=path.name, user_agents=store.request_user_agents())
    sent: dict[str, list[str | None]] = {}
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type == "request":
                sent.setdefault(record.rec_headers.get_header("WARC-Target-URI"), []).append(
                    record.http_headers.get_header("If-None-Match"))
    return {url: found for url, found in sent.items() if url.endswith(("/p/old", "/p/new"))}


def _problems(site: Site, settings: Settings, origin: str, n: int, changes: Changes) -> list[str]:
    """What day ``n``'s run did or reported that the server's log of that day contradicts (none: all true)."""
    asked = site.asked(n)
    problems = [f"day {n}: {path} asked {times} times: {asked}"  # each URL asked at most once a run
                for path, times in Counter(path for path, _, _ in asked).items() if times > 1]
    for path, status, sent in asked:
        if path == "/p/old" and sent != (ETAGS["/p/old"] if n <= 2 else None):  # its page's, then none
            problems.append(f"day {n}: /p/old asked with If-None-Match {sent} (/p/new's: {ETAGS['/p/new']})")
        if path == "/p/new" and n > site.target_read and (status, sent) != (304, ETAGS["/p/new"]):  # not in full
            problems.append(f"day {n}: /p/new answered {status} to If-None-Match {sent}")
    requests = (len(asked), sum(status == 304 for _, status, _ in asked))
    if (changes["fetched"], changes["not_modified"]) != requests:  # the counts are the server's
        problems.append(f"day {n}: fetched/not_modified {changes['fetched']}/{changes['not_modified']}, "
                        f"the server's {requests[0]}/{requests[1]}")
    with FrontierStore.open(settings) as store:
        logged = Counter((fetch.url.removeprefix(origin), fetch.status) for fetch in store.iter_fetches()
                         if fetch.run_id is not None and fetch.fetched_at >= run_at(n) and fetch.outcome != "unsent")
        versions = [page.fetched_at for page in store.iter_pages() if page.url == origin + "/p/new"]
    served = Counter((path, status) for path, status, _ in asked)
    if logged != served:  # the fetch log (the WARC's requests) is the server's
        problems.append(f"day {n}: fetch log {sorted(logged.items())}, the server's {sorted(served.items())}")
    if len(versions) != (n >= site.target_read):  # the export: /p/new's one version
        problems.append(f"day {n}: /p/new has {len(versions)} versions")
    return problems


@pytest.mark.parametrize("listed", [True, False], ids=["target_listed", "target_unlisted"])
async def test_a_moved_urls_revisits_ask_it_alone_with_its_own_validators(
    db_url: str, serve: Callable[..., object], clock: None, listed: bool, tmp_path: Path,
) -> None:
    """Days 3 to 8: ``/p/old`` comes due at its revisit, or as its sitemap lastmod moves (day 3), on days its
    target is not due. Each time it is asked once, unconditionally (a moved URL keeps no validators; never the
    target's ETag), and the 301 is all: ``/p/new``, whose copy the frontier holds with its ETag, is not
    downloaded in full. ``target_listed``: ``/p/new`` is in the sitemap and read from day 1; ``target_unlisted``:
    only the redirect leads to it, followed on day 2 (the frontier never saw it), its answer ``/p/new``'s own."""
    site = Site() if listed else Site(listed=("/p/1", "/p/old"), target_read=2)
    origin = await serve(site.handle)  # type: ignore[operator]
    settings = settings_for(db_url, **{"revisit.max_s": 2 * 86_400.0})
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False, per_host_limit=1)
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    problems = []
    for n in range(2, 9):
        site.day = n
        if n == 3:
            site.lastmods["/p/old"] = run_at(3, hour=1)
        CLOCK.travel_to(run_at(n))
        cycle = await arecrawl(settings, profile)
        problems += _problems(site, settings, origin, n, cycle.changes)
    assert not problems, "\n".join(problems)
    assert _warc_requests(settings, tmp_path / "all.warc.gz") == {  # the WARC's requests: the server's 200s and 304s
        origin + path: [sent for _, got, status, sent in site.log if got == path and status in (200, 304)]
        for path in ("/p/old", "/p/new")}
    revisits = [d for d, path, _, _ in site.log if path == "/p/old" and d > 2]
    assert len(revisits) >= 2 and any(d not in revisits for d, path, _, _ in site.log if path == "/p/new"), site.log


async def _two_days_limit_2(
    site: Site, serve: Callable[..., object], db_url: str,
) -> tuple[str, Settings, Cycle[PhaseResult]]:
    """Day 1's harvest and day 2's re-crawl of ``site`` with a per-host limit of 2, so two of its URLs are in flight
    at once: the origin, the settings and day 2's cycle."""
    origin = await serve(site.handle)  # type: ignore[operator]
    settings = settings_for(db_url)
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False, per_host_limit=2)
    with FrontierStore.open(settings, upgrade=True):
        pass
    CLOCK.travel_to(run_at(1))
    await aharvest(settings, profile)
    site.day = 2
    CLOCK.travel_to(run_at(2))
    return origin, settings, await arecrawl(settings, profile)


async def test_a_redirect_and_its_target_in_flight_at_once_ask_the_target_once(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """Per-host limit 2, day 2: ``/p/old`` (now a 301) and ``/p/new`` are both due and ranked first, so both are in
    flight at once. ``/p/new``'s own request is held until the server sees the harvester's next request after
    ``/p/old``'s answer: following the 301 then would ask ``/p/new`` a second time, its copy not yet in hand; the
    next request must be another URL's (``/p/1``, ranked last), and ``/p/new`` is asked once, conditionally."""
    site = Site(priorities={"/p/old": 1.0, "/p/new": 1.0, "/p/1": 0.0})
    old_answered = asyncio.Event()
    after_old = asyncio.Event()
    holding: list[str] = []

    async def hold(request: web.Request) -> None:
        if site.day != 2:
            return
        if old_answered.is_set():
            after_old.set()  # the harvester's next request after the redirect's answer
        if request.path == "/p/old":
            old_answered.set()
        elif request.path == "/p/new" and not holding:
            holding.append(request.path)
            await asyncio.wait_for(after_old.wait(), 60)

    site.hold = hold
    origin, settings, cycle = await _two_days_limit_2(site, serve, db_url)
    assert holding, site.asked(2)  # /p/new's own request was in flight beside the redirect
    problems = _problems(site, settings, origin, 2, cycle.changes)
    assert not problems, "\n".join(problems)
    with FrontierStore.open(settings) as store:
        info = store.url_info(origin + "/p/old")
    assert info is not None and (info.state, info.final_url, info.last_status) == ("done", origin + "/p/new", 301)


async def test_two_redirects_in_flight_to_one_target_never_seen_ask_it_once(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """Per-host limit 2, day 2: ``/p/old`` and ``/p/2`` both answer 301 to ``/p/new``, which no sitemap lists (the
    frontier has never seen it), and are both asked at once. The first redirect is followed; ``/p/new``'s answer to
    it is held until the server sees the harvester's next request after both 301s: following the second redirect
    then would ask ``/p/new`` again. The next request must be another URL's (``/p/1``), ``/p/new`` asked once, its
    answer recorded as its own, and both old URLs moved to it."""
    site = Site(listed=("/p/1", "/p/2", "/p/old"), moving=("/p/old", "/p/2"), target_read=2,
                priorities={"/p/old": 1.0, "/p/2": 1.0, "/p/1": 0.0})
    redirects: list[str] = []
    after_both = asyncio.Event()
    holding: list[str] = []

    async def hold(request: web.Request) -> None:
        if site.day != 2:
            return
        if len(redirects) == 2:
            after_both.set()  # the harvester's next request after both redirects were answered
        if request.path in site.moving:
            redirects.append(request.path)
        elif request.path == "/p/new" and not holding:
            holding.append(request.path)
            await asyncio.wait_for(after_both.wait(), 60)

    site.hold = hold
    origin, settings, cycle = await _two_days_limit_2(site, serve, db_url)
    assert holding and len(redirects) == 2, site.asked(2)  # /p/new was in flight, followed, beside the 2nd redirect
    problems = _problems(site, settings, origin, 2, cycle.changes)
    assert not problems, "\n".join(problems)
    with FrontierStore.open(settings) as store:
        moved = {path: store.url_info(origin + path) for path in site.moving}
    assert all(info is not None and (info.state, info.final_url, info.last_status) == ("done", origin + "/p/new", 301)
               for info in moved.values()), moved


async def test_a_redirect_whose_fetch_ended_without_an_answer_is_waited_for_a_bounded_time(tmp_path):
    """A redirect followed to a never-seen target registers the wait of every other redirect to it, cleared by its
    answer. Its fetch may end with none (a stop at its hop's slot, a lapsed lease, a cancel): the second redirect
    waited for ever (review). Now at most ``followed_wait_s``, and then it follows the redirect itself."""
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'm.db'}")
    target = "http://127.0.0.1:9/new"
    with FrontierStore.open(settings, upgrade=True) as store:
        moved = MovedAnswers(lambda url: url, store, followed_wait_s=0.2)
        assert not await moved.asked_alone("http://127.0.0.1:9/a", target)  # followed: its answer never comes
        decided = await asyncio.wait_for(moved.asked_alone("http://127.0.0.1:9/b", target), 60)
    assert decided is False  # not read: this redirect is followed in turn
