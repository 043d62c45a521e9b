"""A damaged frontier: its pages found and named (``harvester db check``, a quick check when a run starts), and
what can still be read of it read (an export goes around the damage and counts what it could not read).

A SQLite file with a few corrupted pages in the middle opens, counts its URLs and even takes a harvest (none of
those touch the broken pages), then fails the one reader that walks every row: an export stopped after 1,000 of
3,000 records with "database disk image is malformed". SQLite reaches a row through the tree's inner pages, so a
read of an id range that avoids the broken leaves succeeds: ``rows_around_damage`` bisects a failing range down
to the rows that cannot be read and goes on past them.
"""

# ruff: noqa: S608 -- table names come from the schema itself; values are always bound.
from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from harvester.errors import StoreError
from harvester.frontier.base import Part, damaged_file

MOST_PROBLEMS = 100
"""Problems an integrity check lists at most (SQLite stops looking after that many)."""

_TREE = re.compile(r"\bTree (\d+) page (\d+)")
_PAGE = re.compile(r"\b[Pp]age (\d+)")


def is_damage(exc: BaseException) -> bool:
    """``exc`` (or what caused it) says the database file is damaged where it was read."""
    seen: BaseException | None = exc
    while seen is not None:
        if damaged_file(seen.orig if isinstance(seen, DBAPIError) else seen):
            return True
        seen = seen.__cause__
    return False


@dataclass
class Damage:
    """Rows a reader could not read, by table: the export names them so a person knows what is missing."""

    ids: dict[str, set[int]] = field(default_factory=dict)
    unnamed: dict[str, int] = field(default_factory=dict)
    """Rows counted in a table that no read by id reaches: their ids are damaged too."""

    def add(self, table: str, row_id: int) -> None:
        self.ids.setdefault(table, set()).add(row_id)

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.ids.values()) + sum(self.unnamed.values())

    def describe(self) -> str:
        """``pages rows 1001-1180, 1203`` for each table: runs of consecutive ids as ranges."""
        parts = []
        for table, ids in sorted(self.ids.items()):
            runs: list[list[int]] = []
            for row_id in sorted(ids):
                if runs and row_id == runs[-1][1] + 1:
                    runs[-1][1] = row_id
                else:
                    runs.append([row_id, row_id])
            spans = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
            parts.append(f"{len(ids)} rows of {table} (ids {spans})")
        parts += [f"{n} rows of {table} whose ids are damaged too" for table, n in sorted(self.unnamed.items())]
        return "; ".join(parts)


RangeRead = Callable[[Connection, int, int | None, int | None, Sequence[int] | None], list[Any]]
"""``read(conn, after, upto, limit, ids)``: the rows with ``after < id <= upto`` (``upto`` None: no bound), by id, at
most ``limit`` (None: all of them); or, ``ids`` given, the rows with those ids (each sought on its own)."""


