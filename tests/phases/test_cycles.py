"""The library's whole cycles, harvest() and recrawl(): the flows' bookkeeping, a callable extractor hook, and
clear refusals (a hook given twice, the blocking form inside a running event loop) before any request."""

from __future__ import annotations

import pytest

from harvester import FrontierStore, aharvest, arecrawl, harvest
from harvester.errors import ConfigError, HarvesterError, NothingFetched
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


async def test_a_harvest_records_one_finished_run_per_phase_like_the_flows(make_web, db_url):
    web = make_web([HostSpec("a", pages=20), HostSpec("b", pages=15)], seed=31)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), name="cycle")
    with FrontierStore.open(settings, upgrade=True) as store:
        cycle = await aharvest(settings, profile, workers=2)
        discovered, extracted = store.last_run("discover"), store.last_run("extract")
        states = store.url_states()
    allowed = [url for name in ("a", "b") for url in web.truth[name].allowed_detail_urls()]
    # A first harvest's changes: every page is new, none changed or gone, nothing deferred.
    assert cycle.changes["new"] >= len(allowed) and cycle.changes["changed"] == 0, cycle.changes
    assert cycle.changes["gone"] == 0 and cycle.changes["deferred"] == 0, cycle.changes
    assert sum(counts["fetched"] for counts in cycle.fetches.values()) >= len(allowed)
    assert cycle.silent is None
    assert all(states[url][0] == "done" for url in allowed)
    assert cycle.extract.counters["state:done"] >= len(allowed)
    for run, result in ((discovered, cycle.discover), (extracted, cycle.extract)):
        assert run is not None and run["status"] == "completed"
        assert run["counters"]["counters"] == dict(result.counters)
        assert run["profile"]["name"] == "cycle"
    # Both workers ran (each leases its own hosts), and their counters were merged into the one run.
    assert set(cycle.extract.hosts) == {web.origin("a"), web.origin("b")}


async def test_a_callable_extractor_keeps_its_fields_with_each_page(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=12)], seed=32)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    seen: list[str] = []

    def words(page):
        seen.append(page.url)
        return {"words": len(page.main_text.split()), "shout": (page.title or "").upper()}

    await aharvest(settings, profile, extractor=words)
    with FrontierStore.open(settings) as store:
        pages = {page.url: page for page in store.iter_pages(latest=True)}
    for url in web.truth["a"].allowed_detail_urls():
        assert url in seen
        fields = pages[url].fields
        assert fields["words"] > 0 and fields["shout"] == (pages[url].title or "").upper(), fields


async def test_an_extractor_both_named_and_passed_is_refused_before_any_request(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=5)], seed=33)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds), extractor="hooks_sample:title_length")
    with pytest.raises(ConfigError, match="both given"):
        await aharvest(settings, profile, extractor=lambda page: {})
    with pytest.raises(ConfigError, match="not a callable"):
        await aharvest(settings, SiteProfile.build(seeds=tuple(web.seeds)), extractor="hooks_sample:title_length")
    assert web.records() == []


async def test_the_blocking_form_inside_a_running_loop_names_the_coroutine(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=5)], seed=34)
    settings = Settings.load(database_url=sqlite_url)
    with pytest.raises(HarvesterError, match=r"await aharvest\(\.\.\.\)"):
        harvest(settings, SiteProfile.build(seeds=tuple(web.seeds)))
    assert web.records() == []


async def test_a_recrawl_fetches_what_changed_and_reports_what_appeared_and_vanished(make_web, db_url):
    web = make_web([HostSpec("a", pages=40, disallowed_in_sitemap=0.0)], seed=35)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await aharvest(settings, profile)
        day = web.advance_day(changed=0.1, new=0.1, gone=0.1)
        web.clear_records()
        cycle = await arecrawl(settings, profile, refresh=True)
        states = store.url_states()
    changes = cycle.changes
    assert changes is not None and day.all("new") and day.all("gone")  # control: the day changed the site
    assert day.all("new") <= set(changes["new_urls"]) and changes["new"] == len(day.all("new")), changes
    assert day.all("gone") <= set(changes["gone_urls"]), changes
    assert all(states[url][0] == "gone" for url in day.all("gone"))
    fetched = {r.url for r in web.records() if r.status == 200}
    assert day.all("new") | day.all("changed") <= fetched


