"""A harvest whose pages failed ends Completed with a state message saying how many (the run list shows a state's
message; stranger 47b's run with 3 timeouts showed a bare Completed), on a started Prefect server, as the UI reads
it."""

from __future__ import annotations

from conftest import prepared

from harvester.site_profile import SiteProfile
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

PAGES = ("/p1", "/p2", "/p3")


def answer(request: Asked) -> Answer:
    if request.path == "/robots.txt":
        return robots_txt(request.origin)
    if request.path == "/sitemap.xml":
        return sitemap(request.origin, {path: None for path in PAGES})
    if request.path == "/p3":
        return 500, {"Content-Type": "text/plain"}, b"broken"
    body = b"<html><body><article><p>" + b"words " * 80 + b"</p></article></body></html>"
    return 200, {"Content-Type": "text/html"}, body


async def test_a_harvest_whose_pages_failed_says_so_in_its_completed_state(prefect_api, sqlite_url):
    from prefect import get_client

    from harvester.flows.harvest import harvest_flow
    from harvester.flows.recrawl import recrawl_flow

    with threaded_site(answer) as origin:
        profile = SiteProfile.build(seeds=(origin + "/",), name="failing47")
        state = await harvest_flow(profile, overrides=prepared(sqlite_url), return_state=True)
        # Called as the CLI calls it (``cli_runs``): the run's counts come back, not its state.
        again = await recrawl_flow(profile, refresh=True, overrides={})
    assert isinstance(again, dict) and again["changes"]["failed"] >= 1, again
    assert state.is_completed(), state
    result = await state.result()
    failed = result["changes"]["failed"]  # the run's result is still its counts
    assert failed >= 1, result["changes"]
    async with get_client() as client:
        run = await client.read_flow_run(state.state_details.flow_run_id)
    assert run.state is not None and run.state.is_completed(), run.state
    assert run.state.message == f"{failed} failed (http_5xx={failed}) of {result['changes']['fetched']} requests", (
        run.state.message)
