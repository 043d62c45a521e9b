"""A cycle's state is passed, not registered (issue 35): what a failed extraction attempt could not write travels in
the ``CycleState`` it was given, and the next attempt with that state writes it before fetching anything.

Before: the completions waited in a module-level dict keyed by database URL, which any later extraction of the
process on that database wrote, whichever cycle it belonged to; now only an attempt given the same state does (a
Prefect task retry finds it by the key its parameters carry)."""

from __future__ import annotations

import pytest

from harvester import phases
from harvester.frontier import FrontierStore
from harvester.phases.cycle_state import CycleState
from harvester.records import Completion, PageRecord, UrlState
from harvester.runtime import utcnow
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec


@pytest.mark.parametrize("same_state", [True, False])
async def test_a_retry_given_the_cycle_state_writes_what_the_failed_attempt_kept(make_web, sqlite_url, same_state):
    web = make_web([HostSpec("a", pages=6)], seed=35)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    cycle = CycleState()
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        # The failed attempt: one page answered, its completion and its lease kept in the cycle's state.
        # (In the control its lease is short: nothing else would ever hand the URL back.)
        (claimed,) = store.claim("attempt-1", hosts=[web.origin("a")], per_host=1, lease_s=600 if same_state else 2)
        page = PageRecord(final_url=claimed.url, status=200, content_type="text/html", content_hash="kept",
                          body=b"<html>kept</html>")
        cycle.unwritten.keep("attempt-1", [(Completion(url_id=claimed.id, state=UrlState.DONE, fetched_at=utcnow(),
                                                      status=200, content_hash="kept", page=page), [])])
        web.clear_records()
        await phases.extract(store, settings, profile, cycle=cycle if same_state else CycleState())
        states = store.url_states()
    asked = {r.url for r in web.records()}
    if same_state:
        assert cycle.unwritten.batches == []
        assert states[claimed.url][0] == "done" and claimed.url not in asked  # written, not fetched again
    else:  # the control: another cycle's state knows nothing of it; once its lease lapsed, the page is asked again
        assert len(cycle.unwritten.batches) == 1
        assert states[claimed.url][0] == "done" and claimed.url in asked
    details = set(web.truth["a"].allowed_detail_urls()) - {claimed.url}
    assert {url for url in details if states[url][0] != "done"} == set()  # the rest was fetched either way
