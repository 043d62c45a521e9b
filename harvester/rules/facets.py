"""Facet and filter variants of listing pages (``/shop?color=blue``): which to fetch, learned per host from what
the variants already read added, and which listing links only re-present a list (``?view=grid``).

Pure: the listing crawl asks before a fetch and reports what a variant listed that no page read before had;
this never fetches and never speaks SQL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["FacetChoice", "FacetLearner"]

MAX_PLAIN_LISTINGS = 100_000
"""Plain listing URLs remembered per site to recognise a re-presented one; beyond it, none is recognised
(the link is then admitted: more requests, never fewer items)."""


class FacetChoice(StrEnum):
    """What the listing crawl does with a listing URL. The two refusals are the verdicts counted in the report."""

    PLAIN = "plain"
    """No facet parameter: not a variant, crawled as any listing page."""
    FETCH = "fetch"
    """A variant of a parameter that added items on this site: its variants are crawled like plain listings."""
    PROBE = "probe"
    """Undecided: fetch it (one at a time, so each verdict is in before the next is asked) and report ``learned``."""
    USELESS = "facet:no_new_items"
    """Every facet parameter it carries was tried enough and never listed an item other pages had not: refused."""
    PRESENTATION = "facet:presentation"
    """The same list re-presented (sorted, another layout or page size) of a listing already read: refused."""


@dataclass(slots=True)
class _Tally:
    useless: int = 0
    useful: int = 0


def _names(query: str) -> list[str]:
    return [piece.partition("=")[0].lower() for piece in query.split("&") if piece]


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL (its first three ``/``-pieces)."""
    return "/".join(url.split("/", 3)[:3])


class FacetLearner:
    """One site's facet verdicts for a run, kept per host: two shops of one site may filter differently, so what a
    parameter did on one host says nothing of another (a shared verdict once let one host's "useful" have every
    host read every filter page).

    A variant adds nothing when every detail it lists came from pages already read (sitemaps, feeds, the plain
    listing read to its end, other variants): the listing crawl asks a variant only once the host's plain listing
    pages are all read, so an item the pagination reaches later never makes a filter look useful. A parameter
    whose variants added nothing ``useless_after`` times, and never added anything, is not fetched any more
    (``USELESS``); once one of its variants adds an item, every variant of it is fetched on that host (``FETCH``):
    a host whose only path to some items is a filter keeps full coverage. Once a host has shown ``useless_after``
    useless variants and no useful one, a parameter not yet tried gets a single probe: on a host whose filters add
    nothing, ``useless_after + (parameters - 1)`` variants are read in all (5 with the three of the usual
    colour/size/brand shop), where the flat ``max_facet_urls`` cap read up to 20 per path.

    Presentation parameters (``listing_presentation_params``) select no items, so a listing link carrying one is
    refused when the same URL without them is a listing already read: the page it is found on, most often.
    Without that plain form known it is admitted as it is, since ``view`` or ``limit`` select the content on some
    sites (Joomla's ``view=category``); they are never dropped from a canonical key.
    """

    def __init__(
        self, facet_params: Iterable[str], presentation_params: Iterable[str], *, useless_after: int
    ) -> None:
        self._facets = frozenset(name.lower() for name in facet_params)
        self._presentation = frozenset(name.lower() for name in presentation_params)
        self._useless_after = max(1, useless_after)
        self._tallies: dict[tuple[str, str], _Tally] = {}
        """(origin, parameter) → its variants' verdicts on that host."""
        self._useless: Counter[str] = Counter()
        self._useful: Counter[str] = Counter()
        """Per origin: variants read that added nothing, and that added items."""
        self._plain: set[str] = set()
        self.counts: Counter[str] = Counter()
        """Verdicts learned: ``useless`` and ``useful`` variants read."""

    # -- what a URL is

    def facets_of(self, url: str) -> list[str]:
        """The facet parameter names of a canonical ``url`` (lower case, sorted as the key sorts them)."""
        query = url.partition("?")[2]
        return [name for name in _names(query) if name in self._facets] if query else []

    def is_variant(self, url: str) -> bool:
        return bool(self.facets_of(url))

    def without_presentation(self, url: str) -> str | None:
        """``url`` (canonical) without its presentation parameters; None when it carries none."""
        path, mark, query = url.partition("?")
        if not mark:
            return None
        pieces = [piece for piece in query.split("&") if piece]
        kept = [piece for piece in pieces if piece.partition("=")[0].lower() not in self._presentation]
        if len(kept) == len(pieces):
            return None
        return f"{path}?{'&'.join(kept)}" if kept else path

    # -- decisions

    def read_plain(self, url: str) -> None:
        """``url`` (canonical), a listing page that is no variant, was read: its re-presentations add nothing."""
        if len(self._plain) < MAX_PLAIN_LISTINGS:
            self._plain.add(url)

    def presentation(self, url: str, *, found_on: str) -> bool:
        """Whether a listing link ``url`` (canonical), found on the listing page ``found_on``, only re-presents a
        listing already read: it is then refused (``FacetChoice.PRESENTATION``, counted)."""
        plain = self.without_presentation(url)
        return plain is not None and (plain == found_on or plain in self._plain)

    def choose(self, url: str) -> FacetChoice:
        """What to do with the listing URL ``url`` (canonical) now. Asked again for a variant that waited
        (claimed in a batch before a verdict came in): the answer may have turned to ``USELESS``."""
        names = self.facets_of(url)
        if not names:
            return FacetChoice.PLAIN
        origin = _origin(url)
        tallies = [self._tallies.get((origin, name)) or _Tally() for name in names]
        if any(t.useful for t in tallies):
            return FacetChoice.FETCH
        if all(self._tried_enough(origin, t) for t in tallies):
            return FacetChoice.USELESS
        return FacetChoice.PROBE

    def _tried_enough(self, origin: str, tally: _Tally) -> bool:
        if tally.useful:
            return False
        # A host whose filters have only ever repeated the plain listing: a further parameter gets one probe.
        useless, useful = self._useless[origin], self._useful[origin]
        needed = 1 if useless >= self._useless_after and not useful else self._useless_after
        return tally.useless >= needed

    def learned(self, url: str, *, added: int) -> None:
        """A variant ``url`` was read and listed ``added`` details no page read before it had."""
        names = self.facets_of(url)
        if not names:
            return
        useful = added > 0
        origin = _origin(url)
        for name in names:
            tally = self._tallies.setdefault((origin, name), _Tally())
            if useful:
                tally.useful += 1
            else:
                tally.useless += 1
        (self._useful if useful else self._useless)[origin] += 1
        self.counts["useful" if useful else "useless"] += 1
