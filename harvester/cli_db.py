"""How the command line opens the frontier: never creating one by surprise, saying what it waits for, refusing at
once what waiting cannot mend, and never running into a damaged or read-only file.

``harvester status`` in a directory without a frontier used to create ``./.harvester/harvester.db`` and show it
empty; ``--db postgresql://.../nosuchdb`` waited 183 s in silence before failing; a read-only archived crawl
could not be read at all. Imports of the store stay inside the functions: ``harvester --help`` loads none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from harvester.errors import DatabaseUnavailable, StoreError
from harvester.runtime import OUTAGE_WAIT_S, db_sync
from harvester.settings import Settings

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.frontier.check import Damage

err_console = Console(stderr=True)


def say_err(line: str) -> None:
    """One plain line on stderr, unwrapped whatever the width (a log file has none)."""
    err_console.print(line, soft_wrap=True, markup=False, highlight=False)


DAMAGE_ADVICE = ("what can still be read, `harvester export` writes out (it names the rows it cannot read); then "
                 "start a new frontier, or restore a copy (`sqlite3 FILE .recover` rebuilds what it can)")


def open_frontier(settings: Settings, *, read_only: bool = False) -> FrontierStore:
    """The frontier, opened once in the foreground: a server that does not answer is waited for, saying so and for
    how long; one that cannot be opened as asked (no such database, bad credentials) fails now, naming the fix.
    ``read_only``: never creates a database (a command that reads names the one it looked for)."""
    from harvester.frontier import FrontierStore

    try:
        return FrontierStore.open(settings, read_only=read_only)
    except DatabaseUnavailable as exc:
        say_err(f"{' '.join(str(exc).split())}: waiting up to {OUTAGE_WAIT_S:.0f} s for it to answer "
                 "(Ctrl-C gives up)")
    try:
        return db_sync(FrontierStore.open, settings, read_only=read_only)
    except DatabaseUnavailable as exc:
        raise DatabaseUnavailable(f"{' '.join(str(exc).split())} (gave up after {OUTAGE_WAIT_S:.0f} s)") from None


def ready_to_write(settings: Settings, kind: str, *, existing: bool) -> None:
    """Before a run: the frontier exists (``existing``: extract and recrawl never start one), can be written, and a
    SQLite file passes its quick check, so a run never writes into a damaged file."""
    with open_frontier(settings, read_only=existing) as store:
        where = store.url_display
        if store.read_only:
            raise StoreError(f"{kind}: the frontier {where} cannot be written (a read-only file or mount); "
                             "status and export read it; to run, copy it somewhere writable and pass --db COPY")
        problems = store.integrity() if store.dialect == "sqlite" and _small_enough(settings) else []
    if problems:
        raise StoreError(f"{kind}: the frontier {where} is damaged ({problems[0]}); nothing was run. "
                         f"`harvester db check` names every damaged part; {DAMAGE_ADVICE}")
    if existing:  # opened read-only above: a writable open (migrating it if the default) before the run
        open_frontier(settings).close()


QUICK_CHECK_MAX_BYTES = 4 << 30
"""Largest SQLite file a run checks before it starts: the quick check reads the whole file (0.8 s for 480 MB with the
file in the page cache, measured), so a larger one would delay every scheduled run; ``harvester db check`` does it
on demand."""


def _small_enough(settings: Settings) -> bool:
    from harvester.frontier.base import sqlite_file

    path = sqlite_file(settings.database_url)
    size = path.stat().st_size if path is not None and path.is_file() else 0
    if size > QUICK_CHECK_MAX_BYTES:
        say_err(f"{path}: {size / 2**30:.1f} GiB, not checked for damage before this run (it would read it all); "
                "`harvester db check --quick` does it on demand")
        return False
    return True


def unreadable(damage: Damage, where: str) -> None:
    """After an export of a damaged frontier: every readable row was written; say which ones were not."""
    if damage.count:
        raise StoreError(f"the frontier {where} is damaged: {damage.count} rows could not be read and are not in "
                         f"the export: {damage.describe()}; `harvester db check` names the damaged parts")
