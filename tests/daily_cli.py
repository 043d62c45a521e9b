"""Daily runs of the CLI against a test's own site (``threaded_site``): the CLI run in this process on one database,
a harvest on day 0 and a re-crawl each day after on the harvester's clock (``schedule.run_at``), and an article page
that the main-content extractor keeps; or the ``harvester`` command in a subprocess, each call at its own instant
(``CliAt``: what a kill or a signal needs). Shared by the truth tests that tell a site's days as the CLI says them
(``from daily_cli import ...``: tests/ is on the path); not in ``harvester.testing``, which may not import the CLI
(and with it Prefect)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from typer.testing import CliRunner

from harvester.cli import app
from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked

FILLER = ("This paragraph is long enough for a main-content extractor to take it for the article body, with several "
          "clauses and plain words that carry meaning. ")
HTML = {"Content-Type": "text/html; charset=utf-8"}


def article(title: str) -> bytes:
    """A page whose article (``title`` and two paragraphs of ``FILLER``) the extractor keeps."""
    return (f"<!doctype html><html lang='en'><head><title>{title}</title></head><body><main><article>"
            f"<h1>{title}</h1><p>{FILLER}</p><p>{FILLER}</p></article></main></body></html>").encode()


def conditional(answer: Answer, request: Asked) -> Answer:
    """``answer``, or a 304 when the request's If-None-Match is its ETag."""
    etag = answer[1].get("ETag")
    return (304, {"ETag": etag}, b"") if etag is not None and request.headers.get("if-none-match") == etag else answer


def cli_on(db_url: str, *, wide: bool = True) -> Callable[..., str]:
    """``cli(*args)`` → the output of ``harvester ARGS --db <db_url>``, run in this process (``wide``: so that no line
    of the summary wraps); a non-zero exit fails the test with that output."""
    runner = CliRunner(env={"COLUMNS": "400"} if wide else None)

    def invoke(*args: str) -> str:
        out = runner.invoke(app, [*args, "--db", db_url])
        assert out.exit_code == 0, out.output
        return out.output

    return invoke


def run_day(cli: Callable[..., str], day: int, origin: str, *args: str) -> str:
    """Day ``day``'s run on the harvester's clock, its output: the harvest of ``origin`` on day 0 (after
    ``db upgrade``: a PostgreSQL database is never set up by a harvest), a re-crawl (with ``args``) after. The
    clock is left there: the test's ``clock`` fixture puts it back."""
    CLOCK.travel_to(run_at(day))
    if day == 0:
        cli("db", "upgrade")
        return cli("harvest", f"{origin}/")
    return cli("recrawl", *args)


HARVESTER = str(Path(sys.executable).with_name("harvester"))


class CliAt:
    """The ``harvester`` command in a subprocess on the database ``db`` (in ``cwd``), each call at an instant of the
    harvester's clock (``HARVESTER_NOW``) and with no other ``HARVESTER_*`` variable of this process."""

    def __init__(self, db: str, cwd: Path) -> None:
        self.db = db
        self.cwd = cwd
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")}
        """The environment of the last command made (``command``): pass it to a ``Popen`` of that command."""

    def command(self, when: datetime, *args: str) -> list[str]:
        """``harvester ARGS --db <db>``, ``env`` set to run it at ``when``."""
        self.env["HARVESTER_NOW"] = when.isoformat()
        return [HARVESTER, *args, "--db", self.db]

    def __call__(self, when: datetime, *args: str) -> str:
        """Its output; a non-zero exit fails the test with the ends of its output."""
        done = subprocess.run(self.command(when, *args), capture_output=True, text=True, timeout=300, cwd=self.cwd,
                              env=self.env)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
        return done.stdout


class CliAtHere(CliAt):
    """``CliAt`` whose calls run in this process (typer's runner, in ``cwd``, the clock moved to each call's
    instant: put back by the test's ``clock`` fixture), without this process's ``HARVESTER_*`` variables;
    ``command`` still makes the subprocess a signal needs. A subprocess pays the CLI's imports again: on a loaded
    machine, most of a test's time."""

    def __call__(self, when: datetime, *args: str) -> str:
        hidden = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("HARVESTER_")}
        home = Path.cwd()
        try:
            os.chdir(self.cwd)  # where a harvester.toml would be read
            CLOCK.travel_to(when)
            done = CliRunner().invoke(app, [*args, "--db", self.db])
        finally:
            os.chdir(home)
            os.environ.update(hidden)
        assert done.exit_code == 0, (args, done.stdout[-2000:], done.stderr[-2000:], done.exception)
        return done.stdout
