"""A frontier whose file has corrupted pages in the middle (issue 33, item 7): ``harvester db check`` names the damage,
an export writes every row it can read and names the rows it cannot, and a run refuses to write into it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester import harvest
from harvester.cli import app
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.sites import HostSpec

runner = CliRunner()


def _said(out) -> str:  # type: ignore[no-untyped-def]
    return " ".join((out.output + (str(out.exception) if out.exception else "")).split())


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real frontier of a harvested site (a few hundred stored pages), closed and checkpointed."""
    from harvester.testing.web import TestWeb

    path = tmp_path_factory.mktemp("sound") / "crawl.db"
    with TestWeb([HostSpec("a", pages=300)], seed=33, mode="thread") as web:
        harvest(Settings.load(database_url=str(path)), SiteProfile.build(seeds=tuple(web.seeds)))
    return path


def _corrupt_middle_leaves(source: Path, target: Path, *, table: str = "pages", count: int = 4,
                           keep: int = 0) -> list[int]:
    """A copy of ``source`` with ``count`` leaf pages of ``table`` from the middle of its tree overwritten with
    garbage after their first ``keep`` bytes, as a disk or a copy gone wrong leaves them; returns the page numbers.
    ``keep`` 0: SQLite raises at the page; 200 (the page header and cell pointers kept): its cells read as garbage,
    their rowids out of order, and a range scan over them ends early without an error."""
    shutil.copy(source, target)
    with sqlite3.connect(target) as conn:
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        leaves = [n for (n,) in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno", (table,))]
    conn.close()
    broken = leaves[len(leaves) // 2 : len(leaves) // 2 + count]
    with target.open("r+b") as file:
        for page in broken:
            file.seek((page - 1) * size + keep)
            file.write(b"\xa5" * (size - keep))
    return broken


def _export(db: Path, target: Path, *extra: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["export", "-o", str(target), "--db", str(db), *extra])


def test_db_check_names_the_damaged_table_and_rows_and_passes_a_sound_file(sound, tmp_path):
    out = runner.invoke(app, ["db", "check", "--db", str(sound)])
    assert out.exit_code == 0, _said(out)  # the control: the same file before the damage
    assert "no damage found (full check)" in _said(out)

    damaged = tmp_path / "damaged.db"
    _corrupt_middle_leaves(sound, damaged)
    for args in ([], ["--quick"]):
        out = runner.invoke(app, ["db", "check", "--db", str(damaged), *args])
        assert out.exit_code == 1
        said = _said(out)
        assert "is damaged" in said and "table pages is damaged" in said, said
        assert "rows of pages (ids " in said and "harvester export" in said


@pytest.mark.parametrize("keep", [0, 200], ids=["broken-pages", "garbage-cells"])
def test_an_export_of_a_damaged_file_writes_every_readable_row_and_names_the_rest(sound, tmp_path, keep):
    whole = tmp_path / "whole.jsonl"
    assert _export(sound, whole).exit_code == 0
    every = [json.loads(line) for line in whole.read_text().splitlines()]

    damaged = tmp_path / "damaged.db"
    _corrupt_middle_leaves(sound, damaged, keep=keep)
    conn = sqlite3.connect(damaged)
    plain = "SELECT p.id FROM pages p JOIN urls u ON u.id = p.url_id WHERE p.id > 0 ORDER BY p.id"
    try:  # the control: a plain read stops at the damage, with an error or (garbage rowids) without one
        plainly = len(conn.execute(plain).fetchall())
    except sqlite3.DatabaseError as exc:
        plainly, error = 0, str(exc)
    else:
        error = ""
    conn.close()
    assert plainly < len(every) * 0.9 and (error == "" or "malformed" in error), (plainly, error)
    partial = tmp_path / "partial.jsonl"
    out = _export(damaged, partial)
    assert out.exit_code != 0  # an export that is not whole says so
    said = _said(out)
    read = [json.loads(line) for line in partial.read_text().splitlines()]
    lost = len(every) - len(read)
    assert 0 < lost < len(every) // 10
    assert f"{lost} rows could not be read" in said and f"{lost} rows of pages (ids " in said, said
    assert {r["url"] for r in read} <= {r["url"] for r in every}
    assert len({r["url"] + r["fetched_at"] for r in read}) == len(read)  # none twice
    # Everything after the damage was exported too, not only what came before it.
    assert every[-1]["fetched_at"] in {r["fetched_at"] for r in read}

    warc = tmp_path / "partial.warc.gz"
    out = runner.invoke(app, ["export", "--format", "warc", "-o", str(warc), "--db", str(damaged)])
    assert out.exit_code != 0 and "could not be read" in _said(out)
    assert warc.stat().st_size > 0


def test_a_run_refuses_to_write_into_a_damaged_file(sound, tmp_path):
    damaged = tmp_path / "damaged.db"
    _corrupt_middle_leaves(sound, damaged)
    before = damaged.read_bytes()
    out = runner.invoke(app, ["recrawl", "--db", str(damaged)])
    assert out.exit_code != 0
    said = _said(out)
    assert "is damaged" in said and "nothing was run" in said and "harvester db check" in said, said
    assert damaged.read_bytes() == before
