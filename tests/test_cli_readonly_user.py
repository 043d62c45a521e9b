"""A frontier made read-only with ``chmod a-w`` (an archived crawl handed to another user) is read by the read-only
commands of a user who cannot write it (issue 33, item 7).

Before: opening it set the journal mode, so ``status`` and ``export`` failed with "attempt to write a readonly
database". Root ignores file modes, and the tests run as root, so this case was untested: here the commands run as
root without the two capabilities that let it ignore them (``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``), through
util-linux's ``setpriv`` (every Debian system has util-linux: ``Essential: yes``); run as another user already, they
run as it. Not as ``nobody``: a fresh clone in a 0700 temporary directory (CI's) is out of its reach, and it could
not even start the harvester. Never skipped: a machine that cannot drop them fails here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester import harvest
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

HARVESTER = str(Path(sys.executable).parent / "harvester")
PYTHON = sys.executable


def as_unprivileged(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``args`` as a user that file modes apply to: root without the capabilities to ignore them, else ourselves."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HARVESTER_", "PREFECT_"))}
    env["HOME"] = str(cwd)  # read-only too: nothing may be written beside the frontier
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def snapshot(directory: Path) -> dict[str, tuple[int, int, str]]:
    return {path.name: (path.stat().st_mode, path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
            for path in sorted(directory.iterdir())}


@pytest.fixture
def archived(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A copy of a harvested frontier, its file and directory ``chmod a-w``, and a directory the export may be
    written to."""
    from harvester.testing.web import TestWeb

    harvested = tmp_path / "crawl.db"
    with TestWeb([HostSpec("a", pages=40)], seed=33, mode="thread") as web:
        harvest(Settings.load(database_url=str(harvested)), SiteProfile.build(seeds=tuple(web.seeds)))
    top = Path(tempfile.mkdtemp(prefix="harvester-archive-", dir="/tmp"))
    try:
        top.chmod(0o755)
        archive, out = top / "archive", top / "out"
        archive.mkdir()
        out.mkdir()
        shutil.copy(harvested, archive / "crawl.db")  # a closed frontier: one file, no -wal beside it
        (archive / "crawl.db").chmod(0o444)  # chmod a-w, file and directory
        archive.chmod(0o555)
        yield archive / "crawl.db", out
    finally:
        archive.chmod(0o755)
        shutil.rmtree(top)


def test_a_frontier_made_read_only_with_chmod_is_read_by_a_user_who_cannot_write_it(archived, tmp_path):
    db, out = archived
    before = snapshot(db.parent)
    assert not stat.S_IMODE(db.stat().st_mode) & 0o222 and not stat.S_IMODE(db.parent.stat().st_mode) & 0o222
    probe = "import sqlite3,sys; sqlite3.connect(sys.argv[1]).execute('CREATE TABLE probe (x)')"
    control = as_unprivileged([PYTHON, "-c", probe, str(db)], db.parent)
    assert control.returncode != 0 and "readonly database" in control.stderr, control  # modes apply to this user

    status = as_unprivileged([HARVESTER, "status", "--json", "--db", str(db)], db.parent)
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)
    assert counts["by_state"].get("done", 0) > 0, counts
    said = as_unprivileged([HARVESTER, "status", "--db", str(db)], db.parent)
    assert said.returncode == 0, said.stderr
    check = as_unprivileged([HARVESTER, "db", "check", "--db", str(db)], db.parent)
    assert check.returncode == 0, check.stderr
    exported = as_unprivileged([HARVESTER, "export", "-o", str(out / "all.jsonl"), "--db", str(db)], db.parent)
    assert exported.returncode == 0, exported.stderr
    records = [json.loads(line) for line in (out / "all.jsonl").read_text().splitlines()]
    assert len(records) >= counts["by_state"]["done"] // 2, (len(records), counts)

    for run in (status, said, check, exported):
        assert "readonly database" not in run.stdout + run.stderr
    assert snapshot(db.parent) == before  # nothing created beside it, nothing in it modified
