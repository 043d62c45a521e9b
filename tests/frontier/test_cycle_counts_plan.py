"""``harvester status`` during a running cycle counts its moved and restored pages without looking up the answer
before every fetch of the cycle: at 200,000 URLs that look-up, run for each 2xx/304, took cycle_counts from 0.74 s
to 3.3-4.3 s on PostgreSQL. The guard is the plan PostgreSQL ran (EXPLAIN ANALYZE of the statements
``cycle_counts`` sends): the look-up's loops, never a time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event

from harvester.frontier import FrontierStore

from .test_store import claim_all, done, found, page

PAGES = 40


def _subplan_loops(plan: dict[str, Any]) -> list[int]:
    loops = [int(plan.get("Actual Loops", 0))] if plan.get("Parent Relationship") == "SubPlan" else []
    for child in plan.get("Plans", []):
        loops += _subplan_loops(child)
    return loops


@pytest.mark.postgres
def test_the_answer_before_is_looked_up_for_the_few_candidates_only(migrated_pg_url: str) -> None:
    from harvester.settings import Settings

    with FrontierStore.open(Settings(database_url=migrated_pg_url), upgrade=True) as store:
        store.add_discovered([found(f"https://a.test/{i}") for i in range(PAGES)])
        cycle, _ = store.begin_cycle("harvest", profile={"name": "site"})
        run = store.start_run("extract", profile={"name": "site"})
        claimed = claim_all(store, "w", ["https://a.test"])
        store.complete_many("w", [(done(c.id, page=page(f"<p>{c.id}</p>".encode(), f"h{c.id}")), [])
                                  for c in claimed], run_id=run)
        sent: list[tuple[str, Any]] = []

        def record(_conn, _cursor, sql, params, *_args) -> None:  # type: ignore[no-untyped-def]
            sent.append((sql, params))

        event.listen(store.db.engine, "before_cursor_execute", record)
        try:
            counts = store.cycle_counts(cycle)
        finally:
            event.remove(store.db.engine, "before_cursor_execute", record)
        assert counts["fetched"] == PAGES and counts["moved"] == counts["restored"] == 0
        looking_back = [(sql, params) for sql, params in sent if "fetches_1.id < fetches.id" in sql]
        assert looking_back, "control: cycle_counts looks up the answer before"
        loops: list[int] = []
        with store.db.engine.connect() as conn:
            for sql, params in looking_back:
                plan = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).scalar_one()
                plan = json.loads(plan) if isinstance(plan, str) else plan
                loops += _subplan_loops(plan[0]["Plan"])
        # No redirect and no URL that ever answered 404/410: nothing to look back for. Before, once per 2xx.
        assert max(loops, default=0) == 0, loops
