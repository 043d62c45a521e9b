"""bench/scaleout.py starts each extraction process in a session of its own, as independent workers run (issue 32):
where the kernel shares the CPU between sessions first (Linux ``sched_autogroup_enabled``, on here), N processes
started in the bench's one session may share one session's CPU share; ``--one-session`` keeps the old way to
compare."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def scaleout() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # it imports its neighbour broad.py, as when run from bench/
    try:
        spec = importlib.util.spec_from_file_location("bench_scaleout", BENCH / "scaleout.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_each_extraction_process_is_started_in_a_session_of_its_own(tmp_path: Path) -> None:
    bench = scaleout()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    own = bench.start_extract(sleeper, dict(os.environ), tmp_path)
    shared = bench.start_extract(sleeper, dict(os.environ), tmp_path, one_session=True)
    try:
        assert os.getsid(own.pid) == own.pid != os.getsid(0)  # its own session: its own CPU share
        assert os.getsid(shared.pid) == os.getsid(0)  # --one-session: the bench's, as before
    finally:
        for proc in (own, shared):
            proc.kill()
            proc.wait()
