"""Host specifications and the deterministic site model behind each test-web host (which pages exist, where
they are published, what changed on which day), plus the demo site.

Pure state: no sockets, no bytes rendered here (render.py turns the model into responses), so the parent of
a process-mode web can keep an identical model as ground truth. Never reads the clock or global randomness.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "BASE_EPOCH",
    "DAY_S",
    "LISTING_FACETS",
    "HostChange",
    "HostSpec",
    "PageModel",
    "RobotsSpec",
    "SiteModel",
    "demo_site",
    "small_site",
]

BASE_EPOCH = 1_767_571_200  # 2026-01-05T00:00:00Z: day 0 of every test web
"""Wall-clock time of day 0; day ``d`` is ``BASE_EPOCH + d * DAY_S``. Fixed so validators are reproducible."""

DAY_S = 86_400

TOPICS = ("world", "science", "culture", "business", "sport", "technology", "travel", "health")

_WORD_TEXT = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no will more about up out who them some "
    "could what into time only new other then people may these like than first any now over such our made way "
    "after years most where state also very between through before city water local report council market "
    "research season project result change school system service family community policy energy village harbour "
    "winter summer river station museum library festival bridge garden railway budget election committee hospital "
    "weather forecast farmers rainfall harvest orchard vineyard bakery quarter archive minister plan study team "
    "survey review record history island coast valley mountain forest province growth price trade export import "
    "bank loan tax vote court judge police fire road traffic transport science data model theory experiment "
    "sample measure signal network software hardware device battery solar wind grid storage carbon climate ocean "
    "ice glacier species habitat bird insect plant seed soil "
)
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())

DETAIL_SHAPES = (
    "/articles/{slug}-{id}",
    "/news/{yyyy}/{mm}/{slug}-{id}.html",
    "/story/{id}/{slug}",
    "/blog/{yyyy}/{mm}/{dd}/{slug}/",
    "/p/{id}",
    "/{topic}/{slug}-{id}",
)
"""Detail URL shapes; each host uses two of them, so no single hard-coded rule classifies every host."""

DISALLOWED_PREFIX = "/members/"
"""Where sitemap-listed but robots-disallowed details live (robots.txt disallows it when any exist)."""


@dataclass(frozen=True)
class RobotsSpec:
    """robots.txt of one host. ``body`` overrides the generated text (``{origin}`` in it becomes the host's origin);
    ``status`` 3xx redirects to ``redirect_to``."""

    status: int = 200
    disallow: tuple[str, ...] = ()
    crawl_delay: float | None = None
    request_rate: str | None = None
    sitemaps: bool = True
    redirect_to: str | None = None
    body: str | None = None
    agent_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSpec:
    """One host of the test web. Fractions are of the detail pages (sitemap_only + feed_only + listing_only +
    disallowed_in_sitemap + facet_only must stay below 1; the rest is published in sitemap, feed and listings alike).

    Feeds list the newest ``feed_entries`` entries, as real feeds do (WordPress, Drupal and jekyll-feed default
    to 10, Ghost 15, Blogger 25): the RSS feed ordered by publication date (WordPress), the Atom feed by
    ``updated`` (an edited entry moves to the top). Older entries are reachable per ``feed_paging``: RFC 5005
    paged feeds (``"next"``: ``?page=N`` linked by ``rel="next"``, as Blogger does), RFC 5005 archived feeds
    (``"archive"``: fixed ``?archive=N`` documents chained by ``prev-archive``), or not at all (``"none"``).
    ``sitemap_lastmod="published"`` makes the sitemaps' lastmod a publication date that never moves on edits, as
    some CMS plugins do: a lastmod that does not announce changes.
    ``facets`` gives every listing page a shop's filter links (``?color=``, ``?size=``, ``?brand=``: one page per
    value, listing the topic's items with it) and presentation links (``?sort=price``, ``?view=grid``,
    ``?per_page=48``, answered with the plain listing); ``facet_only`` details are listed by the filter pages only
    (no sitemap, feed or plain listing), so only a crawl of the filters finds them.
    """

    name: str
    pages: int = 100
    latency_s: float = 0.0
    robots: RobotsSpec = field(default_factory=RobotsSpec)
    sitemap_children: int = 2
    sitemap_only: float = 0.2
    feed_only: float = 0.1
    listing_only: float = 0.1
    disallowed_in_sitemap: float = 0.05
    listing_page_size: int = 20
    feeds: tuple[str, ...] = ("rss", "atom")
    feed_entries: int = 10
    feed_paging: Literal["next", "archive", "none"] = "next"
    sitemap_lastmod: Literal["modified", "published"] = "modified"
    traps: bool = False
    facets: bool = False
    facet_only: float = 0.0
    sitemap_redirect: bool = False
    """``/sitemap.xml`` answers 301 to ``/sitemap_index.xml`` (with ``RobotsSpec(status=404)``, what a crawler
    probing the known paths meets on many WordPress sites)."""
    hostile: bool = False
    max_in_flight: int | None = None
    port: int = 0
    """The port to serve on (127.0.0.1); 0: any free one. ``harvester demo`` asks for the ports it had the last
    time, so its re-crawl meets the same hosts."""
    retry_after_s: float = 1.0
    page_bytes: tuple[int, int] = (5_000, 20_000)
    link_spellings: bool = True
    change_rates: tuple[tuple[float, float], ...] = ()
    """(share of pages, chance a day that one changes) classes, e.g. ((0.1, 0.5), (0.9, 0.02)): pages change at
    known per-page rates (a page's class follows from its id) instead of ``advance``'s ``changed`` fraction."""

    def __post_init__(self) -> None:
        shares = self.sitemap_only + self.feed_only + self.listing_only + self.disallowed_in_sitemap + self.facet_only
        if shares > 1.0 + 1e-9:
            raise ValueError(f"host {self.name!r}: coverage fractions add up to {shares:.2f} > 1")
        if self.pages < 0 or self.sitemap_children < 0 or self.listing_page_size < 1 or self.feed_entries < 1:
            raise ValueError(
                f"host {self.name!r}: pages/sitemap_children must be >= 0, listing_page_size and feed_entries >= 1"
            )
        if self.feed_paging not in ("next", "archive", "none"):
            raise ValueError(f"host {self.name!r}: feed_paging must be 'next', 'archive' or 'none'")
        if self.facet_only and not self.facets:
            raise ValueError(f"host {self.name!r}: facet_only needs facets=True (filter pages to list them)")
        if self.sitemap_lastmod not in ("modified", "published"):
            raise ValueError(f"host {self.name!r}: sitemap_lastmod must be 'modified' or 'published'")
        if not self.name or "/" in self.name:
            raise ValueError(f"host name {self.name!r} must be non-empty and contain no '/'")


# Coverage classes: where a detail page is published.
ALL = "all"
SITEMAP_ONLY = "sitemap"
FEED_ONLY = "feed"
LISTING_ONLY = "listing"
DISALLOWED = "disallowed"  # in the sitemap only, under DISALLOWED_PREFIX
FACET_ONLY = "facet"  # on the filter pages of its topic's listing only (HostSpec.facets)


@dataclass(slots=True)
class PageModel:
    """One detail page. ``version`` bumps when its main text changes; ``gone_day`` set means it answers 410."""

    id: int
    slug: str
    path: str
    coverage: str
    topic: str
    published_ts: int
    modified_ts: int
    created_day: int
    version: int = 0
    style: int = 0
    """Bumps when the page is restyled: its bytes change outside the main text (its version stays)."""
    gone_day: int | None = None
    size: int = 10_000

    @property
    def live(self) -> bool:
        return self.gone_day is None

    @property
    def in_sitemap(self) -> bool:
        return self.coverage in (ALL, SITEMAP_ONLY, DISALLOWED)

    @property
    def in_feed(self) -> bool:
        return self.coverage in (ALL, FEED_ONLY)

    @property
    def in_listing(self) -> bool:
        return self.coverage in (ALL, LISTING_ONLY)

    @property
    def in_facets(self) -> bool:
        """Listed by the filter pages of its topic (on a host with ``facets``)."""
        return self.coverage in (ALL, LISTING_ONLY, FACET_ONLY)


@dataclass(frozen=True)
class HostChange:
    """What one ``advance`` did to one host, as page paths; ``moved`` holds (old path, new path) pairs."""

    changed: tuple[str, ...] = ()
    new: tuple[str, ...] = ()
    gone: tuple[str, ...] = ()
    moved: tuple[tuple[str, str], ...] = ()
    restyled: tuple[str, ...] = ()
    returned: tuple[str, ...] = ()
    """Pages gone on an earlier day that answer again today, in a new version."""


class SiteModel:
    """The pages of one host and their history; everything derives from (seed, host name, day)."""

    def __init__(self, spec: HostSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.day = 0
        self.last_change = HostChange()
        rng = self._rng("host")
        self.topics: tuple[str, ...] = tuple(rng.sample(TOPICS, 4))
        self.shapes: tuple[str, ...] = tuple(rng.sample(DETAIL_SHAPES, 2))
        self.pages: list[PageModel] = []
        self.by_path: dict[str, PageModel] = {}
        self.moved_from: dict[str, str] = {}
        """Old path → new path of pages that moved: the old path answers 301 (chains stay chains)."""
        self.initial_pages = spec.pages
        n = spec.pages
        counts = [
            (DISALLOWED, round(n * spec.disallowed_in_sitemap)),
            (SITEMAP_ONLY, round(n * spec.sitemap_only)),
            (FEED_ONLY, round(n * spec.feed_only)),
            (LISTING_ONLY, round(n * spec.listing_only)),
            (FACET_ONLY, round(n * spec.facet_only)),
        ]
        classes: list[str] = []
        for cls, k in counts:
            classes.extend([cls] * k)
        classes = classes[:n] + [ALL] * max(0, n - len(classes))
        rng.shuffle(classes)
        for i, cls in enumerate(classes):
            # Initial pages were published over the weeks before day 0, oldest first.
            published = BASE_EPOCH - (n - i) * 3_600 * 5 - rng.randrange(3_600)
            self._add_page(cls, published, day=0)
        # Details link only to pages reachable through listings, so "sitemap only" stays true.
        self.linkable: list[int] = [p.id for p in self.pages if p.in_listing]

    def _rng(self, *parts: object) -> random.Random:
        return random.Random("/".join(str(p) for p in (self.seed, self.spec.name, *parts)))

    def _add_page(self, coverage: str, published: int, *, day: int) -> PageModel:
        pid = len(self.pages)
        rng = self._rng("page", pid)
        slug = "-".join(rng.choices(WORDS[40:], k=rng.randint(3, 5)))
        topic = self.topics[pid % len(self.topics)]
        path = self._path(coverage, self.shapes[pid % len(self.shapes)], slug, pid, published, topic)
        lo, hi = self.spec.page_bytes
        page = PageModel(
            id=pid,
            slug=slug,
            path=path,
            coverage=coverage,
            topic=topic,
            published_ts=published,
            modified_ts=published,
            created_day=day,
            size=rng.randint(lo, max(lo, hi)),
        )
        self.pages.append(page)
        self.by_path[path] = page
        return page

    @staticmethod
    def _path(coverage: str, shape: str, slug: str, pid: int, published: int, topic: str) -> str:
        if coverage == DISALLOWED:
            return f"{DISALLOWED_PREFIX}{slug}-{pid}"
        y, m, d = _ymd(published)
        return shape.format(slug=slug, id=pid, yyyy=f"{y:04d}", mm=f"{m:02d}", dd=f"{d:02d}", topic=topic)

    def _move(self, page: PageModel, rng: random.Random) -> str:
        """Give ``page`` a new address (a new slug, else the host's other URL shape); the old one redirects."""
        old = page.path
        slug = "-".join(rng.choices(WORDS[40:], k=rng.randint(3, 5)))
        candidates = [self._path(page.coverage, shape, slug, page.id, page.published_ts, page.topic)
                      for shape in (self.shapes[page.id % len(self.shapes)], *self.shapes)]
        new = next((c for c in candidates if c != old and c not in self.by_path and c not in self.moved_from),
                   f"{old.rstrip('/')}-r{self.day}")
        page.slug = slug
        page.path = new
        del self.by_path[old]
        self.by_path[new] = page
        self.moved_from[old] = new
        return new

    def live_pages(self) -> list[PageModel]:
        return [p for p in self.pages if p.live]

    def advance(
        self, *, changed: float, new: float, gone: float, moved: float = 0.0, restyled: float = 0.0,
        returned: float = 0.0,
    ) -> HostChange:
        """Move to the next day: ``changed``/``gone``/``moved``/``restyled`` are fractions of the live pages
        (disjoint sets), ``new`` adds ``round(new * live)`` pages. A moved page keeps its content under a new
        address and its old address answers 301; a restyled one keeps its main text and changes its bytes around
        it. ``returned`` is a fraction of the pages gone before today: they answer again, in a new version (published
        where they were, with a new modification date). Deterministic from (seed, host, day); ``restyled`` and
        ``returned`` 0 draw nothing more, so older days stay as they were."""
        self.day += 1
        day = self.day
        rng = self._rng("day", day)
        live = self.live_pages()
        n_live = len(live)
        k_changed = min(n_live, round(changed * n_live))
        k_gone = min(n_live - k_changed, round(gone * n_live))
        k_new = round(new * n_live)
        k_moved = min(n_live - k_changed - k_gone, round(moved * n_live))
        picked = rng.sample(live, k_changed + k_gone + k_moved)
        changed_pages, gone_pages = picked[:k_changed], picked[k_changed : k_changed + k_gone]
        moved_pages = picked[k_changed + k_gone :]
        restyled_pages: list[PageModel] = []
        if restyled > 0:
            taken = {p.id for p in picked}
            rest = [p for p in live if p.id not in taken]
            # The page's dates stay (its JSON-LD dateModified is part of what its content hash reads): only its
            # ETag says it is served differently, so only a request finds out.
            restyled_pages = self._rng("restyle", day).sample(rest, min(len(rest), round(restyled * n_live)))
            for p in restyled_pages:
                p.style += 1
        if spec_rates := self.spec.change_rates:
            others = {p.id for p in gone_pages} | {p.id for p in moved_pages}
            changed_pages = [p for p in live if p.id not in others and rng.random() < self.change_rate(p, spec_rates)]
        now = BASE_EPOCH + day * DAY_S
        for p in changed_pages:
            p.version += 1
            p.modified_ts = now + rng.randrange(6 * 3_600)
        returned_pages: list[PageModel] = []
        if returned > 0:
            dead = [p for p in self.pages if p.gone_day is not None and p.path not in self.moved_from]
            returned_pages = self._rng("return", day).sample(dead, min(len(dead), round(returned * len(dead))))
            for p in returned_pages:
                p.gone_day = None
                p.version += 1
                p.modified_ts = now + rng.randrange(6 * 3_600)
        for p in gone_pages:
            p.gone_day = day
        moves = [(p.path, self._move(p, rng)) for p in moved_pages]
        spec = self.spec
        cumulative = [
            (spec.disallowed_in_sitemap, DISALLOWED),
            (spec.sitemap_only, SITEMAP_ONLY),
            (spec.feed_only, FEED_ONLY),
            (spec.listing_only, LISTING_ONLY),
            (spec.facet_only, FACET_ONLY),
        ]
        new_pages = []
        for _ in range(k_new):
            r = rng.random()
            cls = ALL
            acc = 0.0
            for share, name in cumulative:
                acc += share
                if r < acc:
                    cls = name
                    break
            page = self._add_page(cls, now + rng.randrange(6 * 3_600), day=day)
            if page.in_listing:
                self.linkable.append(page.id)
            new_pages.append(page)
        self.last_change = HostChange(
            changed=tuple(p.path for p in changed_pages),
            new=tuple(p.path for p in new_pages),
            gone=tuple(p.path for p in gone_pages),
            moved=tuple(moves),
            restyled=tuple(p.path for p in restyled_pages),
            returned=tuple(p.path for p in returned_pages),
        )
        return self.last_change

    @staticmethod
    def change_rate(page: PageModel, rates: tuple[tuple[float, float], ...]) -> float:
        """The daily change chance of ``page``'s class (classes take ids in turn by their shares)."""
        position = (page.id * 0.6180339887) % 1.0  # spread ids evenly over [0, 1), whatever order they came in
        edge = 0.0
        for share, rate in rates:
            edge += share
            if position < edge:
                return rate
        return rates[-1][1] if rates else 0.0

    def sitemap_child_of(self, page: PageModel) -> int:
        """Child sitemaps hold contiguous id ranges and new pages join the last child, so a day that touches
        no page of a child leaves that child byte-identical (and answering 304)."""
        n = self.spec.sitemap_children
        per_child = max(1, math.ceil(self.initial_pages / max(1, n)))
        return min(page.id // per_child, n - 1)

    def feed_items(self, order: Literal["published", "updated"]) -> list[PageModel]:
        """Every live page published in the feeds, newest first by publication or by last update."""
        items = [p for p in self.pages if p.live and p.in_feed]
        if order == "updated":
            items.sort(key=lambda p: (-p.modified_ts, -p.id))
        else:
            items.sort(key=lambda p: (-p.published_ts, -p.id))
        return items

    def feed_archives(self) -> list[list[PageModel]]:
        """RFC 5005 archives: complete, fixed id ranges of ``feed_entries`` pages (oldest first), each holding the
        live feed pages of its range; the newest, incomplete range is in no archive (the head carries it)."""
        size = self.spec.feed_entries
        complete = len(self.pages) // size
        archives: list[list[PageModel]] = [[] for _ in range(complete)]
        for p in self.pages:
            if p.live and p.in_feed and p.id // size < complete:
                archives[p.id // size].append(p)
        return archives

    def facet_items(self, topic: str, name: str, value: str) -> list[PageModel]:
        """The items of one filter page of a topic's listing (``HostSpec.facets``), newest first."""
        items = [p for p in self.pages if p.live and p.in_facets and p.topic == topic and facet_value(p, name) == value]
        items.sort(key=lambda p: (-p.published_ts, -p.id))
        return items

    def listing_pages(self, topic: str) -> list[list[PageModel]]:
        """The pages of one topic's listing, newest first, split into listing pages (at least one, maybe empty)."""
        items = [p for p in self.pages if p.live and p.in_listing and p.topic == topic]
        items.sort(key=lambda p: (-p.published_ts, -p.id))
        size = self.spec.listing_page_size
        return [items[i : i + size] for i in range(0, len(items), size)] or [[]]


LISTING_FACETS: dict[str, tuple[str, ...]] = {
    "color": ("red", "blue", "green", "black", "white", "grey"),
    "size": ("xs", "s", "m", "l", "xl"),
    "brand": ("acme", "globex", "initech", "umbrella", "hooli"),
}
"""The filters of a faceted listing (``HostSpec.facets``): every value of each has its filter page."""


def facet_value(page: PageModel, name: str) -> str:
    """The value of filter ``name`` a page carries: a fixed function of its id, so every page has one of each."""
    values = LISTING_FACETS[name]
    spread = {"color": 1, "size": 7, "brand": 13}[name]
    return values[(page.id * spread + page.id // len(values)) % len(values)]


def _ymd(ts: int) -> tuple[int, int, int]:
    t = time.gmtime(ts)
    return t.tm_year, t.tm_mon, t.tm_mday


def small_site() -> list[HostSpec]:
    """The session-wide ``test_web`` fixture: three small hosts covering the common cases."""
    return [
        HostSpec("a", pages=60, robots=RobotsSpec(disallow=("/private/",))),
        HostSpec("b", pages=40, latency_s=0.005, robots=RobotsSpec(crawl_delay=0.01), sitemap_children=3),
        HostSpec("c", pages=30, traps=True, hostile=True, max_in_flight=8),
    ]


def demo_site() -> list[HostSpec]:
    """The site ``harvester demo`` crawls: four hosts, a few hundred pages, some latency, one crawl-delay,
    modest traps, one host with an agent-specific group."""
    return [
        HostSpec("news", pages=160, latency_s=0.01, traps=True, listing_page_size=15),
        HostSpec(
            "blog",
            pages=80,
            latency_s=0.02,
            robots=RobotsSpec(crawl_delay=0.05, disallow=("/drafts/",)),
            sitemap_children=1,
        ),
        HostSpec("shop", pages=90, latency_s=0.005, traps=True, feeds=("rss",)),
        HostSpec(
            "docs",
            pages=60,
            latency_s=0.03,
            robots=RobotsSpec(agent_groups={"harvester": ("/members/", "/internal/")}, request_rate="20/1s"),
            max_in_flight=6,
        ),
    ]
