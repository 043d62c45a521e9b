"""Product pages a feed names, linked from a listing page by a link that looks like pagination, are details.

A shop's list (``/list?page=1``, rel=next ``/list?page=2``) links its products ``/p/1``, ``/p/2`` (page 2:
``/p/3``): shaped like numbered pages, so the listing crawl reads them as listing pages when it meets them before
the feed taught the site's shape; its RSS feed names all three. A URL's kind was written once, when first stored:
the feed's entries changed nothing, the three products were never counted new, never in ``export --latest``, and
an edit to one was stored as a listing version, not counted changed. Now a feed (or sitemap) entry naming a stored
listing page as a detail makes it one, fetched as one in the same run.

Through the CLI, against a real server on loopback, on SQLite and PostgreSQL, in both orders of the feed and the
listing crawl, each forced by the server holding one answer until the other side has asked what it needs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from daily_cli import cli_on

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

HELD_S = 120.0
"""Most a held answer waits for the other side (a generous bound: the order is then not the one forced, and the
test says so)."""
PRODUCTS = ("/p/1", "/p/2", "/p/3")
FILLER = "is a sturdy product for daily use, made of leather and tested for years by people who walk a lot. " * 5


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


@dataclass
class Shop:
    """The shop of one test; ``hold`` is the path whose answer waits for ``until`` (set when ``trigger`` is asked)."""

    origin: str = ""
    day: int = 0
    hold: str | None = None
    trigger: str | None = None
    until: threading.Event = field(default_factory=threading.Event)
    asked: list[tuple[int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def product(self, path: str) -> bytes:
        title = f"Boot model {path.rsplit('/', 1)[1]}" + (" (new colours)" if path == "/p/1" and self.day >= 1 else "")
        return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><nav><a href='/'>Home</a>"
                f"</nav><article><h1>{title}</h1><p>{title} {FILLER}</p></article></body></html>").encode()

    def answer(self, request: Asked) -> Answer:
        path = request.path
        with self.lock:
            self.asked.append((self.day, path))
        if path == self.trigger:
            self.until.set()
        if path == self.hold:
            self.until.wait(HELD_S)
        html = {"Content-Type": "text/html; charset=utf-8"}
        links = lambda paths: "".join(f"<li><a href='{p}'>{p}</a></li>" for p in paths)  # noqa: E731
        if path == "/robots.txt":
            return robots_txt(request.origin)
        if path == "/":
            return 200, html, (b"<html><head><title>Shop</title><link rel='alternate' type='application/rss+xml'"
                               b" href='/feed.rss'></head><body><a href='/list?page=1'>All products</a></body></html>")
        if path == "/list?page=1":
            return 200, html, (f"<html><head><title>Products</title><link rel='next' href='/list?page=2'></head><body>"
                               f"<ul>{links(PRODUCTS[:2])}</ul><a rel='next' href='/list?page=2'>next</a>"
                               "</body></html>").encode()
        if path == "/list?page=2":
            return 200, html, f"<html><head><title>Products 2</title></head><body><ul>{links(PRODUCTS[2:])}</ul>" \
                              "</body></html>".encode()
        if path == "/feed.rss":
            items = "".join(f"<item><title>Boot</title><link>{self.origin}{p}</link></item>" for p in PRODUCTS)
            return 200, {"Content-Type": "application/rss+xml"}, (
                f"<?xml version='1.0'?><rss version='2.0'><channel><title>Shop</title><link>{self.origin}/</link>"
                f"{items}</channel></rss>").encode()
        if path in PRODUCTS:
            return 200, html, self.product(path)
        return 404, {"Content-Type": "text/plain"}, b""

    def first(self, path: str) -> int:
        return next(i for i, (_, asked) in enumerate(self.asked) if asked == path)


@pytest.fixture
def shop() -> Iterator[Shop]:
    state = Shop()
    with threaded_site(state.answer) as origin:
        state.origin = origin
        yield state


def latest(cli: Callable[..., str], tmp_path: Path, origin: str) -> dict[str, tuple[str, str | None]]:
    out = tmp_path / "latest.jsonl"
    cli("export", "--latest", "-o", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {row["url"].removeprefix(origin): (row["kind"], row.get("title")) for row in rows}


def new_urls(cli: Callable[..., str], origin: str, key: str = "new_urls") -> list[str]:
    cycle = json.loads(cli("status", "--json"))["last_cycle"]
    return sorted(url.removeprefix(origin) for url in cycle[key])


def test_a_feed_naming_listing_pages_read_first_makes_them_details_the_same_run(
    shop: Shop, db_url: str, tmp_path: Path, clock: None
) -> None:
    """The feed's answer is held until the listing crawl has read ``/p/2`` (as a listing page): the feed's
    entries then name URLs stored as listing pages. They are fetched again as details in the run, counted new,
    in the snapshot with their titles; the next day's edit of one is counted changed."""
    shop.hold, shop.trigger = "/feed.rss", "/p/2"
    cli = cli_on(db_url, wide=False)
    cli("db", "upgrade")
    CLOCK.travel_to(run_at(0))
    cli("harvest", f"{shop.origin}/", "--per-host", "4")
    assert shop.until.is_set(), "control: the listing crawl asked /p/2 while the feed was held"
    assert new_urls(cli, shop.origin) == list(PRODUCTS)
    assert latest(cli, tmp_path, shop.origin) == {p: ("detail", f"Boot model {p[-1]}") for p in PRODUCTS}
    day0 = [path for day, path in shop.asked if day == 0]
    # Read as listing pages, then as details once; /p/3 too when the crawl reached it before the feed's entries.
    assert day0.count("/p/1") == 2 and day0.count("/p/2") == 2 and 1 <= day0.count("/p/3") <= 2, day0
    cli("db", "check")  # queue_counts agree with the queue the switch moved (exit 1 otherwise)

    shop.day, shop.hold = 1, None
    CLOCK.travel_to(run_at(1))
    cli("recrawl")
    assert new_urls(cli, shop.origin, "changed_urls") == ["/p/1"]
    assert latest(cli, tmp_path, shop.origin)["/p/1"] == ("detail", "Boot model 1 (new colours)")


