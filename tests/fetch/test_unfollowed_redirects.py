"""``Fetcher.fetch``'s ``stop_at``: a permanent redirect to a URL the caller has read is answered unfollowed, and only
a chain of permanent redirects is; a temporary hop (302/303/307) before or at it is followed as ever."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web

from harvester.fetch.http import Fetcher
from harvester.settings import HttpSettings

CHAINS = {"/301": (301, "/target"), "/308": (308, "/target"), "/302": (302, "/target"), "/307": (307, "/target"),
          "/301-302": (301, "/302"), "/302-301": (302, "/301")}


@pytest.fixture
async def site(serve: Callable[..., object]) -> tuple[str, list[str]]:
    asked: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        asked.append(request.path)
        if request.path in CHAINS:
            status, to = CHAINS[request.path]
            return web.Response(status=status, headers={"Location": to, "ETag": '"r"'})
        return web.Response(content_type="text/html", text="<html><body>the target</body></html>")

    origin = await serve(handle)  # type: ignore[operator]
    return origin, asked


@pytest.mark.parametrize(("path", "unfollowed"), [("/301", True), ("/308", True), ("/302", False), ("/307", False),
                                                  ("/301-302", False), ("/302-301", False)])
async def test_only_a_permanent_chain_to_a_read_url_stops_at_the_redirect(
    site: tuple[str, list[str]], path: str, unfollowed: bool,
) -> None:
    origin, asked = site
    read = {origin + "/target"}
    fetcher = Fetcher(HttpSettings(timeout_s=5.0), user_agent="harvester/0.1 (+test)", allow_addresses=("127.0.0.1",))

    async def stop_at(target: str) -> str | None:
        return target if target in read else None

    try:
        result = await fetcher.fetch(origin + path, stop_at=stop_at)
    finally:
        await fetcher.aclose()
    assert result.unfollowed is unfollowed
    assert result.final_url == origin + "/target" and result.error_class is None
    if unfollowed:  # the redirect's own answer; the target was not asked
        assert (result.status, result.body, result.redirects) == (CHAINS[path][0], None, (origin + "/target",))
        assert result.redirect_statuses == (CHAINS[path][0],) and result.etag == '"r"'
        assert asked == [path]
    else:
        assert result.status == 200 and asked[-1] == "/target"
