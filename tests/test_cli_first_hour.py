"""What a newcomer meets in the first hour (issue 34): the version, help that states defaults and units, an
``--since`` read as UTC as it says, config errors that name where the bad value came from and the key meant,
and the demo's printed commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester import ConfigError, Settings, SiteProfile, __version__, harvest
from harvester.cli import app
from harvester.cli_demo import shell_lines
from harvester.testing.sites import HostSpec

runner = CliRunner()


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_the_version_is_printed(flag):
    out = runner.invoke(app, [flag])
    assert out.exit_code == 0
    assert out.output.split()[:2] == ["harvester", __version__]


def test_help_states_the_db_format_the_defaults_and_what_the_budget_counts():
    out = runner.invoke(app, ["harvest", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    text = " ".join(out.output.replace("│", " ").split())  # the words, without the box drawn around them
    assert "sqlite:///path/to/file.db" in text and "postgresql+psycopg://" in text  # the --db format
    assert "sqlite:///.harvester/harvester.db" in text  # its default
    assert "[default: (adaptive: from 2 up to 4 (politeness.per_host_start, max_per_host_limit))]" in text
    assert "the site profile's per_host_limit" in text  # --per-host writes the profile's field, as a sites file does
    assert "Detail pages answered per host in each extraction run" in text
    assert "listing pages" in text and "100000" in text
    assert "./file.py:function" in text


@pytest.fixture
def tokyo(monkeypatch):
    """This machine's local time 9 h ahead of UTC: a zone-less time read as local would be off by 9 h."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_export_since_without_a_zone_is_utc(make_web, tmp_path, tokyo):
    web = make_web([HostSpec("a", pages=5)], seed=11)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    harvest(Settings.load(database_url=db), SiteProfile.build(seeds=tuple(web.seeds)))
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    written = {}
    for label, since in (("hour before", now - timedelta(hours=1)), ("hour after", now + timedelta(hours=1))):
        out = tmp_path / f"{label}.jsonl"
        done = runner.invoke(app, ["export", "--db", db, "-o", str(out), "--since", since.isoformat()])
        assert done.exit_code == 0, done.output
        written[label] = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(written["hour before"]) >= 5
    assert written["hour after"] == []  # read as Tokyo time it would be 8 h ago: every page
    zoned = (now + timedelta(hours=1)).replace(tzinfo=UTC).astimezone().isoformat()  # the same instant, +09:00
    done = runner.invoke(app, ["export", "--db", db, "-o", str(tmp_path / "z.jsonl"), "--since", zoned])
    assert done.exit_code == 0 and (tmp_path / "z.jsonl").read_text() == ""


def test_a_misspelled_key_in_harvester_toml_is_named_with_its_file_and_the_key_meant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("harvester.toml").write_text("[politeness]\nper_host_strat = 3\n")
    with pytest.raises(ConfigError) as caught:
        Settings.load()
    message = str(caught.value)
    assert "politeness.per_host_strat=3 (from harvester.toml): unknown key; did you mean 'politeness.per_host_start'?" \
        in message
    assert "HARVESTER_" not in message  # no env hint for a value that came from the file
    assert "Extra inputs" not in message


