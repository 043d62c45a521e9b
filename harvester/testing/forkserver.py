"""A fork server for the kill tests: the ~3 s of imports paid once, then one forked child per run, killed at will.

The child script calls ``serve(run)``: each stdin line ``run ARGS`` forks a child that runs ``run(ARGS)`` (a
coroutine) and answers its pid; ``wait PID`` answers its exit status (negative: the signal that killed it). A child
exits 0 when ``run`` returns. The test talks to it through ``ForkServer``. Never imported by the library.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any


def serve(run: Callable[[str], Coroutine[Any, Any, None]], *, own_process_group: bool = False) -> None:
    """Answer ``run``/``wait`` lines on stdin until it closes. ``own_process_group``: each child leads a process
    group of its own, so a test can kill it together with anything it started."""
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "run":
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    if own_process_group:
                        os.setpgid(0, 0)
                    asyncio.run(run(arg))
                    code = 0
                finally:
                    os._exit(code)
            answer = str(pid)
        elif command == "wait":
            _, status = os.waitpid(int(arg), 0)
            answer = str(os.waitstatus_to_exitcode(status))
        else:
            answer = f"unknown command {command!r}"
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


class ForkServer:
    """The test's side: starts ``script`` (which calls ``serve``) with ``args``; ``run(...) -> pid``,
    ``wait(pid) -> exit code``. The child sees no ``HARVESTER_*`` variable of the test's environment."""

    def __init__(self, script: Path, args: list[str], cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}
        self.proc = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE,  # noqa: S603
                                     stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)

    def _ask(self, line: str) -> str:
        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the fork server was started without pipes")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def run(self, *args: object) -> int:
        """Start a child on ``args`` (times as ISO 8601); its pid."""
        words = [a.isoformat() if isinstance(a, datetime) else str(a) for a in args]
        return int(self._ask(" ".join(["run", *words])))

    def wait(self, pid: int) -> int:
        return int(self._ask(f"wait {pid}"))

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