def test_a_feed_read_first_makes_the_listed_products_details(
    shop: Shop, db_url: str, tmp_path: Path, clock: None
) -> None:
    """The list's answer is held until ``/p/1`` is asked, which only a detail found in the feed can be: the
    feed's shapes are known before the list is read. The products are details, each asked once, counted new."""
    shop.hold, shop.trigger = "/list?page=1", "/p/1"
    cli = cli_on(db_url, wide=False)
    cli("db", "upgrade")
    CLOCK.travel_to(run_at(0))
    cli("harvest", f"{shop.origin}/", "--per-host", "4")
    assert shop.until.is_set(), "control: /p/1 was asked while the list was held"
    assert shop.first("/p/1") < shop.first("/list?page=2")
    assert new_urls(cli, shop.origin) == list(PRODUCTS)
    assert latest(cli, tmp_path, shop.origin) == {p: ("detail", f"Boot model {p[-1]}") for p in PRODUCTS}
    assert sorted(path for _, path in shop.asked if path in PRODUCTS) == list(PRODUCTS)
    cli("db", "check")



@dataclass
class Catalogue:
    """A shop without feed or sitemap on day 0 (its list read, ``/p/N`` stored as listing pages); on day 1 a
    sitemap names the three products."""

    day: int = 0
    asked: list[tuple[int, str]] = field(default_factory=list)

    def answer(self, request: Asked) -> Answer:
        self.asked.append((self.day, request.path))
        html = {"Content-Type": "text/html; charset=utf-8"}
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml" and self.day >= 1:
            return sitemap(request.origin, dict.fromkeys(PRODUCTS, "2026-01-01"))
        if request.path == "/":
            return 200, html, b"<html><head><title>Shop</title></head><body><a href='/list?page=1'>All</a></body>"
        if request.path == "/list?page=1":
            items = "".join(f"<li><a href='{p}'>{p}</a></li>" for p in PRODUCTS)
            return 200, html, f"<html><head><title>Products</title></head><body><ul>{items}</ul></body></html>".encode()
        if request.path in PRODUCTS:
            return 200, html, Shop().product(request.path)
        return 404, {"Content-Type": "text/plain"}, b""


def test_a_sitemap_naming_yesterdays_listing_pages_makes_them_details_but_not_a_seed(
    db_url: str, tmp_path: Path, clock: None
) -> None:
    """Day 0 stores ``/p/1..3`` as listing pages (no feed, no sitemap). Day 1's sitemap names them: ``/p/1`` and
    ``/p/2`` are details, fetched and counted new that run; ``/p/3``, a seed, stays a listing page."""
    state = Catalogue()
    with threaded_site(state.answer) as origin:
        cli = cli_on(db_url, wide=False)
        cli("db", "upgrade")
        CLOCK.travel_to(run_at(0))
        cli("harvest", f"{origin}/", f"{origin}/p/3")
        assert latest(cli, tmp_path, origin) == {}, "control: day 0 stored the products as listing pages"
        state.day = 1
        CLOCK.travel_to(run_at(1))
        cli("recrawl")
        assert (1, "/sitemap.xml") in state.asked, "control: day 1 read the sitemap"
        assert new_urls(cli, origin) == ["/p/1", "/p/2"]
        assert latest(cli, tmp_path, origin) == {p: ("detail", f"Boot model {p[-1]}") for p in PRODUCTS[:2]}
        cli("db", "check")
