"""A harvest flow whose extractor hook fails on some pages: the run completes, and its page (the
``harvest-summary`` artifact) says how many pages the hook failed on, apart from failed requests, per host too."""

from __future__ import annotations

import textwrap
from pathlib import Path

from conftest import artifacts_of, prepared

from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec


async def test_the_summary_artifact_counts_the_pages_the_hook_failed_on(prefect_api, make_web, sqlite_url,
                                                                          tmp_path: Path):
    from harvester.flows.harvest import harvest_flow

    web = make_web([HostSpec("a", pages=10)], seed=35)
    broken = web.truth["a"].allowed_detail_urls()[:4]
    hook = tmp_path / "ext.py"
    hook.write_text(textwrap.dedent(f"""
        BROKEN = {broken!r}

        def words(page):
            if page.url in BROKEN:
                raise KeyError("price")
            return {{"words": len(page.main_text.split())}}
    """), encoding="utf-8")
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="hooked", extractor=f"{hook}:words")
    state = await harvest_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    assert state.is_completed(), state
    summary = (await artifacts_of([state.state_details.flow_run_id]))["harvest-summary"].data
    assert "| hook failed | 4 |" in summary and "| failed | 0 |" in summary, summary
    assert f"| {web.origin('a')} |" in summary and "| - | 4 |" in summary, summary  # the host: no failure, 4 hook
