"""The CLI's process: a fast exit that still runs exit handlers and flushes, or waits for what still runs; imports
with the collector paused, then frozen."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from harvester import FrontierStore, Settings
from harvester.testing.sites import HostSpec


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)


def test_exit_now_keeps_the_code_the_buffered_output_and_the_exit_handlers():
    done = run("""
        import atexit, sys
        from harvester.cli_process import exit_now
        atexit.register(lambda: print("handler ran"))
        sys.stdout.write("buffered, no newline")
        sys.stderr.write("on stderr")
        exit_now(3)
        print("never")
    """)
    assert done.returncode == 3
    assert done.stdout == "buffered, no newlinehandler ran\n"
    assert done.stderr == "on stderr"


def test_exit_now_leaves_a_running_thread_to_the_ordinary_exit():
    done = run("""
        import threading, time
        from harvester.cli_process import exit_now
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
        exit_now(4)
    """)
    assert done.returncode == 4
    assert done.stdout == "thread finished\n"


def test_a_command_that_fails_still_exits_with_its_code_and_message(tmp_path):
    done = subprocess.run([sys.executable, "-c", "from harvester.cli import main; main()", "export", "-o",
                           str(tmp_path / "out.jsonl"), "--db", f"sqlite:///{tmp_path / 'missing.db'}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "missing.db" in done.stderr


def test_loading_pauses_the_collector_and_freezes_what_it_loaded():
    done = run("""
        import gc
        from harvester.cli_process import loading
        with loading():
            paused = not gc.isenabled()
            import json.decoder
        print(paused, gc.isenabled(), gc.get_freeze_count() > 0)
    """)
    assert done.stdout.split() == ["True", "True", "True"]


def test_exit_now_ends_the_idle_extraction_thread_and_exits_at_once():
    """The extraction thread outlives every run; idle, it must not send the command through the interpreter's
    teardown (a module global's finalizer runs there, and only there)."""
    done = run("""
        from harvester.phases.extract_host import EXTRACTION
        from harvester.cli_process import exit_now
        EXTRACTION.submit(print, "parsed", flush=True).result()

        class Teardown:
            def __del__(self):
                print("torn down", flush=True)

        kept = Teardown()
        exit_now(5)
    """)
    assert done.returncode == 5
    assert done.stdout == "parsed\n"


def test_exit_now_waits_for_a_parse_still_running():
    done = run("""
        import threading, time
        from harvester.phases.extract_host import EXTRACTION
        from harvester.cli_process import exit_now
        started = threading.Event()
        EXTRACTION.submit(lambda: (started.set(), time.sleep(0.3), print("parse finished", flush=True)))
        started.wait(30)
        exit_now(6)
    """)
    assert done.returncode == 6
    assert done.stdout == "parse finished\n"


def test_the_run_path_loads_neither_feedparser_nor_httpx_command_line():
    """What ``harvester harvest`` imports before its first request: feedparser waits for the first feed (read in a
    thread), and httpx's own command line (pygments' lexers) is never loaded (issue 31, the start)."""
    done = run("""
        import atexit, sys

        def loaded():  # at the exit of a command run as the console script runs it
            from harvester.cli_runs import run_locally
            import httpx
            print("loaded:", ",".join(m for m in ("feedparser", "httpx._main", "pygments") if sys.modules.get(m)))

        atexit.register(loaded)
        sys.argv = ["harvester", "--version"]
        from harvester.cli import main
        main()
    """)
    assert done.stdout.strip().splitlines()[-1] == "loaded:", done.stdout + done.stderr


def test_the_command_favours_the_event_loop_with_a_short_switch_interval():
    """The loop gives the GIL up in every socket call; with the extraction and store threads busy it waited a whole
    switch interval (5 ms by default) to get it back, each time delaying a host's next request (issue 31)."""
    done = run("""
        import atexit, sys
        default = sys.getswitchinterval()
        atexit.register(lambda: print(default, sys.getswitchinterval()))
        sys.argv = ["harvester", "--version"]
        from harvester.cli import main
        main()
    """)
    default, switch = (float(x) for x in done.stdout.strip().splitlines()[-1].split())
    assert default == 0.005
    assert switch <= 0.001


def test_off_a_terminal_the_progress_bar_is_not_redrawn_while_the_harvest_runs(make_web, tmp_path):
    """Under a pipe the bar is printed once, at the end: no refresh thread builds it ten times a second meanwhile
    (each build holds the GIL the event loop waits for). Seen from the extractor hook, during the harvest."""
    web = make_web([HostSpec("a", pages=3)], seed=4)
    (tmp_path / "seen.py").write_text(textwrap.dedent("""
        import threading

        def threads(page):
            return {"refresh": any(type(t).__name__ == "_RefreshThread" for t in threading.enumerate())}
    """), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'h.db'}"
    done = subprocess.run([str(Path(sys.executable).parent / "harvester"), "harvest", *web.seeds, "--db", db,
                           "--extractor", "./seen.py:threads"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")})
    assert done.returncode == 0, done.stderr
    assert "harvest:" in done.stdout  # the bar's last state, printed once
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        seen = [dict(page.fields)["refresh"] for page in store.iter_pages(latest=True)]
    assert seen and not any(seen)
