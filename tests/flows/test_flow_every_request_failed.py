"""A harvest flow whose page requests all fail ends Failed, says why, and emits ``harvester.site.failed``; its
summary artifact names the failed URLs with their reasons (ops48: it ended Completed, event ``unchanged``)."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import artifacts_of, prepared
from test_flow_events import WAIT_S, site_events

from harvester.flows.events import EVENT_FAILED
from harvester.site_profile import SiteProfile
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

PATHS = ["/p/0", "/p/1", "/p/2"]


def answer(asked: Asked) -> Answer:
    if asked.path == "/robots.txt":
        return robots_txt(asked.origin)
    if asked.path == "/sitemap.xml":
        return sitemap(asked.origin, dict.fromkeys(PATHS, "2026-12-01"))
    return 503, {"Content-Type": "text/html"}, b"<html><body>busy</body></html>"


async def test_every_page_request_failing_fails_the_flow_with_its_event_and_names_the_urls(
    prefect_api, sqlite_url, monkeypatch: pytest.MonkeyPatch
):
    from prefect.types._datetime import now

    from harvester.flows.harvest import harvest_flow

    monkeypatch.setenv("HARVESTER_POLITENESS__BACKOFF_BASE_S", "0.05")
    monkeypatch.setenv("HARVESTER_POLITENESS__BACKOFF_MAX_S", "0.2")
    with threaded_site(answer) as origin:
        profile = SiteProfile.build(seeds=(f"{origin}/",), name="alldown")
        since = now("UTC")
        state = await harvest_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_failed(), state
    assert "every page request failed" in (state.message or ""), state.message
    deadline = time.monotonic() + WAIT_S
    while not (events := await site_events("alldown", since)):
        assert time.monotonic() < deadline, "no event of the harvest reached the server"
        await asyncio.sleep(1)
    assert [event.event for event in events] == [EVENT_FAILED], [event.event for event in events]
    assert "every page request failed" in events[0].payload["reason"], events[0].payload
    summary = (await artifacts_of([state.state_details.flow_run_id]))["harvest-summary"].data
    assert "**Failed: every page request failed" in summary, summary
    for path in ["/", *PATHS]:
        assert f"- failed: {origin}{path} (http_5xx 503)" in summary, summary


async def test_an_extract_flow_started_alone_whose_page_requests_all_fail_ends_failed(
    prefect_api, sqlite_url, monkeypatch: pytest.MonkeyPatch
):
    """The extract flow run on its own (a deployment of its own, or from the UI) follows the harvest's rule: it
    ended Completed when every page request it sent failed."""
    from harvester.flows.discover import discover_flow
    from harvester.flows.extract import extract_flow

    monkeypatch.setenv("HARVESTER_POLITENESS__BACKOFF_BASE_S", "0.05")
    monkeypatch.setenv("HARVESTER_POLITENESS__BACKOFF_MAX_S", "0.2")
    with threaded_site(answer) as origin:
        profile = SiteProfile.build(seeds=(f"{origin}/",), name="alldown-extract")
        await discover_flow(profile, overrides=prepared(sqlite_url))
        state = await extract_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_failed(), state
    assert "every page request failed" in (state.message or ""), state.message
    assert "http_5xx" in (state.message or ""), state.message
