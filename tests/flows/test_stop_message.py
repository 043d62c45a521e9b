"""A run its worker stopped says so in its final state, and that it comes back (ops48 item 1).

Before: a worker stopped with SIGTERM or SIGINT (it kills its runs' processes) ended its run
``Crashed("Execution was interrupted by an unexpected exception: Interrupted: the process that started this run
(pid N) is gone")``: Prefect's words for a bug, no word of the worker stopping nor of the retry. Here the harvest
flow runs in this process under the lifeline, as a worker's engine runs it: its "worker" (a live process) and its
"worker's command" (one that has ended, as the stopping worker leaves it) named by pidfds (``LIFELINES``).
"""

from __future__ import annotations

import os
import subprocess

from conftest import prepared

from harvester.site_profile import SiteProfile
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site


def answer(request: Asked) -> Answer:
    if request.path == "/robots.txt":
        return robots_txt(request.origin)
    if request.path == "/sitemap.xml":
        return sitemap(request.origin, {"/p1": None})
    return 200, {"Content-Type": "text/html"}, b"<html><body><p>words</p></body></html>"


async def test_a_run_whose_worker_stops_ends_crashed_saying_so_and_that_it_is_retried(
    prefect_api, sqlite_url, monkeypatch
):
    from harvester.flows import lifeline
    from harvester.flows.engine import LIFELINES
    from harvester.flows.harvest import harvest_flow
    from harvester.runtime import clear_stop

    worker = subprocess.Popen(["sleep", "120"])  # still there: it is stopping, and ended its command
    command = subprocess.Popen(["true"])
    fds = [os.pidfd_open(worker.pid), os.pidfd_open(command.pid)]
    command.wait()
    monkeypatch.setenv(LIFELINES, f"{fds[0]}:{worker.pid}:worker,{fds[1]}:{command.pid}:command")
    monkeypatch.setattr(lifeline, "started_by_runner", lambda: True)
    try:
        with threaded_site(answer) as origin:
            profile = SiteProfile.build(seeds=(origin + "/",), name="stopped48")
            state = await harvest_flow(profile, overrides=prepared(sqlite_url), return_state=True)
    finally:
        clear_stop()
        monkeypatch.undo()
        for fd in fds:
            os.close(fd)
        worker.kill()
        worker.wait()
    message = state.message or ""
    assert state.is_crashed(), state  # a crash: the retry automation schedules it again
    assert "unexpected exception" not in message, message
    assert message.startswith("Stopped: its worker is stopping (a SIGTERM or SIGINT to it"), message
    assert f"ended the process that started this run (pid {command.pid})" in message, message
    assert "retry automation schedules the run again and the rerun resumes from the frontier" in message, message