async def test_a_harvest_whose_seeds_never_answer_fails_with_the_reason(sqlite_url):
    """The unedited placeholder seed (nothing listens there): before, the harvest completed green with nothing."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    settings = Settings.load(database_url=sqlite_url).with_overrides(**{"http.connect_timeout_s": 1.0})
    with FrontierStore.open(settings, upgrade=True):
        pass
    with pytest.raises(NothingFetched, match="no seed host answered") as raised:
        await aharvest(settings, SiteProfile.build(seeds=(dead,)))
    assert dead.rstrip("/") in str(raised.value)
    with FrontierStore.open(settings) as store:  # the cycle is recorded all the same
        assert store.last_run("extract") is not None


async def test_a_recrawl_of_a_site_gone_down_fails_and_one_of_a_live_site_does_not(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=8)], seed=34)
    settings = Settings.load(database_url=sqlite_url).with_overrides(**{"http.connect_timeout_s": 1.0})
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True):
        pass
    await aharvest(settings, profile)
    assert (await arecrawl(settings, profile)).silent is None  # all 304s and skips: still answers
    origin = web.origin("a")
    web.stop()
    with pytest.raises(NothingFetched, match=origin):
        await arecrawl(settings, profile)


async def test_a_sites_extraction_leaves_another_sites_hosts_on_the_same_frontier_alone(make_web, db_url):
    """Two sites share one frontier (a sites file's daily runs): extracting one never fetches the other's pages,
    which it would judge by its own scope (their links out of scope, so lost to the other site for good)."""
    from harvester import phases
    from harvester.phases.cycles import LocalSteps

    web = make_web([HostSpec("a", pages=10), HostSpec("b", pages=10)], seed=36)
    settings = Settings.load(database_url=db_url)
    one = SiteProfile.build(seeds=(web.seeds[0],), name="one")
    two = SiteProfile.build(seeds=(web.seeds[1],), name="two")
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, one)
        await phases.discover(store, settings, two)
    web.clear_records()
    await LocalSteps(settings, one).extract()
    assert {web.host_name(r.url) for r in web.records()} == {"a"}
    await LocalSteps(settings, two).extract()
    with FrontierStore.open(settings) as store:
        states = store.url_states()
    for name in ("a", "b"):
        assert all(states[url][0] == "done" for url in web.truth[name].allowed_detail_urls()), name


async def test_a_failed_extraction_finishes_its_run_row_as_failed_saying_why(make_web, db_url, monkeypatch):
    """The library's cycle, as the flow: a run that fails (here at the end of the round its pages were fetched in) is
    the last extraction ``harvester status`` shows, failed, with its error (cut to a line's worth) and the requests
    it sent per host. Before, its row stayed ``running`` and status showed the run before it as the last."""
    from harvester.phases.extract_host import ExtractWork
    from harvester.phases.runs import FAILED_ERROR_CHARS

    web = make_web([HostSpec("a", pages=8)], seed=37)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    said = "the round broke " * 100
    round_over = ExtractWork.round_over

    async def broken(self: ExtractWork) -> None:
        await round_over(self)
        if self.claimed_total >= len(web.truth["a"].allowed_detail_urls()):
            raise RuntimeError(said)

    monkeypatch.setattr(ExtractWork, "round_over", broken)
    with FrontierStore.open(settings, upgrade=True) as store:
        with pytest.raises(RuntimeError, match="the round broke"):
            await aharvest(settings, profile)
        last = store.last_run("extract")
    assert last is not None and last["status"] == "failed", last
    error = last["counters"]["error"]
    assert error.startswith("RuntimeError: the round broke") and len(error) == FAILED_ERROR_CHARS, error
    fetched = sum(host["fetched"] for host in last["counters"]["hosts"].values())
    assert fetched >= len(web.truth["a"].allowed_detail_urls()), last


async def test_a_failed_discovery_finishes_its_run_row_as_failed_saying_why(make_web, db_url, monkeypatch):
    """``LocalSteps.discover`` as ``extract``: a discovery that fails closes its run row ``failed`` with its error
    (it stayed ``running``, and ``harvester status`` showed the discovery before it as the last)."""
    from harvester.phases import discover_phase
    from harvester.phases.cycles import LocalSteps

    web = make_web([HostSpec("a", pages=4)], seed=40)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    hosts = discover_phase.discover_hosts

    async def broken(*args: object, **kwargs: object) -> None:
        await hosts(*args, **kwargs)  # type: ignore[arg-type]
        raise RuntimeError("the discovery broke")

    monkeypatch.setattr(discover_phase, "discover_hosts", broken)
    with FrontierStore.open(settings, upgrade=True) as store:
        with pytest.raises(RuntimeError, match="the discovery broke"):
            await LocalSteps(settings, profile).discover(refresh=False)
        last = store.last_run("discover")
    assert last is not None and last["status"] == "failed", last
    assert last["counters"]["error"] == "RuntimeError: the discovery broke", last
    from typer.testing import CliRunner

    from harvester.cli import app  # what `harvester status` shows of it: the run failed, and why

    shown = CliRunner().invoke(app, ["status", "--db", db_url], env={"COLUMNS": "200"}, terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert f"Last discovery (run {last['id']}) failed: RuntimeError: the discovery broke" in shown.output, shown.output


async def test_a_last_progress_report_that_fails_leaves_the_finished_harvest_finished(make_web, db_url, caplog):
    """The caller's progress sink (a Prefect artifact, an API away) raises on the run's last report: the report's
    failure is logged, and the harvest, its work done and written, is finished, not failed."""
    from harvester.phases.results import Progress

    web = make_web([HostSpec("a", pages=8)], seed=39)
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    finals: list[Progress] = []

    async def report(progress: Progress) -> None:
        if progress.final:
            finals.append(progress)
            raise RuntimeError("the progress sink broke")

    with FrontierStore.open(settings, upgrade=True) as store:
        cycle = await aharvest(settings, profile, on_progress=report)
        last = store.last_run("extract")
        states = store.url_states()
    assert finals, "control: the last report was made, and failed"
    assert last is not None and last["status"] == "completed", last
    assert all(states[url][0] == "done" for url in web.truth["a"].allowed_detail_urls())
    assert cycle.changes["new"] >= len(web.truth["a"].allowed_detail_urls()), cycle.changes
    assert "progress report failed (the last): the progress sink broke" in caplog.text


async def test_an_extraction_refused_a_busy_frontier_leaves_the_holders_run_row_alone(make_web, sqlite_url):
    """Another extraction holds the SQLite frontier (its lock; here taken by hand) and its run row is open: a second
    one resumes that row (same phase and profile) and is refused, ``FrontierBusy``. It never ran: the row is the
    holder's, and stays ``running``."""
    import fcntl
    import os

    from harvester.errors import FrontierBusy
    from harvester.phases import begin_run
    from harvester.phases.cycles import LocalSteps
    from harvester.phases.extraction_lock import lock_path

    web = make_web([HostSpec("a", pages=4)], seed=38)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True):
        pass
    holders = await begin_run(settings, "extract", profile)
    path = lock_path(settings)
    assert path is not None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"424242")
        with pytest.raises(FrontierBusy, match="pid 424242"):
            await LocalSteps(settings, profile).extract()
    finally:
        os.close(fd)
    with FrontierStore.open(settings) as store:
        row = store.get_run(holders)
    assert row is not None and row["status"] == "running" and row["finished_at"] is None, row
