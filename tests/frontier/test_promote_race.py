"""A feed naming as a detail a page the listing crawl stores as a listing page at the same moment (PostgreSQL,
whose writers run side by side): the page is a detail, queued as one, whichever transaction stored it.

``Discovered._promote`` makes a stored listing page that a feed or sitemap names a detail, judging the rows the
upsert's lookup found. A listing crawl's completion that stored the page between that lookup and the upsert's
write was not among them: the write found the row (it waited for that commit) and kept its kind, and the page
stayed a listing page, never fetched as a detail nor counted new (test_feed_names_a_listing, 1 run in a loaded
suite: new ['/p/1', '/p/2'] without '/p/3'). The test stores the listing page in that window itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from harvester.frontier import FrontierStore
from harvester.frontier.discovered import Discovered
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

HOST = "https://shop.test"
FEED = f"feed:{HOST}/feed.rss"
LISTING = f"listing:{HOST}/list?page=2"


@pytest.fixture
def stores(migrated_pg_url: str) -> Iterator[tuple[FrontierStore, FrontierStore]]:
    """Two stores on one PostgreSQL database: the feed's writer and the listing crawl's."""
    with FrontierStore.open(Settings(database_url=migrated_pg_url), upgrade=True) as feed, \
            FrontierStore.open(Settings(database_url=migrated_pg_url)) as listing:
        yield feed, listing


def test_a_listing_page_stored_while_a_feed_names_it_a_detail_becomes_a_detail(
    stores: tuple[FrontierStore, FrontierStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    feed, listing = stores
    # The host and both sources exist already (as in a run, where the seed and the list were read first): the two
    # writers below then meet only at the page's row.
    listing.add_discovered([DiscoveredUrl(url=f"{HOST}/p/1", kind=UrlKind.LISTING, source=LISTING)])
    feed.add_discovered([DiscoveredUrl(url=f"{HOST}/p/0", kind=UrlKind.DETAIL, source=FEED)])
    page = f"{HOST}/p/3"

    looked_up = Discovered._known_rows
    stored_between: list[bool] = []

    def lookup_then_the_listing_crawl_stores_the_page(self, conn, hids, chunk, *args, **kwargs):
        found = looked_up(self, conn, hids, chunk, *args, **kwargs)
        if not stored_between and any(m.path == "/p/3" for m in chunk):
            stored_between.append(True)
            # The listing crawl's completion, committed in its own transaction after this lookup and before the
            # feed's write (a thread: this one's transaction is open and waits for nothing of it).
            other = threading.Thread(target=listing.add_discovered,
                                     args=([DiscoveredUrl(url=page, kind=UrlKind.LISTING, source=LISTING)],))
            other.start()
            other.join(60)
            assert not other.is_alive(), "control: the listing crawl's write was not held by the feed's"
        return found

    monkeypatch.setattr(Discovered, "_known_rows", lookup_then_the_listing_crawl_stores_the_page)
    feed.add_discovered([DiscoveredUrl(url=page, kind=UrlKind.DETAIL, source=FEED)])
    monkeypatch.undo()

    assert stored_between, "control: the listing crawl stored the page between the feed's lookup and its write"
    info = feed.url_info(page)
    assert info is not None
    assert info.kind == UrlKind.DETAIL.value, info
    claimed = feed.claim("w", hosts=[HOST], per_host=10, lease_s=60, kinds=(UrlKind.DETAIL,))
    assert page in {c.url for c in claimed}  # queued as a detail: extraction asks it this run
