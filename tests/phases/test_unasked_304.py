"""A 304 is "not modified" only as the answer to a conditional request. To a request that sent no validator it
names no copy of ours: that fetch failed (``unasked_304``), is retried later, is never DONE, and the server's
ETag is not kept (else every later request would send it and the page would never be downloaded)."""

from __future__ import annotations

from collections import Counter

from aiohttp import web
from test_harvest import robots_and_sitemap, settings_for

from harvester import phases
from harvester.cli_tables import status_of
from harvester.frontier import FrontierStore
from harvester.site_profile import SiteProfile


async def test_a_304_to_a_request_without_validators_is_a_failed_fetch_retried_later(sqlite_url, serve):
    asked: Counter[str] = Counter()
    conditional: list[tuple[str, str | None]] = []

    async def handle(request: web.Request) -> web.Response:
        published = robots_and_sitemap(request, ["/articles/cached", "/articles/stuck", "/articles/fine"])
        if published is not None:
            return published
        asked[request.path] += 1
        conditional.append((request.path, request.headers.get("If-None-Match")))
        # A broken cache in front of the site: 304 whatever was asked, with an ETag of its own. "cached" is fixed
        # on its second request; "stuck" never is.
        if request.path == "/articles/stuck" or (request.path == "/articles/cached" and asked[request.path] == 1):
            return web.Response(status=304, headers={"ETag": '"cache-says"'})
        return web.Response(content_type="text/html", headers={"ETag": '"real"'},
                            text=f"<html><body><main>the story at {request.path}</main></body></html>")

    origin = await serve(handle)
    settings = settings_for(sqlite_url, **{"politeness.max_attempts": 3, "politeness.backoff_base_s": 0.05})
    profile = SiteProfile.build(seeds=(origin + "/",), use_listings=False, use_feeds=False)
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        await phases.extract(store, settings, profile)
        stuck, cached = store.url_info(f"{origin}/articles/stuck"), store.url_info(f"{origin}/articles/cached")
        pages = {page.url: page for page in store.iter_pages(latest=True)}
        fetches = [f for f in store.iter_fetches() if f.url.endswith("/stuck")]
    assert stuck is not None and cached is not None
    # Never stored as harvested: failed for good after its attempts, with the class named, and no ETag kept.
    assert (stuck.state, stuck.last_error_class, stuck.etag) == ("failed", "unasked_304", None)
    assert asked["/articles/stuck"] == 3
    assert [(f.outcome, f.error_class) for f in fetches] == [("failed", "unasked_304")] * 3
    # Retried, not believed: the second request went out unconditionally and brought the page.
    assert cached.state == "done" and cached.etag == '"real"'
    assert f"{origin}/articles/cached" in pages and f"{origin}/articles/stuck" not in pages
    assert [inm for path, inm in conditional if path == "/articles/cached"] == [None, None]
    assert all(inm is None for path, inm in conditional if path == "/articles/stuck")
    # ``status`` counts it as failed, not done.
    assert status_of(settings)["by_state"].get("failed") == 1