class Check(Part):
    """Integrity checks and reads that go around a damaged part of the file."""

    def integrity(self, *, full: bool = False, most: int = MOST_PROBLEMS) -> list[str]:
        """What is wrong with the database, each problem naming its table or index where it can; [] when sound.

        SQLite: ``quick_check`` (every page's structure: as fast as reading the file) or, ``full``,
        ``integrity_check`` (also every index against its table). PostgreSQL checks its own pages as it reads
        them: each table is read through once, and a table that cannot be read is named."""
        if not self._d.is_sqlite:
            return self._read_every_table()
        pragma = "integrity_check" if full else "quick_check"
        try:
            with self._tx(write=False) as tx:
                found = [line for row in tx.conn.exec_driver_sql(f"PRAGMA {pragma}({int(most)})")
                         for line in str(row[0]).splitlines() if not line.startswith("***")]
        except StoreError as exc:
            if not is_damage(exc):
                raise
            found = ["database disk image is malformed"]
        if found == ["ok"]:
            return []
        if "database disk image is malformed" in found:
            # SQLite gave up part-way (a page too broken to walk): find the damaged objects one by one.
            found = [problem for problem in found if problem != "database disk image is malformed"]
            found += self._damaged_objects()
        return [self._name_objects(problem) for problem in found]

    def _damaged_objects(self) -> list[str]:
        """Each table and index that cannot be walked, and for a table with ids, the rows that cannot be read."""
        with self._tx(write=False) as tx:
            objects = [(str(kind), str(name), str(table)) for kind, name, table in tx.conn.exec_driver_sql(
                "SELECT type, name, tbl_name FROM sqlite_master WHERE rootpage > 0 ORDER BY name")]
        problems = []
        for kind, name, table in objects:
            try:
                with self._tx(write=False) as tx:
                    if kind == "table":
                        tx.conn.exec_driver_sql(f'SELECT * FROM "{name}"').all()
                    else:
                        tx.conn.exec_driver_sql(f'SELECT count(*) FROM "{table}" INDEXED BY "{name}"').all()
            except StoreError as exc:
                if not is_damage(exc):
                    raise
                problems.append(f"{kind} {name} is damaged" + self._unreadable_rows(name) if kind == "table"
                                else f"{kind} {name} (of {table}) is damaged: REINDEX rebuilds it from its table")
        return problems

    def _unreadable_rows(self, table: str) -> str:
        damage = Damage()

        def read(conn: Connection, after: int, upto: int | None, limit: int | None,
                 ids: Sequence[int] | None) -> list[Any]:
            if ids is not None:
                where, params = self._d.any_of("id", list(ids))
            else:
                where, params = "id > ?" + (" AND id <= ?" if upto is not None else ""), [after]
                params += [upto] if upto is not None else []
            sql = f'SELECT * FROM "{table}" WHERE {where} ORDER BY id' + (f" LIMIT {int(limit)}" if limit else "")
            return list(conn.exec_driver_sql(sql, tuple(params)).all())

        try:
            for _ in self.rows_around_damage(table, read, batch=500, damage=damage, expect_all=True):
                pass
        except StoreError:
            return " (its rows cannot be told apart: no id, or its right edge is damaged too)"
        return f": {damage.describe()} cannot be read" if damage.count else ""

    def _name_objects(self, problem: str) -> str:
        """``problem`` with the table or index of the page it names (the tree's root page, else ``dbstat``)."""
        try:
            with self._tx(write=False) as tx:
                roots = {int(page): name for name, page in tx.conn.exec_driver_sql(
                    "SELECT name, rootpage FROM sqlite_master WHERE rootpage > 0")}
                if (tree := _TREE.search(problem)) is not None and int(tree.group(1)) in roots:
                    return f"{problem} [in {roots[int(tree.group(1))]}]"
                if (page := _PAGE.search(problem)) is not None:
                    row = tx.conn.exec_driver_sql("SELECT name FROM dbstat WHERE pageno = ?",
                                                  (int(page.group(1)),)).first()
                    if row is not None:
                        return f"{problem} [in {row[0]}]"
        except StoreError:
            pass  # no dbstat in this SQLite, or the schema page itself is damaged: the problem as SQLite says it
        return problem

    def _read_every_table(self) -> list[str]:
        problems = []
        with self._tx(write=False) as tx:
            tables = [str(name) for (name,) in tx.conn.exec_driver_sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        for table in sorted(tables):
            try:
                with self._tx(write=False) as tx:
                    tx.conn.exec_driver_sql(f'SELECT count(*) FROM "{table}"').scalar_one()
            except StoreError as exc:
                problems.append(f"table {table} cannot be read through: {exc}")
        return problems

    def rows_around_damage(
        self, table: str, read: RangeRead, *, batch: int, damage: Damage | None, expect_all: bool = False
    ) -> Iterator[list[Any]]:
        """Batches of ``table``'s rows in id order through ``read`` (keyset pagination: no connection held between
        batches). Without ``damage`` a damaged file raises as any read would; with it, the rows that cannot be
        read are skipped and recorded there, and every row that can be read is returned.

        ``expect_all`` (``read`` filters nothing out), on SQLite: a row of ``table`` that ``read`` did not return
        is recorded too (a damaged cell whose foreign key is garbage joins nothing: no error, a row fewer), and
        when the table counts more rows than were read, the ids never returned are sought one by one, after the
        rest (a cell whose rowid is garbage ends a range scan early and silently, while a seek for one id goes
        down the tree's inner pages to its own leaf)."""
        reconcile = damage if expect_all and self._d.is_sqlite else None
        seen = bytearray()
        top = self._largest_id(table) if reconcile is not None else 0
        last = 0
        while True:
            try:
                rows = self._read(table, read, reconcile, after=last, limit=batch)
            except StoreError as exc:
                if damage is None or not is_damage(exc):
                    raise
                top = self._largest_id(table)
                if top <= last:
                    break
                upto = min(last + batch, top)
                rows = self._bisect(table, read, list(range(last + 1, upto + 1)), damage, reconcile)
                last = upto
            else:
                if not rows:
                    break
                last = rows[-1].id
            if reconcile is not None:
                rows = [row for row in rows if row.id <= top]  # an id past the largest is a garbage rowid
                _mark(seen, rows)
            if rows:
                yield rows
        if reconcile is not None:
            yield from self._unreached(table, read, batch, seen, reconcile)

    def _unreached(self, table: str, read: RangeRead, batch: int, seen: bytearray,
                   damage: Damage) -> Iterator[list[Any]]:
        """The rows the scans above did not reach, sought by id, when the table counts more than were read."""

        def missing() -> int:
            with self._tx(write=False) as tx:
                total = int(tx.conn.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar_one())
            return total - sum(seen) - len(damage.ids.get(table, ()))

        if missing() <= 0:
            return
        top = self._largest_id(table)
        for start in range(1, top + 1, batch):
            ids = [i for i in range(start, min(start + batch, top + 1)) if i >= len(seen) or not seen[i]]
            rows = self._bisect(table, read, ids, damage, damage) if ids else []
            _mark(seen, rows)
            if rows:
                yield rows
        if (unreached := missing()) > 0:
            damage.unnamed[table] = damage.unnamed.get(table, 0) + unreached

    def _read(self, table: str, read: RangeRead, reconcile: Damage | None, *, after: int = 0,
              limit: int | None = None, ids: Sequence[int] | None = None) -> list[Any]:
        """``read`` in one transaction; with ``reconcile``, the ids of ``table`` in what it covered that it did
        not return are recorded there (read in the same snapshot)."""
        with self._tx(write=False) as tx:
            rows = read(tx.conn, after, None, limit, ids)
            if reconcile is not None:
                returned = {row.id for row in rows}
                if ids is not None:
                    where, params = self._d.any_of("id", list(ids))
                elif limit is not None and len(rows) >= limit:
                    where, params = f"id > {self._d.p} AND id <= {self._d.p}", [after, rows[-1].id]
                else:
                    where, params = f"id > {self._d.p}", [after]
                for (row_id,) in tx.conn.exec_driver_sql(f"SELECT id FROM {table} WHERE {where}", tuple(params)):
                    if row_id not in returned:
                        reconcile.add(table, int(row_id))
        return rows

    def _largest_id(self, table: str) -> int:
        """The largest id of ``table``: SQLite reads it down the tree's right edge, past a damaged leaf elsewhere."""
        with self._tx(write=False) as tx:
            return int(tx.conn.exec_driver_sql(f"SELECT max(id) FROM {table}").scalar_one() or 0)

    def _bisect(self, table: str, read: RangeRead, ids: list[int], damage: Damage,
                reconcile: Damage | None) -> list[Any]:
        """The readable rows of ``ids``, each id that cannot be read recorded in ``damage``."""
        try:
            return self._read(table, read, reconcile, ids=ids)
        except StoreError as exc:
            if not is_damage(exc):
                raise
        if len(ids) == 1:
            damage.add(table, ids[0])
            return []
        middle = len(ids) // 2
        return (self._bisect(table, read, ids[:middle], damage, reconcile)
                + self._bisect(table, read, ids[middle:], damage, reconcile))


def _mark(seen: bytearray, rows: list[Any]) -> None:
    """Flag the ids of ``rows`` in ``seen`` (one byte per id: a million rows cost a megabyte)."""
    for row in rows:
        if row.id >= len(seen):
            seen.extend(bytes(max(row.id + 1 - len(seen), len(seen))))
        seen[row.id] = 1
