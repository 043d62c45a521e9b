"""No URL is done with for good while the site may still serve it: a page that failed every attempt of one run and
the duplicate of a page that went away are asked again by the daily re-crawl (docs/operations.md §4b).

A page that answered 500 on every attempt of a run is asked again the next daily run, then at a doubling interval
while it keeps failing; a newer sitemap lastmod makes it due at once and ``--refresh`` asks it too. Meanwhile its
last good version stays in ``export --latest``, marked failed. A URL kept as the duplicate of another is asked in
the run that finds the other gone, and the snapshot keeps the page under the surviving URL.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import pytest
from aiohttp import web
from test_harvest import settings_for

from harvester import aharvest, arecrawl
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.schedule import run_at

LASTMOD = datetime(2026, 1, 1, 12, tzinfo=UTC)


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


def _page(title: str, text: str) -> str:
    return (f"<html><head><title>{title}</title></head><body><main><article><h1>{title}</h1><p>{text} "
            + "words of the story " * 30 + "</p></article></main></body></html>")


def _site(pages: Callable[[], dict[str, tuple[int, str, str | None, str | None]]], log: list[tuple[int, str, int]],
          day: list[int], *, etags: bool = True, fail_once: set[str] | None = None) -> Callable[[web.Request], object]:
    """A one-off site: ``pages()`` → path -> (status, body, sitemap lastmod or None, changefreq or None); a path
    whose lastmod is None is not in the sitemap. Page answers carry an ETag (a 304 to a matching If-None-Match)
    unless ``etags`` is False, and are logged as (day, path, status). A path in ``fail_once`` answers its next
    request with a 503, then leaves the set."""

    async def handle(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        now = pages()
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nDisallow:\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            entries = "".join(
                f"<url><loc>{origin}{path}</loc><lastmod>{lastmod}</lastmod>"
                + (f"<changefreq>{freq}</changefreq>" if freq else "") + "</url>"
                for path, (_, _, lastmod, freq) in sorted(now.items()) if lastmod is not None)
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>'))
        if request.path not in now:
            return web.Response(status=404, text="not here")
        status, body, _, _ = now[request.path]
        etag = f'"{abs(hash(body)):x}"'
        if fail_once is not None and request.path in fail_once:
            fail_once.discard(request.path)
            status = 503
        elif status == 200 and etags and request.headers.get("If-None-Match") == etag:
            status = 304
        log.append((day[0], request.path, status))
        if status == 304:
            return web.Response(status=304, headers={"ETag": etag})
        if status != 200:
            return web.Response(status=status, text="no")
        return web.Response(content_type="text/html", text=body, headers={"ETag": etag} if etags else {})

    return handle


Pages = Callable[[], dict[str, tuple[int, str, str | None, str | None]]]


class Harvested(NamedTuple):
    """A site served by ``_site``, its frontier set up, and (unless asked not to) its day-1 harvest done."""

    origin: str
    settings: Settings
    profile: SiteProfile
    log: list[tuple[int, str, int]]


async def _first_harvest(serve: Callable[..., Any], db_url: str, pages: Pages, day: list[int], *,
                         harvest: bool = True, overrides: dict[str, Any] | None = None,
                         **site: Any) -> Harvested:
    """Serve ``pages`` (``_site``: ``site`` its keywords), set up the frontier with ``overrides``' settings and a
    profile of sitemaps only, and harvest day 1 (``harvest`` False: left to the test's own loop of days)."""
    log: list[tuple[int, str, int]] = []
    origin: str = await serve(_site(pages, log, day, **site))
    settings = settings_for(db_url, **(overrides or {}))
    profile = SiteProfile.build(seeds=(f"{origin}/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True):
        pass
    if harvest:
        CLOCK.travel_to(run_at(1))
        await aharvest(settings, profile)
    return Harvested(origin, settings, profile, log)


def _the_copy(harvested: Harvested, paths: tuple[str, ...] = ("/y/a", "/y/b")) -> str:
    """Which of ``paths`` the harvest kept as the duplicate of the other."""
    with FrontierStore.open(harvested.settings) as store:
        first = {path: store.url_info(harvested.origin + path) for path in paths}
    return next(path for path, info in first.items() if info is not None and info.state == "duplicate")


async def test_a_page_failed_in_one_run_is_asked_again_later_runs_and_its_recovery_is_kept(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    day = [1]

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        d = day[0]
        out: dict[str, tuple[int, str, str | None, str | None]] = {
            "/x/1": (200, _page("One", "one, as ever"), LASTMOD.isoformat(), None),
            # Broken on day 2 only; mended on day 3 in a new version, its lastmod moved on.
            "/x/2": (500 if d == 2 else 200, _page("Two", "two v1" if d < 3 else "two v2 after the outage"),
                     (LASTMOD if d < 3 else run_at(3, hour=1)).isoformat(), None),
            # Broken from day 2 on; its lastmod moves on day 6 (still broken).
            "/x/4": (200 if d == 1 else 500, _page("Four", "four v1"),
                     (LASTMOD if d < 6 else run_at(6, hour=1)).isoformat(), None),
        }
        return out

    origin, settings, profile, log = await _first_harvest(
        serve, db_url, pages, day, harvest=False,
        overrides={"politeness.backoff_base_s": 0.05, "politeness.max_attempts": 3})

    def asked(path: str) -> list[int]:
        return [d for d, p, _ in log if p == path]

    for n in range(1, 8):
        day[0] = n
        CLOCK.travel_to(run_at(n))
        if n == 1:
            await aharvest(settings, profile)
        else:
            await arecrawl(settings, profile, refresh=n == 7)
        if n == 2:
            with FrontierStore.open(settings) as store:
                latest = {page.url: page for page in store.iter_pages(latest=True)}
            # Failed for this run: its last good version is still handed over, marked failed.
            assert latest[f"{origin}/x/2"].url_state == "failed"
            assert b"two v1" in latest[f"{origin}/x/2"].body
        if n == 3:
            with FrontierStore.open(settings) as store:
                latest = {page.url: page for page in store.iter_pages(latest=True)}
            assert latest[f"{origin}/x/2"].url_state == "done"
            assert b"two v2 after the outage" in latest[f"{origin}/x/2"].body

    # Three attempts the day it broke, then once on day 3 (where it was mended).
    assert [(d, s) for d, p, s in log if p == "/x/2"][:4] == [(1, 200), (2, 500), (2, 500), (2, 500)]
    assert (3, 200) in [(d, s) for d, p, s in log if p == "/x/2"]
    # Still broken: asked again the next day, then after two days (day 5), not daily; its newer lastmod makes it
    # due at once (day 6, though its recheck was day 9), and a refresh asks it (day 7).
    assert asked("/x/4") == [1, 2, 2, 2, 3, 5, 6, 7]
    with FrontierStore.open(settings) as store:
        latest = {page.url: page for page in store.iter_pages(latest=True)}
        info = store.url_info(f"{origin}/x/4")
    assert info is not None and info.state == "failed"
    assert latest[f"{origin}/x/4"].url_state == "failed" and b"four v1" in latest[f"{origin}/x/4"].body


async def test_the_duplicate_of_a_page_that_went_away_is_asked_that_run_and_kept_in_the_snapshot(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    day = [1]
    same = _page("Same", "the very same bytes at two addresses")
    gone: list[str] = []

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        out: dict[str, tuple[int, str, str | None, str | None]] = {
            path: (200, same, LASTMOD.isoformat(), "weekly") for path in ("/y/a", "/y/b")}
        out["/y/z"] = (200, _page("Other", "another page"), LASTMOD.isoformat(), "weekly")
        for path in gone:  # the page kept of the two answers 410 and leaves the sitemap
            out[path] = (410, "", None, None)
        return out

    origin, settings, profile, log = await _first_harvest(serve, db_url, pages, day)
    with FrontierStore.open(settings) as store:
        states = {path: store.url_info(origin + path) for path in ("/y/a", "/y/b")}
    kept = [path for path, info in states.items() if info is not None and info.state == "done"]
    copies = [path for path, info in states.items() if info is not None and info.state == "duplicate"]
    assert len(kept) == len(copies) == 1, states

    gone.append(kept[0])
    day[0] = 2
    CLOCK.travel_to(run_at(2))
    await arecrawl(settings, profile)
    # Weekly pages are not due on day 2: the copy is asked because the page it copied went away.
    assert (2, kept[0], 410) in log
    assert (2, copies[0], 200) in log
    with FrontierStore.open(settings) as store:
        latest = {page.url: page for page in store.iter_pages(latest=True)}
    assert f"{origin}{copies[0]}" in latest and latest[f"{origin}{copies[0]}"].url_state == "done"
    assert latest[f"{origin}{copies[0]}"].body == same.encode()
    assert f"{origin}{kept[0]}" not in latest

    day[0] = 3
    CLOCK.travel_to(run_at(3))
    await arecrawl(settings, profile)
    with FrontierStore.open(settings) as store:
        latest = {page.url: page for page in store.iter_pages(latest=True)}
    assert f"{origin}{copies[0]}" in latest


async def test_a_duplicate_asked_at_its_revisit_is_asked_conditionally_and_stays_a_copy(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """A copy's own revisit costs a 304, not a download, and the answer leaves the snapshot as it was: one page for
    the two addresses, held by the URL that held it."""
    day = [1]
    same = _page("Same", "the very same bytes at two addresses")

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        return {path: (200, same, LASTMOD.isoformat(), "daily") for path in ("/y/a", "/y/b")}

    harvested = await _first_harvest(serve, db_url, pages, day)
    origin, settings, profile, log = harvested
    copy = _the_copy(harvested)

    for n in (2, 3):
        day[0] = n
        CLOCK.travel_to(run_at(n))
        await arecrawl(settings, profile)
        with FrontierStore.open(settings) as store:
            info = store.url_info(origin + copy)
            latest = [page.url for page in store.iter_pages(latest=True)]
        assert info is not None and info.state == "duplicate", (n, info)
        assert len(latest) == 1 and latest[0] != origin + copy, latest
    asked = [status for d, path, status in log if path == copy and d > 1]
    assert asked and set(asked) == {304}, log


async def test_a_copy_without_validators_stays_the_copy_of_the_page_it_copies(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """On a site without validators a copy's revisit reads the same content again, while its holder is due too: the
    copy stays the copy and stores nothing (they swapped roles at every revisit, a version stored at each swap)."""
    day = [1]
    same = _page("Same", "the very same bytes at two addresses")

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        return {path: (200, same, LASTMOD.isoformat(), "daily") for path in ("/y/a", "/y/b")}

    origin, settings, profile, log = await _first_harvest(serve, db_url, pages, day, harvest=False, etags=False)
    seen = []
    for n in range(1, 5):
        day[0] = n
        CLOCK.travel_to(run_at(n))
        await (aharvest if n == 1 else arecrawl)(settings, profile)
        with FrontierStore.open(settings) as store:
            states = {path: info.state for path in ("/y/a", "/y/b") if (info := store.url_info(origin + path))}
            versions = len(list(store.iter_pages()))
        seen.append((states, versions))
    assert [path for day_n, path, status in log if path.startswith("/y/") and day_n > 1], log  # both asked again
    assert all(states == seen[0][0] for states, _ in seen), seen
    assert sorted(seen[0][0].values()) == ["done", "duplicate"], seen
    assert all(versions == 1 for _, versions in seen), seen


async def test_a_copy_whose_revisit_failed_once_is_still_a_copy_and_the_page_stays(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """A copy's revisit answered 503, then its retry: the retry asks in full (a 304 to the validators it kept would
    make it DONE with no stored page of its own), and it stays the copy; the snapshot still holds the page."""
    day = [1]
    same = _page("Same", "the very same bytes at two addresses")
    fail_once: set[str] = set()

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        return {path: (200, same, LASTMOD.isoformat(), "daily") for path in ("/y/a", "/y/b")}

    harvested = await _first_harvest(serve, db_url, pages, day, overrides={"politeness.backoff_base_s": 0.05},
                                     fail_once=fail_once)
    origin, settings, profile, log = harvested
    copy = _the_copy(harvested)
    fail_once.add(copy)
    day[0] = 2
    CLOCK.travel_to(run_at(2))
    await arecrawl(settings, profile)
    assert [status for d, path, status in log if path == copy and d == 2] == [503, 200], log
    with FrontierStore.open(settings) as store:
        info = store.url_info(origin + copy)
        latest = [page.url for page in store.iter_pages(latest=True)]
    assert info is not None and info.state == "duplicate", info
    assert len(latest) == 1, latest


async def test_a_copy_read_while_its_holder_is_revisited_is_its_duplicate_once_the_holder_answers_304(
    db_url: str, serve: Callable[..., object], clock: None,
) -> None:
    """Day 1 /y/a is read; day 2 /y/b (the same article) is new and read while /y/a is being revisited, which then
    answers 304 (a holder due vouches for nothing when /y/b is read). The confirmed /y/a keeps the content (the
    first read, the lowest id) and /y/b is its duplicate in that run: counted as no news, out of the snapshot.
    Both stayed DONE, both counted new, both in ``export --latest``; day 3's 304 of /y/b changed nothing."""
    day = [1]
    same = _page("Same", "the very same bytes at two addresses")

    def pages() -> dict[str, tuple[int, str, str | None, str | None]]:
        paths = ("/y/a", "/y/b") if day[0] >= 2 else ("/y/a",)
        return {path: (200, same, LASTMOD.isoformat(), "daily") for path in paths}

    origin, settings, profile, log = await _first_harvest(serve, db_url, pages, day)
    for n in (2, 3):
        day[0] = n
        CLOCK.travel_to(run_at(n))
        await arecrawl(settings, profile)
        with FrontierStore.open(settings) as store:
            a, b = (store.url_info(origin + path) for path in ("/y/a", "/y/b"))
            latest = [page.url for page in store.iter_pages(latest=True)]
            cycle = store.last_cycle()
            assert cycle is not None
            counts = store.cycle_counts(cycle["id"])
        assert a is not None and b is not None
        assert (a.state, b.state, b.duplicate_of) == ("done", "duplicate", a.id), (n, a, b)
        assert latest == [f"{origin}/y/a"], (n, latest)
        assert counts["new"] == 0 and counts["new_urls"] == [], (n, counts)
    assert [(d, p, s) for d, p, s in log if p == "/y/a" and d == 2] == [(2, "/y/a", 304)], log