def test_a_misspelled_env_variable_is_named_as_such(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARVESTER_HTTP__USER_AGNET", "me/1.0 (+https://example.org/)")
    with pytest.raises(ConfigError, match=r"\(from env HARVESTER_HTTP__USER_AGNET\): unknown key; did you mean "
                                          r"'http.user_agent'\?"):
        Settings.load()
    monkeypatch.delenv("HARVESTER_HTTP__USER_AGNET")
    monkeypatch.setenv("HARVESTER_HTTP__USER_AGENT", "me/1.0 (+https://example.org/)")  # control: spelled right
    assert Settings.load().http.user_agent.startswith("me/1.0")


def test_a_bad_group_and_a_bad_value_each_say_where_they_came_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("harvester.toml").write_text("[politness]\nper_host_limit = 3\n[http]\ntimeout_s = -1\n")
    with pytest.raises(ConfigError) as caught:
        Settings.load()
    assert "politness={...} (from harvester.toml): unknown key; did you mean 'politeness'?" in str(caught.value)
    assert "http.timeout_s=-1 (from harvester.toml)" in str(caught.value)
    Path("harvester.toml").unlink()
    with pytest.raises(ConfigError, match=r"per_host_start=0 \(from the arguments\)"):
        Settings.load().with_overrides(**{"politeness.per_host_start": 0})


def test_a_long_command_is_broken_between_arguments_and_never_wider_than_asked():
    argv = ["/home/someone/.venv/bin/harvester", "export", "--db", "sqlite:///harvester-demo/demo.db", "--latest",
            "-o", "harvester-demo/pages.jsonl"]
    lines = shell_lines(argv, 60)
    assert len(lines) > 1 and all(len(line) <= 60 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert " ".join(line.removesuffix(" \\").strip() for line in lines).split() == argv  # nothing cut or split
    assert not any(line.rstrip(" \\").endswith(("--db", "-o")) for line in lines)  # an option keeps its value
    assert shell_lines(["harvester", "status"], 60) == ["harvester status"]
    assert shell_lines(["harvester", "-o", "a file.jsonl"], 60) == ["harvester -o 'a file.jsonl'"]


def first_column(rendered: str, title: str) -> list[str]:
    """The first column of the table titled ``title`` as rows: a cell folded over several lines joined again (a
    line whose second column is empty continues the row above)."""
    lines = rendered.split(title, 1)[1].splitlines()
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("┡")) + 1:]
    rows: list[str] = []
    for line in body:
        if not line.startswith("│"):
            break
        cells = line.split("│")[1:-1]
        if cells[1].strip():
            rows.append(cells[0].strip())
        else:
            rows[-1] += cells[0].strip()
    return rows


async def test_host_tables_at_80_columns_tell_every_host_apart(sqlite_url, capsys, monkeypatch):
    from harvester import cli_tables, phases
    from harvester.frontier import FrontierStore
    from harvester.phases import PhaseResult
    from harvester.records import DiscoveredUrl, UrlKind

    monkeypatch.setattr(cli_tables.console, "width", 80)  # a default terminal, a log file, CI
    origins = [f"http://127.0.1.{n}:4{n:04d}" for n in range(1, 4)] + [
        f"http://www.a-rather-long-subdomain-name-{n}.example-university.ac.uk" for n in range(2)]
    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{o}/a", UrlKind.DETAIL, "seed") for o in origins])
    profile = SiteProfile.build(seeds=(origins[0] + "/",))
    run_id = await phases.begin_run(settings, "extract", profile)
    hosts = {o: {"fetched": 100 + n, "not_modified": 7, "errors": {"http_5xx": 3, "timeout": 1},
                 "peak_in_flight": 4, "limit": 3, "rate_per_s": 12.5, "parked_reason": None}
             for n, o in enumerate(origins)}
    await phases.finish_run(settings, run_id, "extract", [PhaseResult(phase="extract", hosts=hosts)])

    cli_tables.print_status(settings)
    rendered = capsys.readouterr().out
    assert max(len(line) for line in rendered.splitlines()) <= 80
    labels = sorted(o.removeprefix("http://") for o in origins)
    assert sorted(first_column(rendered, "Frontier:")) == labels
    assert sorted(first_column(rendered, "Last extraction")) == labels
    assert "host (http)" in rendered and "…" not in rendered  # nothing cut to a shared prefix
    assert "4 / 3" in rendered and "peak/limit" not in rendered
    assert ("the most requests open at once / the limit when the run ended (adaptive, unless --per-host fixed it)"
            in " ".join(rendered.split()))


def test_the_progress_bar_ends_on_what_was_finished_not_on_what_waits_for_a_later_run(sqlite_url, capsys):
    """What is still queued when a run ends (deferred by the budget, a retry due later) is not part of the bar's
    total: it used to end at 319/703 after a budgeted harvest."""
    from harvester import cli_watch
    from harvester.frontier import FrontierStore
    from harvester.records import DiscoveredUrl, UrlKind

    settings = Settings.load(database_url=sqlite_url)
    with FrontierStore.open(settings, upgrade=True):
        pass

    async def run() -> None:
        with FrontierStore.open(settings) as store:
            store.add_discovered([DiscoveredUrl(f"http://a.test/story-{n}", UrlKind.DETAIL, "seed") for n in range(3)])

    cli_watch.run_with_progress(settings, "harvest", run())
    out = capsys.readouterr().out
    assert "harvest: 0 done, 3 queued for later" in out
    assert "0/3" not in out


def test_a_misspelled_top_level_env_variable_is_refused_not_ignored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARVESTER_DATABSE_URL", f"sqlite:///{tmp_path / 'mine.db'}")
    with pytest.raises(ConfigError, match=r"env HARVESTER_DATABSE_URL: no such setting; did you mean "
                                          r"HARVESTER_DATABASE_URL\?"):
        Settings.load()
    monkeypatch.delenv("HARVESTER_DATABSE_URL")
    monkeypatch.setenv("HARVESTER_HOME", str(tmp_path))  # control: not a setting, and no setting's near miss
    monkeypatch.setenv("HARVESTER_POLITNESS__PER_HOST_LIMIT", "3")
    with pytest.raises(ConfigError, match=r"did you mean HARVESTER_POLITENESS__PER_HOST_LIMIT\?"):
        Settings.load()
    monkeypatch.delenv("HARVESTER_POLITNESS__PER_HOST_LIMIT")
    assert Settings.load().database_url


def test_a_clock_that_is_no_instant_stops_the_command_with_one_line_before_it_opens_anything(tmp_path):
    """``HARVESTER_NOW=tomorrow`` raised a ValueError at import: a traceback, and nothing said which command."""
    database = tmp_path / "h.db"
    env = {**os.environ, "HARVESTER_NOW": "tomorrow"}
    done = subprocess.run(  # our own console script, no shell
        [str(Path(sys.executable).parent / "harvester"), "harvest", "http://127.0.0.1:9/", "--db", f"sqlite:///{database}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "HARVESTER_NOW='tomorrow' is not an ISO 8601 instant" in done.stderr
    assert not database.exists()
