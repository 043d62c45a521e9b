"""A PostgreSQL server of one test's own (initdb in a temporary directory, a free loopback port), so a test can
stop, start and restart it without touching the shared server other tests use. Needs the PostgreSQL binaries
(the machine's server package); run as root, the server runs as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (/usr/lib/postgresql/*/bin)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """``start()``, ``stop()``, ``restart()``; ``url`` for SQLAlchemy. One database, ``harvester``."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: the server's user must be able to reach it (pytest's root dir is 0700).
        self.root = Path(tempfile.mkdtemp(prefix="harvester-pg-"))
        root = self.root
        self.data = root / "pgdata"
        self.port = _free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/harvester"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(root, "postgres", "postgres")
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")

    def _run(self, *argv: str) -> None:
        command = ["runuser", "-u", "postgres", "--", *argv] if self._as_root else list(argv)
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "-l", str(self.data / "log"),
                  "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=off", "start")
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                                     autocommit=True) as conn:
                    if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'harvester'").fetchone():
                        conn.execute("CREATE DATABASE harvester")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # already stopped
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
