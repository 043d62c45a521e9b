"""The listing pages below a seed that answers 304 are still read when due, and their new items found that run.

A shop's home page (ETag, never changed) links its product list by a numbered link (``/list?page=1``, "All
products"): the list's first page, not the home page's next page. Through the CLI, on the harvester's clock at the
daily cadence (a harvest, then re-crawls 24 h apart, a few minutes either side), the list is asked every run
(conditionally once it has validators) and an item it adds overnight (of the shape the sitemap taught) is fetched
in the same run. Before, the home page's 304 passed the list over as a continuation of an unchanged page, for
``pagination_recheck_s`` (7 days).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

FILLER = "A sturdy product for daily use, made of leather and tested for years by people who walk a lot. " * 4


def product(title: str) -> bytes:
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><article><h1>{title}</h1>"
            f"<p>{FILLER}</p></article></body></html>").encode()


@dataclass
class Shop:
    """What the shop serves on ``day``, and what it was asked: (day, path, status, If-None-Match sent)."""

    day: int = 0
    asked: list[tuple[int, str, int, str | None]] = field(default_factory=list)

    def items(self) -> list[str]:
        return ["/item/1", "/item/2"] + (["/item/3"] if self.day >= 1 else [])

    def answer(self, request: Asked) -> Answer:
        html = {"Content-Type": "text/html; charset=utf-8"}
        status, headers, body = 404, {"Content-Type": "text/plain"}, b""
        if request.path == "/robots.txt":
            status, headers, body = robots_txt(request.origin)
        elif request.path == "/sitemap.xml":  # the items of day 0 (what teaches the site's detail shape)
            status, headers, body = sitemap(request.origin, {"/item/1": "2026-01-01", "/item/2": "2026-01-01"})
        elif request.path == "/":
            status, headers = 200, {**html, "ETag": '"home"'}
            body = b"<html><head><title>Shop</title></head><body><a href='/list?page=1'>All products</a></body></html>"
        elif request.path == "/list?page=1":
            links = "".join(f"<li><a href='{item}'>{item}</a></li>" for item in self.items())
            status, headers = 200, {**html, "ETag": f'"list-{len(self.items())}"'}
            body = f"<html><head><title>Products</title></head><body><ul>{links}</ul></body></html>".encode()
        elif request.path in self.items():
            status, headers, body = 200, html, product(request.path)
        sent = request.headers.get("if-none-match")
        if status == 200 and sent is not None and sent == headers.get("ETag"):
            status, body = 304, b""
        self.asked.append((self.day, request.path, status, sent))
        return status, headers, body


@pytest.fixture
def shop() -> Iterator[tuple[str, Shop]]:
    state = Shop()
    with threaded_site(state.answer) as origin:
        yield origin, state


@pytest.mark.parametrize("shift_s", [-300.0, 300.0])
def test_a_list_below_a_304_seed_is_read_every_day_and_its_new_item_fetched(
    shop: tuple[str, Shop], cli: Callable[..., str], tmp_path: Path, shift_s: float
) -> None:
    origin, site = shop
    CLOCK.travel_to(run_at(0))
    cli("harvest", f"{origin}/")
    for day in (1, 2):
        site.day = day
        CLOCK.travel_to(run_at(day, shift_s=shift_s))  # the daily run, a few minutes early or late
        cli("recrawl")
        asked = {path: (status, sent) for d, path, status, sent in site.asked if d == day}
        assert asked["/"] == (304, '"home"')  # control: the seed is unchanged
        # The list is asked again (its revisit is 12 h), conditionally: day 1 it changed, day 2 it did not.
        assert asked["/list?page=1"] == ((200, '"list-2"') if day == 1 else (304, '"list-3"'))
        if day == 1:
            assert asked["/item/3"][0] == 200  # found on the list and fetched in the same run
            cycle = json.loads(cli("status", "--json"))["last_cycle"]
            assert [url.removeprefix(origin) for url in cycle["new_urls"]] == ["/item/3"]
    cli("export", "--latest", "-o", str(tmp_path / "latest.jsonl"))
    latest = [json.loads(line) for line in (tmp_path / "latest.jsonl").read_text().splitlines()]
    assert sorted(row["url"].removeprefix(origin) for row in latest) == ["/item/1", "/item/2", "/item/3"]
