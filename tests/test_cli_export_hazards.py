"""The files the command line writes, and the values it reads, from a stranger's black-box trial (issue 48):

- ``export -o`` naming the ``--db`` file truncated the frontier to 0 bytes, then said "database disk image is
  malformed"; any failed export left its output truncated. Refused now (exit 2, nothing touched), and every
  output is written beside the target and renamed over it only when complete.
- ``--db sqlite://crawl.db`` (two slashes) was a Rich traceback and exit 1; now one line and exit 2, for every
  command taking ``--db`` and for ``HARVESTER_DATABASE_URL``.
- The smaller ones: ``recrawl`` on an empty frontier names it, ``--since yesterday`` says the accepted forms,
  ``-o x.jsonl.gz`` is gzipped, ``--format warc -o x.jsonl`` is refused, ``-o /proc/x`` names the path and what to do,
  ``harvest --extractor ./missing.py:f`` creates no database and shows no progress before its error.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester.cli import app
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

HARVESTER = str(Path(sys.executable).parent / "harvester")


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real console script (``main``: its exit codes and one-line errors), in ``cwd``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}
    return subprocess.run([HARVESTER, *args], capture_output=True, text=True, timeout=300, check=False, cwd=cwd,
                          env={**clean, "COLUMNS": "400", **(env or {})})


def said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def crawl(tmp_path: Path) -> Path:
    """A real SQLite frontier with a few URLs, at tmp_path/crawl.db."""
    path = tmp_path / "crawl.db"
    with FrontierStore.open(Settings.load(database_url=f"sqlite:///{path}"), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"http://a.test/story/{i}", UrlKind.DETAIL, "seed") for i in range(5)])
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "warc"])
def test_export_onto_the_database_file_is_refused_and_touches_nothing(crawl, tmp_path, fmt):
    (tmp_path / "link.db").symlink_to(crawl.name)
    before = digest(crawl)
    for db, target in (("sqlite:///crawl.db", "crawl.db"), ("crawl.db", "./sub/../crawl.db"),
                       (str(crawl), "link.db"), ("sqlite:///link.db", str(crawl)), ("crawl.db", "crawl.db-wal"),
                       ("crawl.db", "crawl.db-journal")):
        (tmp_path / "sub").mkdir(exist_ok=True)
        done = run("export", "--format", fmt, "--db", db, "-o", target, cwd=tmp_path)
        text = said(done)
        assert done.returncode == 2, (db, target, text)
        assert "Traceback" not in text and "malformed" not in text, text
        assert str(Path(target)) in text and str(crawl) in text and "destroy the frontier" in text, text
        assert digest(crawl) == before, (db, target)
        assert not (tmp_path / "crawl.db-journal").exists()
    done = run("status", "--db", "crawl.db", cwd=tmp_path)
    assert done.returncode == 0 and "queued" in said(done), said(done)


def test_a_failed_export_leaves_the_existing_output_as_it_was(crawl, tmp_path, monkeypatch):
    """The output is replaced only by a complete export: a failure half way (a full disk here) leaves the last
    good file whole, and no temporary file behind."""
    import harvester.export as exporter

    target = tmp_path / "pages.jsonl"
    target.write_text('{"url": "the last good export"}\n')
    target.chmod(0o640)

    def half_then_full(pages, out, *, main=None):  # type: ignore[no-untyped-def]
        out.write(b'{"url": "half a line')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(exporter, "export_jsonl", half_then_full)
    out = CliRunner().invoke(app, ["export", "--db", str(crawl), "-o", str(target)])
    assert out.exit_code != 0
    assert target.read_text() == '{"url": "the last good export"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crawl.db", "pages.jsonl"]
    monkeypatch.undo()
    out = CliRunner().invoke(app, ["export", "--db", str(crawl), "-o", str(target)])
    assert out.exit_code == 0, out.output
    assert target.read_text() == ""  # no stored page yet: an empty export replaced it
    assert target.stat().st_mode & 0o777 == 0o640  # the replaced file keeps its permissions


def test_deployments_never_writes_over_its_sites_file(tmp_path):
    sites = tmp_path / "sites.toml"
    sites.write_text('[sites.shop]\nseeds = ["http://127.0.0.1:9/"]\n')
    done = run("deployments", "--sites", "sites.toml", "-o", "./sites.toml", cwd=tmp_path)
    assert done.returncode == 2, said(done)
    assert "is the --sites file" in said(done), said(done)
    assert sites.read_text() == '[sites.shop]\nseeds = ["http://127.0.0.1:9/"]\n'


TWO_SLASH_COMMANDS = [
    ["status"], ["export", "-o", "out.jsonl"], ["db", "check"], ["db", "upgrade"], ["harvest", "http://127.0.0.1:9/"],
    ["discover", "http://127.0.0.1:9/"], ["extract"], ["recrawl"], ["demo"],
]


@pytest.mark.parametrize("command", TWO_SLASH_COMMANDS, ids=lambda c: c[0] if c[0] != "db" else f"db-{c[1]}")
def test_a_two_slash_sqlite_url_is_one_line_naming_the_fix(tmp_path, command):
    done = run(*command, "--db", "sqlite://crawl.db", cwd=tmp_path)
    text = said(done)
    assert done.returncode == 2, text
    assert "Traceback" not in text and "ArgumentError" not in text, text
    assert "'sqlite://crawl.db'" in text and "sqlite:///crawl.db" in text and "(from the arguments)" in text, text
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)  # nothing created


def test_a_two_slash_sqlite_url_in_the_environment_says_it_came_from_there(tmp_path):
    done = run("status", cwd=tmp_path, env={"HARVESTER_DATABASE_URL": "sqlite://crawl.db"})
    text = said(done)
    assert done.returncode == 2, text
    assert "Traceback" not in text and "HARVESTER_DATABASE_URL" in text and "sqlite:///crawl.db" in text, text


def test_recrawl_of_an_empty_frontier_names_it(tmp_path):
    assert run("db", "upgrade", "--db", "empty.db", cwd=tmp_path).returncode == 0
    done = run("recrawl", "--db", "empty.db", cwd=tmp_path)
    assert done.returncode == 2, said(done)
    assert "no earlier harvest in the database sqlite:///empty.db" in said(done), said(done)


def test_since_that_is_not_a_time_says_the_forms(crawl, tmp_path):
    done = run("export", "--db", "crawl.db", "-o", "x.jsonl", "--since", "yesterday", cwd=tmp_path)
    text = said(done)
    assert done.returncode == 2, text
    assert "'yesterday' is not a time" in text and "2026-12-01T06:00:00" in text, text
    assert "too short" not in text and not (tmp_path / "x.jsonl").exists()


def test_outputs_named_for_a_format(crawl, tmp_path):
    done = run("export", "--db", "crawl.db", "-o", "x.jsonl.gz", cwd=tmp_path)
    assert done.returncode == 0 and "(gzipped)" in said(done), said(done)
    with gzip.open(tmp_path / "x.jsonl.gz", "rb") as f:
        assert f.read() == b""  # a valid gzip stream (no pages stored yet)
    (tmp_path / "x.jsonl").write_text("mine\n")
    done = run("export", "--db", "crawl.db", "--format", "warc", "-o", "x.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "writes a gzipped WARC file, not JSONL" in said(done), said(done)
    assert (tmp_path / "x.jsonl").read_text() == "mine\n"
    done = run("export", "--db", "crawl.db", "-o", "x.warc.gz", cwd=tmp_path)
    assert done.returncode == 2 and "add --format warc" in said(done), said(done)
    assert not (tmp_path / "x.warc.gz").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_an_output_that_cannot_be_created_names_it_and_what_to_do(crawl, tmp_path):
    done = run("export", "--db", "crawl.db", "-o", "/proc/out.jsonl", cwd=tmp_path)
    text = said(done)
    assert done.returncode == 2, text
    assert "'/proc/out.jsonl'" in text and "choose a directory you can write to" in text, text


def test_a_missing_extractor_is_refused_before_the_database_is_made(tmp_path):
    done = run("harvest", "http://127.0.0.1:9/", "--extractor", "./missing.py:f", "--db", "e.db", cwd=tmp_path)
    text = said(done)
    assert done.returncode == 2, text
    assert "missing.py" in text and "no file" in text, text
    assert "harvest:" not in done.stdout, done.stdout  # no progress line before the error
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


def test_a_symlink_is_written_through_and_a_pipe_written_into(crawl, tmp_path):
    """The rename-on-success must not replace what is not the user's file: a symlink keeps pointing where it did
    (its target is the export), and a named pipe (as /dev/stdout, /dev/null) is written into, never renamed over."""
    (tmp_path / "exports").mkdir()
    (tmp_path / "latest.jsonl").symlink_to("exports/day1.jsonl")
    done = run("export", "--db", "crawl.db", "-o", "latest.jsonl", cwd=tmp_path)
    assert done.returncode == 0, said(done)
    assert (tmp_path / "latest.jsonl").is_symlink() and (tmp_path / "exports" / "day1.jsonl").is_file()
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = subprocess.Popen(["cat", str(pipe)], stdout=subprocess.PIPE)
    try:
        done = run("export", "--db", "crawl.db", "--format", "warc", "-o", "pipe", cwd=tmp_path)
        assert done.returncode == 0, said(done)
        body, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert body[:2] == b"\x1f\x8b", body[:20]  # the gzipped WARC went through the pipe
    assert pipe.is_fifo()
