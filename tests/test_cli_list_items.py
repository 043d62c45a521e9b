"""A shop with no sitemap and no feed: its paginated list is the only way to its products, whatever their URLs'
shape (the stranger's black-box test of stop 43: ``/item/1`` to ``/item/9`` were never asked, and the run said
"new: 0" with no problem). Through the CLI, at the daily cadence on the harvester's clock (``CLOCK.travel_to``,
what ``HARVESTER_NOW`` sets), against a real server whose own log says what was asked."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, threaded_site

PER_PAGE = 8


def html(title: str, body: str) -> bytes:
    return (f"<!doctype html><html><head><title>{title}</title></head><body><nav><a href='/'>Home</a> "
            "<a href='/pages/shipping'>Shipping</a> <a href='/pages/returns'>Returns</a> "
            "<a href='/pages/contact'>Contact</a></nav><main><article>"
            f"<h1>{title}</h1>{body}<p>{'A product worth describing at some length. ' * 40}</p></article></main>"
            "</body></html>").encode()


@pytest.fixture
def shop() -> Iterator[Callable[[list[str]], tuple[str, Counter[str]]]]:
    """``shop(items)`` → (origin, every path asked): home → /shop/ → a list of ``items`` (paths), 8 a page,
    ``?page=N`` with rel=next; robots.txt and every sitemap 404."""
    sites: list[Iterator[str]] = []

    def start(items: list[str]) -> tuple[str, Counter[str]]:
        asked: Counter[str] = Counter()

        def respond(request: Asked) -> Answer:
            asked[request.path] += 1
            path, _, query = request.path.partition("?")
            if path == "/":
                return 200, {"Content-Type": "text/html"}, html("Home", "<a href='/shop/'>Shop</a>")
            if path == "/shop/":
                number = int(query.removeprefix("page=") or 1) if query.startswith("page=") or not query else 0
                chunk = items[(number - 1) * PER_PAGE:number * PER_PAGE] if number else []
                links = "".join(f"<li><a href='{item}'>{item}</a></li>" for item in chunk)
                after = (f"<a rel='next' href='/shop/?page={number + 1}'>next</a>"
                         if number * PER_PAGE < len(items) else "")
                return 200, {"Content-Type": "text/html"}, html(f"Shop {number}", f"<ul>{links}</ul>{after}")
            if request.path in items:
                return 200, {"Content-Type": "text/html"}, html(f"Product {request.path}", "for sale")
            return 404, {"Content-Type": "text/plain"}, b"not found"

        site = threaded_site(respond)
        sites.append(site)
        return site.__enter__(), asked  # type: ignore[attr-defined]

    yield start
    for site in sites:
        site.__exit__(None, None, None)  # type: ignore[attr-defined]


@pytest.mark.parametrize("items", [
    [f"/item/{n}" for n in range(1, 10)],  # single-digit ids: the last page holds one
    [f"/item/{n}" for n in range(1, 25)],  # 1-9 beside 10-24
    [f"/p/{c}{n}" for c in "ab" for n in range(1, 6)],  # short ids of a letter and a digit
    [f"/product.php?id={n}" for n in range(1, 12)],  # ids in the query
    [f"/index.php?route=product&product_id={n}" for n in range(1, 12)],  # an id key beside another pair
], ids=["1-9", "1-24", "short", "query-id", "query-id-and-pair"])
def test_every_item_of_a_shop_list_is_harvested_the_first_day(
    shop: Callable[[list[str]], tuple[str, Counter[str]]], cli: Callable[..., str], items: list[str]
) -> None:
    origin, asked = shop(items)
    CLOCK.travel_to(run_at(0, hour=3))
    out = cli("harvest", f"{origin}/")
    assert [item for item in items if asked[item] != 1] == [], out
    assert f"new: {len(items)}" in " ".join(out.split()), out
    assert not any(asked[f"/pages/{name}"] for name in ("shipping", "returns", "contact"))  # the menu: words
    CLOCK.travel_to(run_at(1, hour=3))
    asked.clear()
    again = cli("recrawl")
    assert "new: 0" in " ".join(again.split()), again  # nothing was left for the next day to find


def test_a_list_none_of_whose_links_is_taken_says_so(
    shop: Callable[[list[str]], tuple[str, Counter[str]]], cli: Callable[..., str]
) -> None:
    """Products named by one word each: no shape says they are items (menus are words too). The run cannot take
    them, and says so, instead of a clean "new: 0"."""
    items = [f"/goods/{word}" for word in ("hat", "cap", "scarf", "glove", "sock", "boot", "belt", "tie", "coat")]
    origin, asked = shop(items)
    CLOCK.travel_to(run_at(0, hour=3))
    out = " ".join(cli("harvest", f"{origin}/").split())
    assert not any(asked[item] for item in items)
    assert "Discovery problems" in out and "none taken for a page to harvest" in out and "detail_patterns" in out, out
