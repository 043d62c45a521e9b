"""A harvest on a small volume (issue 32): SQLite's WAL stays bounded well below the data, a full disk stops the
run with an error naming the file and the space left, and a rerun after freeing a little space finishes with
nothing lost.

Before: the WAL was checkpointed only past 64 MiB, so on a 20 MiB volume a 13.7 MB harvest failed with a 110 KB
database beside a 20.8 MB WAL (nothing checkpointed yet), and every rerun failed at the same point.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb

MB = 1_000_000
VOLUME = "20m"


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    """A 20 MiB tmpfs of its own (root only), unmounted after the test."""
    mount = tmp_path / "vol"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME}", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def harvest(web: TestWeb, db: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    env["HARVESTER_HTTP__ALLOW_ADDRESSES"] = '["127.0.0.0/8"]'
    return subprocess.run([str(Path(sys.executable).parent / "harvester"), "harvest", *web.seeds,  # our own script
                           "--db", f"sqlite:///{db}"], env=env, capture_output=True, text=True, check=False)


def fill(volume: Path, leave_bytes: int) -> Path:
    """A ballast file taking all but ``leave_bytes`` of the volume."""
    ballast = volume / "ballast"
    free = os.statvfs(volume).f_bavail * os.statvfs(volume).f_frsize
    with ballast.open("ab") as out:
        out.write(b"\0" * max(0, free - leave_bytes))
    return ballast


def free_some(ballast: Path, nbytes: int) -> None:
    with ballast.open("r+b") as out:
        out.truncate(max(0, ballast.stat().st_size - nbytes))


def test_a_full_small_disk_stops_the_harvest_clearly_and_a_rerun_after_freeing_a_little_finishes(volume: Path):
    specs = [HostSpec(f"d{n}", pages=150) for n in range(2)]
    db = volume / "frontier.db"
    with TestWeb(specs, seed=3) as web:
        ballast = fill(volume, MB // 2)  # far less than the data (~2.4 MB): the first harvest cannot finish
        failed = harvest(web, db)
        assert failed.returncode != 0
        message = failed.stdout + failed.stderr
        assert "disk is full" in message and str(db) in message and "MB free" in message, message[-2000:]

        # A little: the data needs ~2.4 MB, its WAL a quarter of that (1 MiB at least), docs/operations.md. With
        # 1 + 3 MB it was too tight once the frontier kept robots refusals and queue counts (failed beside two
        # busy loops, 0.0 MB free).
        free_some(ballast, 4 * MB)
        peak = [0]
        stop = threading.Event()

        def watch_wal() -> None:  # the WAL's largest size while the rerun writes (a lower bound of the true peak)
            wal = Path(f"{db}-wal")
            while not stop.wait(0.02):
                peak[0] = max(peak[0], wal.stat().st_size if wal.exists() else 0)

        watcher = threading.Thread(target=watch_wal)
        watcher.start()
        try:
            rerun = harvest(web, db)
        finally:
            stop.set()
            watcher.join()
        assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-3000:]
        details = {url for spec in specs for url in web.truth[spec.name].allowed_detail_urls()}
    with FrontierStore.open(Settings(database_url=f"sqlite:///{db}")) as store:
        states = store.url_states()
    assert [url for url in details if states[url][0] != "done"] == []
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    size = db.stat().st_size
    assert peak[0] <= max(size / 4, 1.1 * MB) + 1 * MB, (peak[0], size)  # well below the data, not 64 MiB
