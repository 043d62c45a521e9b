"""A minimal polite crawler, the side-by-side reference for ``bench/seed4.py`` (issue 31, item 8): what a plain
asyncio crawler reaches on the same web in the same run, so the harvester's ratio to the politeness limit is read
against a peer, not against an ideal.

aiohttp, one queue and ``per_host`` workers per host (one connection pool each, sized to the limit), robots.txt by
``urllib.robotparser`` (4xx: allow all; 5xx or unreachable: disallow all, as RFC 9309 says), links found by a
regular expression and followed on the same host only, each URL asked once. No sitemaps, no storage: every
page whose answer has arrived frees its worker at once, which is the bound the harvester is measured against.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import aiohttp

HREF = re.compile(rb"""href=["']([^"'#>\s]+)""")
NAME = "minimal crawler (aiohttp, reference)"


async def _robots(session: aiohttp.ClientSession, origin: str) -> RobotFileParser:
    rules = RobotFileParser()
    try:
        async with session.get(origin + "/robots.txt") as answer:
            text = await answer.text(errors="replace") if answer.status == 200 else ""
            status = answer.status
    except (aiohttp.ClientError, TimeoutError):
        status = 599
    if status >= 500:
        rules.parse(["User-agent: *", "Disallow: /"])
    else:
        rules.parse(text.splitlines())
    return rules


async def crawl_host(seed: str, *, per_host: int, user_agent: str) -> int:
    """Every page of ``seed``'s host reachable by links from it; returns how many answered 200."""
    parts = urlsplit(seed)
    origin = f"{parts.scheme}://{parts.netloc}"
    fetched = 0
    connector = aiohttp.TCPConnector(limit=per_host)
    async with aiohttp.ClientSession(connector=connector, headers={"User-Agent": user_agent}) as session:
        rules = await _robots(session, origin)
        seen = {seed}
        queue: asyncio.Queue[str] = asyncio.Queue()
        queue.put_nowait(seed)

        async def worker() -> None:
            nonlocal fetched
            while True:
                url = await queue.get()
                try:
                    async with session.get(url) as answer:
                        body = await answer.read()
                        html = answer.status == 200 and "html" in answer.headers.get("Content-Type", "")
                        fetched += answer.status == 200
                    if html:
                        for match in HREF.finditer(body):
                            link = urldefrag(urljoin(url, match.group(1).decode("utf-8", "replace")))[0]
                            if link.startswith(origin + "/") and link not in seen and rules.can_fetch(user_agent, link):
                                seen.add(link)
                                queue.put_nowait(link)
                except (aiohttp.ClientError, TimeoutError):
                    pass
                finally:
                    queue.task_done()

        workers = [asyncio.ensure_future(worker()) for _ in range(per_host)]
        await queue.join()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return fetched


async def crawl(seeds: Sequence[str], *, per_host: int = 4, user_agent: str = "seed4-reference/1.0") -> int:
    """Each seed's host crawled by its own queue and workers, all hosts at once; pages that answered 200."""
    counts = await asyncio.gather(*(crawl_host(seed, per_host=per_host, user_agent=user_agent) for seed in seeds))
    return sum(counts)
