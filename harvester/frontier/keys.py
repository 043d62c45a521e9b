"""The ids of hosts and sources by their natural keys (origin, provenance label): made on first sight, cached.

A row of ``hosts`` or ``sources`` is never deleted, so a cached id never goes stale; the ids a transaction made
join the cache only once it has committed (a rolled-back insert leaves no id behind).
"""

# ruff: noqa: S608 -- SQL text is built from constants and placeholder counts; values are always bound.
from __future__ import annotations

from collections.abc import Mapping, Sequence

from harvester.frontier.base import Database, Part, Transaction
from harvester.frontier.rows import source_kind


class Keys(Part):
    """Host and source ids, the one cache of them a store has (found URLs and hosts both ask it)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._host_ids: dict[str, int] = {}
        self._source_ids: dict[str, int] = {}

    def host_ids(self, tx: Transaction, origins: Sequence[str]) -> dict[str, int]:
        """origin -> host id, making the hosts not stored yet (in ``tx``)."""
        wanted = {o: self._host_ids.get(o) or tx.hosts.get(o) for o in set(origins)}
        missing = [o for o, i in wanted.items() if i is None]
        if missing:
            tx.on_commit(self._publish)
            d = self._d
            tx.conn.exec_driver_sql(
                d.insert_ignore("hosts", ("origin", "failures", "lastmod_checks", "lastmod_hits"), ("origin",)),
                [(o, 0, 0, 0) for o in missing],
            )
            for start in range(0, len(missing), self._chunk):
                part = missing[start : start + self._chunk]
                where, params = d.any_of("origin", part)
                for host_id, origin in tx.conn.exec_driver_sql(
                    f"SELECT id, origin FROM hosts WHERE {where}", tuple(params)
                ):
                    tx.hosts[origin] = host_id
                    wanted[origin] = host_id
        return {o: i for o, i in wanted.items() if i is not None}

    def source_ids(self, tx: Transaction, labels: Sequence[str]) -> dict[str, int]:
        """provenance label -> source id, making the sources not stored yet (in ``tx``)."""
        wanted = {s: self._source_ids.get(s) or tx.sources.get(s) for s in set(labels)}
        missing = [s for s, i in wanted.items() if i is None]
        if missing:
            tx.on_commit(self._publish)
            d = self._d
            tx.conn.exec_driver_sql(
                d.insert_ignore("sources", ("label", "kind"), ("label",)), [(s, source_kind(s)) for s in missing]
            )
            where, params = d.any_of("label", missing)
            for source_id, label in tx.conn.exec_driver_sql(
                f"SELECT id, label FROM sources WHERE {where}", tuple(params)
            ):
                tx.sources[label] = source_id
                wanted[label] = source_id
        return {s: i for s, i in wanted.items() if i is not None}

    def known_host_id(self, origin: str) -> int | None:
        """The id of ``origin`` if this store has met it (None: ask ``host_ids``, which makes it if need be)."""
        return self._host_ids.get(origin)

    def learn_hosts(self, ids: Mapping[int, str]) -> None:
        """Host id -> origin read elsewhere (a claim maps the ids it leased): the next write naming those hosts
        (their politeness state, their pages' outlinks) finds their ids here, with no insert and read of its own."""
        self._host_ids.update({origin: host_id for host_id, origin in ids.items()})

    def _publish(self, tx: Transaction) -> None:
        """The ids ``tx`` made, once it has committed."""
        self._host_ids.update(tx.hosts)
        self._source_ids.update(tx.sources)
