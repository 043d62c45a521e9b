"""How the CLI opens the frontier (issue 33, items 6 and 7): a path works as --db, a read-only command never creates
a database, a database that cannot exist fails at once naming the fix, an unreachable server is waited for out
loud, and a read-only file or mount is read by every read-only command."""

from __future__ import annotations

import json
import os
import queue
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester.cli import app
from harvester.errors import DatabaseUnavailable, StoreError
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

runner = CliRunner()
HARVESTER = str(Path(sys.executable).parent / "harvester")


@pytest.fixture
def bare_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no frontier, no harvester.toml and no HARVESTER_* in the environment."""
    for key in [k for k in os.environ if k.startswith("HARVESTER_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _said(out) -> str:  # type: ignore[no-untyped-def]
    return " ".join((out.output + (str(out.exception) if out.exception else "")).split())


def test_a_path_works_as_db_as_a_url_does(bare_dir):
    out = runner.invoke(app, ["db", "upgrade", "--db", "plain.db"])
    assert out.exit_code == 0, _said(out)
    assert (bare_dir / "plain.db").is_file()
    with FrontierStore.open(Settings.load(database_url=f"sqlite:///{bare_dir / 'plain.db'}")) as store:
        store.add_discovered([DiscoveredUrl("http://a.test/story", UrlKind.DETAIL, "seed")])
    for db in ("plain.db", str(bare_dir / "plain.db"), "sqlite:///plain.db"):
        out = runner.invoke(app, ["status", "--json", "--db", db])
        assert out.exit_code == 0, _said(out)
        assert json.loads(out.output)["total"] == 1
    (bare_dir / "crawls").mkdir()
    out = runner.invoke(app, ["status", "--db", "crawls"])
    assert out.exit_code != 0
    assert "'crawls' is a directory" in _said(out) and "crawls/harvester.db" in _said(out)
    out = runner.invoke(app, ["harvest", "http://127.0.0.1:9/", "--db", "no-such-dir/crawl.db"])
    assert out.exit_code != 0
    assert "the directory no-such-dir does not exist" in _said(out)
    assert not (bare_dir / "no-such-dir").exists()


@pytest.mark.parametrize("command", [
    ["status"], ["status", "--json"], ["export", "-o", "out.jsonl"], ["db", "check"], ["extract"], ["recrawl"],
    ["extract", "http://a.test/"], ["recrawl", "http://a.test/"],
])
def test_a_command_that_needs_a_frontier_never_creates_one_and_names_the_one_it_looked_for(bare_dir, command):
    out = runner.invoke(app, command)
    assert out.exit_code != 0
    said = _said(out)
    assert f"no frontier at {bare_dir / '.harvester' / 'harvester.db'}" in said, said
    assert "harvester harvest SEED" in said
    assert not (bare_dir / ".harvester").exists()
    assert not (bare_dir / "out.jsonl").exists()


def test_once_a_frontier_exists_the_same_commands_read_it(bare_dir):
    """The control: the refusal above is about the missing frontier, not the command."""
    assert runner.invoke(app, ["db", "upgrade"]).exit_code == 0
    assert (bare_dir / ".harvester" / "harvester.db").is_file()
    out = runner.invoke(app, ["status"])
    assert out.exit_code == 0, _said(out)
    assert "frontier: sqlite:///.harvester/harvester.db" in out.output
    assert runner.invoke(app, ["export", "-o", "out.jsonl"]).exit_code == 0


def test_a_postgresql_database_that_cannot_exist_fails_at_once_naming_the_fix(pg_url):
    """(``pg_url``: the server answers; the databases asked for below are not on it.)"""
    cases = {
        "postgresql://postgres@127.0.0.1:5432/hv_no_such_db": ('database "hv_no_such_db" does not exist',
                                                               "CREATE DATABASE"),
        "postgresql://hv_no_such_role@127.0.0.1:5432/postgres": ('role "hv_no_such_role" does not exist',
                                                                 "correct its name in the URL"),
    }
    for url, (reason, fix) in cases.items():
        out = runner.invoke(app, ["status", "--db", url])
        assert out.exit_code != 0
        assert isinstance(out.exception, StoreError) and not isinstance(out.exception, DatabaseUnavailable)
        assert reason in str(out.exception) and fix in str(out.exception), out.exception


def test_an_empty_postgresql_database_is_not_set_up_by_a_read_only_command(pg_url):
    out = runner.invoke(app, ["status", "--db", pg_url])
    assert out.exit_code != 0
    assert "no frontier in" in str(out.exception) and "harvester db upgrade" in str(out.exception)
    import psycopg

    with psycopg.connect(pg_url.replace("+psycopg", "")) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    assert tables == []  # nothing was created


def test_an_unreachable_server_is_waited_for_saying_so_and_for_how_long(tmp_path):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_"))}
    proc = subprocess.Popen([HARVESTER, "status", "--db", f"postgresql://postgres@127.0.0.1:{port}/x"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr or ()], daemon=True).start()
    try:
        line = lines.get(timeout=120)  # the first thing it says, long before it gives up
        assert proc.poll() is None
        assert f"127.0.0.1:{port}" in line and "waiting up to 180 s for it to answer" in line, line
    finally:
        proc.kill()
        proc.wait()


def _frontier_with_pages(path: Path) -> None:
    with FrontierStore.open(Settings.load(database_url=str(path))) as store:
        store.add_discovered([DiscoveredUrl(f"http://a.test/story-{n}", UrlKind.DETAIL, "seed") for n in range(5)])


@pytest.fixture
def read_only_mount(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A directory holding a frontier, seen through a read-only bind mount (an archived crawl)."""
    source, mounted = tmp_path / "archive", tmp_path / "ro"
    source.mkdir()
    mounted.mkdir()
    _frontier_with_pages(source / "crawl.db")
    done = subprocess.run(f"mount --bind {source} {mounted} && mount -o remount,bind,ro {mounted}", shell=True,
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make a read-only mount here: {done.stderr.strip()}")
    try:
        yield mounted / "crawl.db"
    finally:
        done = subprocess.run(["umount", str(mounted)], capture_output=True, text=True)
        assert done.returncode == 0, f"the mount is still in use (a file left open?): {done.stderr}"


def test_a_frontier_on_a_read_only_mount_is_read_by_every_read_only_command(read_only_mount, tmp_path):
    conn = sqlite3.connect(read_only_mount)
    with pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|unable to open"):
        conn.execute("CREATE TABLE probe (x)")  # the control: what opening it for writing meets
    conn.close()
    db = str(read_only_mount)
    out = runner.invoke(app, ["status", "--json", "--db", db])
    assert out.exit_code == 0, _said(out)
    assert json.loads(out.output)["by_state"] == {"queued": 5}
    out = runner.invoke(app, ["db", "check", "--db", db])
    assert out.exit_code == 0, _said(out)
    target = tmp_path / "out.jsonl"
    out = runner.invoke(app, ["export", "-o", str(target), "--db", db])
    assert out.exit_code == 0, _said(out)
    assert target.is_file()
    out = runner.invoke(app, ["extract", "http://a.test/", "--db", db])
    assert out.exit_code != 0
    assert "cannot be written (a read-only file or mount)" in _said(out)
    assert sorted(os.listdir(read_only_mount.parent)) == ["crawl.db"]


def test_a_sqlite_url_without_a_path_says_it_names_no_file(tmp_path):
    """``--db sqlite:///`` (the path left out) was a database in memory, and the run said "database error on
    sqlite:///: no such table: urls"; it is refused before anything opens, saying what to write."""
    out = CliRunner().invoke(app, ["status", "--db", "sqlite:///"], env={"COLUMNS": "300"}, terminal_width=300)
    said = _said(out)
    assert out.exit_code != 0, said
    assert "'sqlite:///' names no file" in said and "sqlite:///crawl.db" in said, said
    assert "no such table" not in said
