"""The CLI's own commands that need no Prefect API: status, db upgrade, export, and its error reporting."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from harvester import harvest, phases
from harvester.cli import app
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

runner = CliRunner()


async def test_status_shows_states_and_the_last_extractions_per_host_diagnostics(make_web, sqlite_url):
    web = make_web([HostSpec("a", pages=20), HostSpec("b", pages=10, latency_s=0.002)], seed=2)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    with FrontierStore.open(settings, upgrade=True) as store:
        await phases.discover(store, settings, profile)
        run_id = await phases.begin_run(settings, "extract", profile)
        result = await phases.extract(store, settings, profile, run_id=run_id)
    await phases.finish_run(settings, run_id, "extract", [result])

    out = runner.invoke(app, ["status", "--json", "--db", sqlite_url])
    assert out.exit_code == 0, out.output
    status = json.loads(out.output)
    assert status["by_state"]["done"] == status["total"]
    hosts = status["last_extract"]["hosts"]
    assert set(hosts) == {web.origin("a"), web.origin("b")}
    assert hosts[web.origin("a")]["fetched"] >= len(web.truth["a"].allowed_detail_urls())
    assert all(1 <= host["peak_in_flight"] <= host["limit"] for host in hosts.values())

    table = runner.invoke(app, ["status", "--db", sqlite_url])
    assert table.exit_code == 0
    assert "per-host diagnostics" in table.output


def test_export_writes_jsonl_and_warc(make_web, sqlite_url, tmp_path):
    web = make_web([HostSpec("a", pages=8)], seed=3)
    settings = Settings.load(database_url=sqlite_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))

    harvest(settings, profile)  # the library's blocking form, as a script calls it
    jsonl = tmp_path / "out.jsonl"
    out = runner.invoke(app, ["export", "--format", "jsonl", "-o", str(jsonl), "--db", sqlite_url])
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert {line["url"] for line in lines} >= set(web.truth["a"].allowed_detail_urls())
    warc = tmp_path / "out.warc.gz"
    out = runner.invoke(app, ["export", "--format", "warc", "-o", str(warc), "--db", sqlite_url])
    assert out.exit_code == 0, out.output
    assert warc.stat().st_size > 0
    from warcio.archiveiterator import ArchiveIterator

    with warc.open("rb") as stream:
        records = sum(1 for _ in ArchiveIterator(stream)) - 1  # the warcinfo record is not counted
    assert f"wrote {records} WARC records" in " ".join(out.output.split())


def test_export_into_a_missing_directory_is_a_clear_error(sqlite_url, tmp_path):
    target = tmp_path / "no-such-dir" / "out.jsonl"
    out = runner.invoke(app, ["export", "--format", "jsonl", "-o", str(target), "--db", sqlite_url])
    assert out.exit_code != 0
    assert "does not exist" in " ".join(out.output.split())
    assert not isinstance(out.exception, FileNotFoundError)


def test_db_upgrade_reports_head(sqlite_url):
    out = runner.invoke(app, ["db", "upgrade", "--db", sqlite_url])
    assert out.exit_code == 0, out.output
    assert "schema at head" in out.output


def test_a_bad_format_is_refused_by_name(sqlite_url, tmp_path):
    out = runner.invoke(app, ["export", "--format", "csv", "-o", str(tmp_path / "x"), "--db", sqlite_url])
    assert out.exit_code != 0
    assert "csv" in out.output


def test_the_last_discoverys_problems_are_printed(sqlite_url, capsys):
    from harvester import cli_tables

    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        run = store.start_run("discover")
        problems = [f"http://h{i}.test: robots.txt unavailable (connect)" for i in range(20)]
        store.finish_run(run, status="completed", counters={"counters": {}, "problems": problems})
    cli_tables.print_problems(settings)
    out = " ".join(capsys.readouterr().out.split())
    assert "http://h0.test: robots.txt unavailable (connect)" in out
    assert f"and {20 - cli_tables.MAX_PROBLEMS_SHOWN} more" in out


def test_a_commands_host_tables_show_the_first_hosts_and_status_shows_all(sqlite_url, capsys):
    from harvester import cli_tables
    from harvester.records import DiscoveredUrl, UrlKind

    settings = Settings.load(database_url=sqlite_url)
    hosts = [f"h{i:02d}.test" for i in range(cli_tables.MAX_HOSTS_SHOWN + 5)]  # shown without the scheme
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"http://{h}/a", UrlKind.DETAIL, "seed") for h in hosts])
    cli_tables.print_status(settings)
    shown = capsys.readouterr().out
    assert sum(h in shown for h in hosts) == cli_tables.MAX_HOSTS_SHOWN
    assert "and 5 more hosts" in " ".join(shown.split())
    cli_tables.print_status(settings, most=None)
    everything = capsys.readouterr().out
    assert all(h in everything for h in hosts), everything


def test_export_from_a_mistyped_database_keeps_the_output_file(tmp_path):
    target = tmp_path / "out.jsonl"
    target.write_text("yesterday's export\n")
    out = runner.invoke(app, ["export", "-o", str(target), "--db", f"sqlite:///{tmp_path / 'typo.db'}"])
    assert out.exit_code != 0
    assert "typo.db" in str(out.exception)  # main() prints it as one line: SchemaOutOfDate names the database
    assert target.read_text() == "yesterday's export\n"


def test_the_progress_line_ends_on_the_final_counts(sqlite_url, capsys):
    """The watcher reads the frontier every half second; what the run did after its last reading must still be
    on the line left on screen (it used to end on a stale count)."""
    import asyncio

    from harvester import cli_watch
    from harvester.records import DiscoveredUrl, UrlKind

    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        pass

    async def run() -> str:
        await asyncio.sleep(0.1)  # after the watcher's first reading, well before its next
        with FrontierStore.open(settings) as store:
            store.add_discovered([DiscoveredUrl(f"http://a.test/story-{n}", UrlKind.DETAIL, "seed") for n in range(3)])
        return "ran"

    assert cli_watch.run_with_progress(settings, "harvest", run()) == "ran"
    assert "harvest: 0 done, 3 queued" in capsys.readouterr().out


def test_a_cycles_new_changed_gone_and_deferred_urls_are_all_listed(capsys):
    from harvester.cli_tables import print_changes

    print_changes({"new": 2, "changed": 1, "restyled": 3, "gone": 1, "missing": 4, "deferred": 7, "fetched": 9,
                   "not_modified": 5, "failed": 0, "hook_failed": 2, "new_urls": ["http://h.test/a", "http://h.test/b"],
                   "changed_urls": ["http://h.test/c"], "gone_urls": ["http://h.test/old"]})
    out = capsys.readouterr().out
    assert "new: 2   changed: 1   restyled: 3   gone: 1\nmissing: 4   moved: 0   restored: 0   deferred: 7\n" in out
    assert "fetched: 9   not modified: 5   failed: 0   hook failed: 2\n" in out
    assert "changed: http://h.test/c" in out
    assert "new: http://h.test/a" in out and "new: http://h.test/b" in out
    assert "gone: http://h.test/old" in out


def test_without_a_prefect_server_a_harvest_runs_in_process_and_never_starts_prefect(make_web, tmp_path):
    """No server configured: the library runs the cycle here (issue 22: ~1 s of fixed cost instead of the ~10 s
    of Prefect's temporary server, bench/cli_fixed_cost.py); the frontier records the same runs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from harvester import FrontierStore
    from harvester.settings import Settings
    from harvester.testing.sites import HostSpec

    web = make_web([HostSpec("a", pages=12)], seed=35)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_"))}
    env |= {"HARVESTER_DATABASE_URL": db, "PREFECT_HOME": str(home)}
    harvester = str(Path(sys.executable).parent / "harvester")
    subprocess.run([harvester, "db", "upgrade"], env=env, check=True, capture_output=True, timeout=120)
    done = subprocess.run([harvester, "harvest", *web.seeds, "--name", "local"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "new: " in done.stdout and "Frontier:" in done.stdout
    assert not (home / "prefect.db").exists(), "Prefect's temporary server was started"
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        assert store.last_run("discover")["profile"]["name"] == "local"  # type: ignore[index]
        assert store.last_run("extract")["status"] == "completed"  # type: ignore[index]
        states = store.url_states()
    assert all(states[url][0] == "done" for url in web.truth["a"].allowed_detail_urls())
