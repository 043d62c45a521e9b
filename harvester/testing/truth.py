"""Ground truth of a running test web, read from the site models: which detail pages exist now, where each is
published, what robots.txt allows, what the last day changed.

Read-only over the models; never talks to the server (in process mode the parent keeps its own copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from protego import Protego

from harvester.testing.render_pages import robots_text
from harvester.testing.render_traps import TRAP_PREFIXES
from harvester.testing.sites import HostSpec, SiteModel

__all__ = ["DayChange", "HostTruth", "Truth"]

# ====================================================================== ground truth


@dataclass(frozen=True)
class DayChange:
    """What one ``advance_day`` did, as canonical URLs per host name."""

    day: int
    changed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    new: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gone: dict[str, tuple[str, ...]] = field(default_factory=dict)
    moved: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """(old URL, new URL) pairs per host name."""
    restyled: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Pages whose bytes changed outside their main text."""
    returned: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Pages gone on an earlier day that answer again, in a new version."""

    def all(self, kind: Literal["changed", "new", "gone", "restyled", "returned"]) -> set[str]:
        return {u for urls in getattr(self, kind).values() for u in urls}


class HostTruth:
    """Ground truth of one host, read from its model: what exists now, where it is published, what robots
    allows. URLs are canonical (``http://127.0.0.1:PORT/path``)."""

    def __init__(self, name: str, spec: HostSpec, model: SiteModel, origin: str) -> None:
        self.name = name
        self.spec = spec
        self.model = model
        self.origin = origin
        self._robots_text: str | None = None
        self._robots: Protego | None = None

    def _urls(self, pred: Callable[[Any], bool]) -> list[str]:
        return [self.origin + p.path for p in self.model.pages if p.live and pred(p)]

    def detail_urls(self) -> list[str]:
        """Every live detail page, wherever (and whether) it is published."""
        return self._urls(lambda p: True)

    def allowed_detail_urls(self, user_agent: str | None = "harvester") -> list[str]:
        return [u for u in self.detail_urls() if self.is_allowed(u, user_agent)]

    def disallowed_urls(self, user_agent: str | None = "harvester") -> list[str]:
        """Live detail pages robots.txt forbids for ``user_agent`` (all of them when robots.txt is 5xx)."""
        return [u for u in self.detail_urls() if not self.is_allowed(u, user_agent)]

    def sitemap_urls(self) -> list[str]:
        return self._urls(lambda p: p.in_sitemap)

    def feed_urls(self) -> list[str]:
        return self._urls(lambda p: p.in_feed)

    def listed_urls(self) -> list[str]:
        """Details reachable through listing pages."""
        return self._urls(lambda p: p.in_listing)

    def sitemap_only(self) -> list[str]:
        """In the sitemap only and allowed (the disallowed sitemap entries are in ``disallowed_urls``)."""
        return self._urls(lambda p: p.coverage == "sitemap")

    def feed_only(self) -> list[str]:
        return self._urls(lambda p: p.coverage == "feed")

    def listing_only(self) -> list[str]:
        return self._urls(lambda p: p.coverage == "listing")

    def listing_urls(self) -> list[str]:
        """Listing pages (canonical, query keys sorted) of the current day."""
        out = []
        for topic in self.model.topics:
            n = len(self.model.listing_pages(topic))
            out.append(f"{self.origin}/topics/{topic}/")
            out += [f"{self.origin}/topics/{topic}/?order=recent&page={i}" for i in range(2, n + 1)]
        return out

    def sitemap_documents(self) -> list[str]:
        """The sitemap index first, then its children."""
        n = self.spec.sitemap_children
        if n <= 0:
            return []
        children = [f"{self.origin}/sitemaps/pages-{i + 1}.xml" + (".gz" if i == 0 and n > 1 else "") for i in range(n)]
        return [f"{self.origin}/sitemap_index.xml", *children]

    def feed_documents(self) -> list[str]:
        """The feed heads (what pages advertise); paged or archived feeds have more documents behind them."""
        return [f"{self.origin}/feeds/{kind}.xml" for kind in self.spec.feeds if kind in ("rss", "atom")]

    def feed_head_urls(self) -> list[str]:
        """Detail pages listed in at least one feed head (the newest entries), as opposed to ``feed_urls``."""
        size = self.spec.feed_entries
        feeds = self.spec.feeds
        newest = (self.model.feed_items("published")[:size] if "rss" in feeds else []) + (
            self.model.feed_items("updated")[:size] if "atom" in feeds else [])
        heads = {p.path for p in newest}
        return [self.origin + p.path for p in self.model.pages if p.live and p.path in heads]

    def announced_urls(self) -> set[str]:
        """Live pages whose edits the site announces now: listed in a sitemap whose lastmod is a modification
        date, or in the head of the Atom feed (ordered by ``updated``). An RSS head, ordered by publication,
        announces new pages, not edits."""
        out: set[str] = set()
        if self.spec.sitemap_lastmod == "modified":
            out |= set(self.sitemap_urls())
        if "atom" in self.spec.feeds:
            heads = {p.path for p in self.model.feed_items("updated")[: self.spec.feed_entries]}
            out |= {self.origin + p.path for p in self.model.pages if p.live and p.path in heads}
        return out

    def gone_urls(self) -> list[str]:
        """Every detail page that answers 410 now."""
        return [self.origin + p.path for p in self.model.pages if not p.live]

    def changed(self) -> list[str]:
        return [self.origin + p for p in self.model.last_change.changed]

    def new(self) -> list[str]:
        return [self.origin + p for p in self.model.last_change.new]

    def gone(self) -> list[str]:
        return [self.origin + p for p in self.model.last_change.gone]

    def moved(self) -> list[tuple[str, str]]:
        """(old URL, new URL) of the pages the last day moved; the old URL answers 301 to the new one."""
        return [(self.origin + a, self.origin + b) for a, b in self.model.last_change.moved]

    def trap_prefixes(self) -> dict[str, str]:
        """Trap kind → path prefix (``session``: the query parameter ``sid=``); empty without traps."""
        return dict(TRAP_PREFIXES) if self.spec.traps else {}

    def robots_text(self) -> str:
        if self._robots_text is None:
            self._robots_text = robots_text(self.spec, self.origin)  # needs no server, only the origin
        return self._robots_text

    def is_allowed(self, url_or_path: str, user_agent: str | None = "harvester") -> bool:
        """RFC 9309 as a polite crawler applies it: 2xx (or a 3xx to our own body) parse the rules; 4xx allow
        everything; 5xx forbid everything."""
        status = self.spec.robots.status
        if 400 <= status < 500:
            return True
        if status >= 500:
            return urlsplit(url_or_path).path == "/robots.txt"
        if self._robots is None:
            self._robots = Protego.parse(self.robots_text())
        url = url_or_path if "://" in url_or_path else self.origin + url_or_path
        return bool(self._robots.can_fetch(url, user_agent or "*"))


class Truth:
    """Per-host truths by name (``web.truth["a"]`` or ``web.truth("a")``), plus unions over all hosts."""

    def __init__(self, hosts: dict[str, HostTruth]) -> None:
        self._hosts = hosts

    def __getitem__(self, name: str) -> HostTruth:
        return self._hosts[name]

    def __call__(self, name: str) -> HostTruth:
        return self._hosts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hosts)

    def __len__(self) -> int:
        return len(self._hosts)

    def _union(self, method: str, *args: Any) -> list[str]:
        out: list[str] = []
        for h in self._hosts.values():
            out += getattr(h, method)(*args)
        return out

    def detail_urls(self) -> list[str]:
        return self._union("detail_urls")

    def allowed_detail_urls(self, user_agent: str | None = "harvester") -> list[str]:
        return self._union("allowed_detail_urls", user_agent)

    def disallowed_urls(self, user_agent: str | None = "harvester") -> list[str]:
        return self._union("disallowed_urls", user_agent)

    def gone_urls(self) -> list[str]:
        return self._union("gone_urls")
