"""The files the command line writes where the user says (``export -o``, ``deployments -o``): never onto the
frontier, never half-written over what was there.

``harvester export --db sqlite:///c.db -o c.db`` opened c.db for writing (truncating it) while the store read it:
the frontier was left 0 bytes and the export then failed on "database disk image is malformed". And any failed
export (a damaged row, a full disk, Ctrl-C) left its output truncated, the previous export lost. Here an output
naming the database (or its -wal, -shm or -journal) is refused before anything is opened, and every output is
written to a temporary file beside it, renamed over it only once complete.
"""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import typer

from harvester.settings import Settings

SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")
"""A SQLite database's files: the database and what SQLite keeps beside it while it is open."""

JSONL_NAMES = (".jsonl", ".jsonl.gz", ".json", ".ndjson")
WARC_NAMES = (".warc", ".warc.gz")


def refuse_database_target(output: Path, settings: Settings, option: str = "-o") -> None:
    """Refuse (exit 2, nothing touched) an output that is the frontier's SQLite file or one of its companions,
    however it is spelt (relative, through a symlink, another name of the same file)."""
    from harvester.frontier.base import sqlite_file

    database = sqlite_file(settings.database_url)
    if database is None:
        return
    target = output.expanduser().resolve()
    base = database.expanduser().resolve()
    for suffix in SQLITE_COMPANIONS:
        companion = base.with_name(base.name + suffix)
        if target == companion or _same_file(target, companion):
            raise typer.BadParameter(
                f"{option} {str(output)!r} is the frontier database's own file ({companion}, of --db "
                f"{settings.database_url}): writing it would destroy the frontier. Nothing was written; "
                "write the output elsewhere")


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_wrong_suffix(output: Path, fmt: str) -> None:
    """An output named for the other format is refused: ``--format warc -o x.jsonl`` wrote a gzipped WARC under a
    JSONL name (a later reader, or the next JSONL export's consumer, takes it for JSONL), and a ``.warc.gz`` name
    given JSONL looks like an archive that no WARC reader can open. Any other name is the user's choice."""
    name = output.name.lower()
    if fmt == "warc" and name.endswith(JSONL_NAMES):
        raise typer.BadParameter(f"-o {str(output)!r}: --format warc writes a gzipped WARC file, not JSONL; name it "
                                 f"{output.name.split('.')[0]}.warc.gz, or drop --format warc for JSONL")
    if fmt == "jsonl" and name.endswith(WARC_NAMES):
        raise typer.BadParameter(f"-o {str(output)!r}: --format jsonl (the default) writes JSON lines, not a WARC "
                                 "file; add --format warc, or name the file .jsonl")


@contextmanager
def replaced_on_success(output: Path, *, gzipped: bool = False) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``output`` only when the block ends without an error: written as a temporary
    file in the same directory (so the rename is atomic and never crosses a file system), else removed, and
    ``output`` as it was. ``gzipped``: compressed as it is written (``-o pages.jsonl.gz``).

    A symlink is written through (its target replaced, the link kept); what is not a regular file (``-o
    /dev/stdout``, a named pipe) is written directly: it holds nothing to lose, and a rename would replace the
    device node itself."""
    if output.exists() and not output.is_file():
        with output.open("wb") as raw, _encoded(raw, output.name, gzipped) as out:
            yield out
        return
    if output.is_symlink():
        output = output.resolve()
    directory = output.parent if str(output.parent) else Path(".")
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{output.name}.", suffix=".partial")
    except OSError as exc:
        raise typer.BadParameter(
            f"-o {str(output)!r}: cannot write in {str(directory)!r} ({exc.strerror}); choose a directory you can "
            "write to (a file under /proc, /sys or a read-only mount cannot be created)") from None
    temp_path = Path(temp)
    try:
        os.fchmod(fd, _mode_for(output))  # mkstemp's 0600: the file gets what an ordinary open would give it
        with os.fdopen(fd, "wb") as raw, _encoded(raw, output.name, gzipped) as out:
            yield out
        os.replace(temp_path, output)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise


@contextmanager
def _encoded(raw: IO[bytes], name: str, gzipped: bool) -> Iterator[IO[bytes]]:
    """``raw`` itself, or a gzip stream over it (closed before ``raw``, so its trailer is written)."""
    if not gzipped:
        yield raw
        return
    with gzip.GzipFile(filename=name.removesuffix(".gz"), mode="wb", fileobj=raw, mtime=0) as zipped:
        yield zipped  # type: ignore[misc]


def _mode_for(output: Path) -> int:
    """An existing output's permissions, else 0666 less the umask (what ``open(path, "w")`` creates)."""
    try:
        return output.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
