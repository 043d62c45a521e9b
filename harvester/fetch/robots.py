"""RFC 9309 robots.txt policy over protego: status → rules, cache lifetime, and one fetch per host.

``RobotsRules`` is pure (built from a ``RobotsState``); ``RobotsCache`` shares one fetch among concurrent first
requests and persists states through ``RobotsPersistence``. It never fetches by itself: the engine hands it a
polite fetch function, so robots.txt requests obey the host's limits like any other.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from protego import Protego

from harvester.fetch.robotstxt import TOKEN_START, group_body, robots_path
from harvester.records import ErrorClass, FetchResult, RobotsState, Validators
from harvester.runtime import aware, utcnow
from harvester.settings import RobotsSettings

logger = logging.getLogger(__name__)

ROBOTS_PATH = "/robots.txt"


class RobotsPersistence(Protocol):
    """Where robots states outlive a run (the frontier's ``hosts`` table, wrapped with ``asyncio.to_thread``)."""

    async def load_robots(self, origin: str) -> RobotsState | None: ...

    async def save_robots(self, state: RobotsState) -> None: ...


RobotsFetch = Callable[[str, Validators, str], Awaitable[FetchResult]]
"""Fetches ``<origin>/robots.txt`` politely (truncated at the cap, up to five redirects) with these validators, sent
to the URL given last alone: the one that issued them (robots.txt's redirect target, on any hop)."""


@functools.cache
def product_token(user_agent: str) -> str:
    """RFC 9309 §2.2.1: the crawler's name in its User-Agent, the token its robots.txt group is named by.

    "harvester/0.1 (+https://…)" → "harvester"; a browser-style UA names the crawler after "compatible;" in a
    comment (figure 1: "Mozilla/5.0 (compatible; ExampleBot/0.1; +https://…)" → "ExampleBot"), not "Mozilla".
    The name is cut at its first character a token may not hold (letters, "_", "-"); "*" when nothing is left
    (the crawler then obeys only the ``*`` group). Cached: extraction asks it for every page (X-Robots-Tag).
    """
    words = user_agent.split(None, 1)
    name = _compatible_name(user_agent) or (words[0] if words else "")
    match = TOKEN_START.match(name)
    return match.group(0) if match else "*"


_COMPATIBLE = re.compile(r"[(;]\s*compatible\s*;\s*([^;)]+)", re.IGNORECASE)


def _compatible_name(user_agent: str) -> str | None:
    """The product named after "compatible;" in a UA comment, when it names one that a token can be read from."""
    for match in _COMPATIBLE.finditer(user_agent):
        name = match.group(1).strip()
        if TOKEN_START.match(name):
            return name
    return None


def robots_token(user_agent: str, settings: RobotsSettings) -> str:
    """The product token this crawler matches robots.txt groups and X-Robots-Tag / ``<meta>`` names with: the
    explicit ``settings.product_token``, else the one derived from ``user_agent``."""
    return settings.product_token or product_token(user_agent)


def decode_robots(body: bytes | str, max_bytes: int) -> str:
    """robots.txt bytes → text: at most ``max_bytes`` (RFC 9309 §2.5), UTF-8 with BOM stripped, partial line cut.

    ``body`` longer than ``max_bytes`` was cut: the fetch reads one byte past the limit (``ROBOTS_READ_PAST``) so
    that a cut body can be told from one that ends exactly at it. A line the cut falls in is dropped: the RFC's
    grammar ends every rule with an EOL, and a fragment is a rule the site never wrote (``Allow: /pub`` cut to
    ``Allow: /`` undoes a ``Disallow: /``, ``Disallow: /syyy`` cut to ``Disallow: /s`` blocks /sitemap.xml). The
    line stays when the byte past the limit is its EOL. A body within the limit is read whole, a last line without
    a newline included.
    """
    raw = body.encode("utf-8", "replace") if isinstance(body, str) else body
    if len(raw) > max_bytes:
        whole_line = raw[max_bytes:max_bytes + 1] in (b"\n", b"\r")
        raw = raw[:max_bytes]
        if not whole_line:
            cut = max(raw.rfind(b"\n"), raw.rfind(b"\r"))
            raw = raw[: cut + 1] if cut >= 0 else b""
    for bom in (b"\xef\xbb\xbf", b"\xef\xbb", b"\xef"):
        if raw.startswith(bom):  # a BOM, or what is left of one (Google's reference parser skips those too)
            raw = raw[len(bom):]
            break
    # robotstxt.parse splits at CR, LF and CRLF (RFC 9309 §2.1).
    return raw.decode("utf-8", "replace")


ROBOTS_READ_PAST = 1
"""Bytes a robots.txt fetch reads past ``RobotsSettings.max_bytes``: a body cut at exactly the limit could not be
told from a file of that size, and its cut last line would be read as a rule (``decode_robots``)."""


_DISALLOW_LINE = re.compile(r"^[ \t]*disallow[ \t]*:[ \t]*[^\s#]", re.IGNORECASE | re.MULTILINE)
"""A Disallow rule with a path: an empty one allows everything."""


class RobotsRules:
    """What robots.txt lets this crawler do on one origin.

    ``mode`` is "rules" (a 2xx file), "allow" (4xx: RFC 9309 §2.3.1.3) or "disallow" (5xx/unreachable:
    §2.3.1.4). ``expires_at`` is monotonic time after which the cache must re-fetch.
    """

    __slots__ = ("_parser", "_token", "crawl_delay_s", "expires_at", "fingerprint", "mode", "origin", "refuses_any",
                 "request_rate_s", "sitemaps", "state")

    def __init__(self, state: RobotsState, *, user_agent: str, settings: RobotsSettings,
                 now_wall: datetime | None = None, now_mono: float | None = None) -> None:
        self.state = state
        self.origin = state.origin
        self._token = robots_token(user_agent, settings).lower()
        self._parser: Protego | None = None
        self.crawl_delay_s: float | None = None
        self.request_rate_s: float | None = None
        self.sitemaps: list[str] = []
        self.mode = status_mode(state)
        self.refuses_any = self.mode == "disallow"
        """Whether any URL may be refused: a Disallow line with a path in our group, or the whole site."""
        self.fingerprint = self.mode
        """The rules as read, for this crawler: the mode, and in "rules" mode a digest of our group (what the
        verdicts follow from, with the Sitemap lines; another crawler's group or a comment leave it). A host whose
        rules' fingerprint changed has its stored URLs judged again (``FrontierStore.rejudge_urls``)."""
        if self.mode == "rules":
            # protego sees only our group, regrouped per RFC 9309 (robotstxt.py), under "User-agent: *".
            group = group_body(decode_robots(state.body or "", settings.max_bytes), self._token)
            self.refuses_any = _DISALLOW_LINE.search(group) is not None
            self.fingerprint = "rules:" + hashlib.sha256(group.encode("utf-8", "replace")).hexdigest()[:32]
            self._parser = Protego.parse(group)
            delay = self._parser.crawl_delay(self._token)
            self.crawl_delay_s = float(delay) if delay is not None and delay >= 0 else None
            rate = self._parser.request_rate(self._token)
            if rate is not None and rate.requests > 0:
                self.request_rate_s = float(rate.seconds) / float(rate.requests)
            self.sitemaps = list(self._parser.sitemaps)
        wall = now_wall or utcnow()
        mono = time.monotonic() if now_mono is None else now_mono
        expires = aware(state.expires_at)
        self.expires_at = mono + (expires - wall).total_seconds() if expires is not None else mono

    def allowed(self, url: str) -> bool:
        """True when this crawler may fetch ``url`` (an absolute URL of this origin)."""
        if self._parser is not None:
            # The bare path behind an empty authority: protego reads "//x" at the start of a path as a host.
            return bool(self._parser.can_fetch("http://" + robots_path(url), self._token))
        return self.mode == "allow"

    def fresh(self, now_mono: float | None = None) -> bool:
        return (time.monotonic() if now_mono is None else now_mono) < self.expires_at

    def __repr__(self) -> str:
        return f"RobotsRules({self.origin!r}, mode={self.mode}, crawl_delay_s={self.crawl_delay_s})"


def status_mode(state: RobotsState) -> str:
    """RFC 9309 §2.3.1: the status (or failure) of the robots.txt fetch → rules / allow / disallow."""
    status = state.status
    if state.error_class is ErrorClass.TOO_MANY_REDIRECTS:
        return "allow"  # §2.3.1.2: past five redirects a crawler MAY treat robots.txt as unavailable
    if state.error_class is not None and (status is None or status < 400 or status >= 500 or status == 429):
        return "disallow"  # §2.3.1.4: unreachable (timeout, connect error, cut off) → complete disallow
    if status is None:
        return "disallow"
    if 200 <= status < 300:
        return "rules"
    if status == 429:
        return "disallow"  # treated like 5xx (server overloaded), as Google does: be conservative
    if 400 <= status < 500:
        return "allow"  # §2.3.1.3: unavailable → no restrictions
    return "disallow"  # §2.3.1.4: 5xx (and anything unexpected) → complete disallow


def state_from_fetch(origin: str, result: FetchResult, settings: RobotsSettings, *,
                     previous: RobotsState | None = None, now: datetime | None = None) -> RobotsState:
    """The state to cache after one robots.txt fetch; a 304 extends ``previous`` (RFC 9309 §2.4 re-validation)."""
    now = now or utcnow()
    if result.status == 304 and previous is not None and result.error_class is None:
        return replace(previous, fetched_at=now, expires_at=now + timedelta(seconds=settings.cache_s),
                       url=result.final_url, etag=result.etag or previous.etag,
                       last_modified=result.last_modified or previous.last_modified)
    error_class = result.error_class
    if error_class in (ErrorClass.HTTP_4XX, ErrorClass.HTTP_5XX, ErrorClass.HTTP_429):
        error_class = None  # the status says it; error_class is kept for failures without a usable status
    body = None
    if result.ok and result.body is not None:
        body = decode_robots(result.body, settings.max_bytes)
    state = RobotsState(
        origin=origin, status=result.status, fetched_at=now, expires_at=None, body=body, url=result.final_url,
        etag=result.etag if result.ok else None, last_modified=result.last_modified if result.ok else None,
        error_class=error_class,
        refused=result.final_url if error_class in (ErrorClass.ADDRESS_REFUSED, ErrorClass.INVALID_URL) else None,
    )
    lifetime = settings.error_cache_s if status_mode(state) == "disallow" else settings.cache_s
    return replace(state, expires_at=now + timedelta(seconds=min(lifetime, 86_400.0)))



def _older(state: RobotsState, moment: datetime | None) -> bool:
    """``state`` was fetched before ``moment`` (never, when it has no fetch time)."""
    return moment is not None and state.fetched_at is not None and aware(state.fetched_at) < aware(moment)


class RobotsCache:
    """robots.txt per origin: fetched once, shared by concurrent first requests, refreshed when it expires."""

    def __init__(self, settings: RobotsSettings, *, user_agent: str, fetch: RobotsFetch,
                 persistence: RobotsPersistence | None = None) -> None:
        self._settings = settings
        self._user_agent = user_agent
        self._fetch = fetch
        self._persistence = persistence
        self._rules: dict[str, RobotsRules] = {}
        self._pending: dict[str, asyncio.Task[RobotsRules]] = {}
        self.fetches = 0

    def peek(self, origin: str) -> RobotsRules | None:
        """The cached, fresh rules without awaiting (the hot path), or None."""
        rules = self._rules.get(origin)
        if rules is not None and rules.fresh():
            return rules
        return None

    async def aclose(self) -> None:
        """Cancel the fetches no caller waits for any more, and wait for them to end, before the client's
        connections close. ``rules`` shields a fetch from its waiters' cancellation (the others share it), so a
        run cancelled mid-fetch (a stopped task, the end of a time slot) left it running: the client then closed
        its connection under it, and the failure that caused was saved as the host's robots.txt being unreachable
        (``error_cache_s``), which parked the host in the next run too, though its robots.txt never failed. A
        fetch cancelled here saves nothing; the next run asks robots.txt again."""
        pending = list(self._pending.values())
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def forget(self, origin: str) -> bool:
        """Drop the origin's rules from memory, when they can be had again without a request: only with
        persistence (every rules object here was saved or loaded, so ``rules`` reloads it while it is fresh) and
        no load in flight. A crawl of thousands of hosts then keeps the rules of the hosts being served, not of
        every host it ever asked (issue 22). True when something was dropped."""
        if self._persistence is None or origin in self._pending:
            return False
        return self._rules.pop(origin, None) is not None

    async def rules(self, origin: str, *, fresh_since: datetime | None = None) -> RobotsRules:
        """The origin's rules; ``fresh_since``: a copy fetched before then is asked again (conditionally), as a
        scheduled run asks everything that announces change, whatever its cache lifetime says."""
        rules = self.peek(origin)
        if rules is not None and not _older(rules.state, fresh_since):
            return rules
        task = self._pending.get(origin)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(origin, fresh_since),
                                                          name=f"robots {origin}")
            self._pending[origin] = task
            task.add_done_callback(lambda _t: self._pending.pop(origin, None))
        # shield: one waiter's cancellation must not cancel the fetch the other waiters share.
        return await asyncio.shield(task)

    async def _load(self, origin: str, fresh_since: datetime | None = None) -> RobotsRules:
        now = utcnow()
        previous = self._rules[origin].state if origin in self._rules else None
        if previous is None and self._persistence is not None:
            previous = await self._persistence.load_robots(origin)
            expires = aware(previous.expires_at) if previous is not None else None
            if previous is not None and expires is not None and expires > now and not _older(previous, fresh_since):
                rules = self._build(previous)
                self._rules[origin] = rules
                return rules
        conditional = previous if previous is not None and status_mode(previous) == "rules" else None
        validators = Validators(conditional.etag, conditional.last_modified) if conditional else Validators()
        self.fetches += 1
        issuer = conditional.answered_by if conditional is not None else origin + ROBOTS_PATH
        result = await self._fetch(origin, validators, issuer)
        state = state_from_fetch(origin, result, self._settings, previous=conditional, now=utcnow())
        if state.error_class is not None or (state.status or 0) >= 500:
            logger.info("robots.txt of %s unreachable (%s): disallow all for %.0fs", origin,
                        result.error or result.status, self._settings.error_cache_s,
                        extra={"host": origin, "error_class": str(result.error_class or "")})
        if self._persistence is not None:
            await self._persistence.save_robots(state)
        rules = self._build(state)
        self._rules[origin] = rules
        return rules

    def _build(self, state: RobotsState) -> RobotsRules:
        return RobotsRules(state, user_agent=self._user_agent, settings=self._settings)
