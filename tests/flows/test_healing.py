"""The healing automations on a started server: created once, brought up to date when an older release made them.

Before: ``ensure_healing`` created an automation only when none of its name existed, so a server that held the
first release's retry automation (which retried any crash, also of a run that never started) kept it for ever.
"""

from __future__ import annotations

from flows.healing import MAX_CRASH_RETRIES, automations, ensure_healing


async def test_healing_is_created_once_and_an_older_trigger_is_updated(prefect_api):
    from prefect import get_client
    from prefect.events.schemas.automations import AutomationCore

    async with get_client() as client:
        for automation in automations():  # the shared server may hold them from another test: start from none
            for held in await client.read_automations_by_name(automation.name):
                await client.delete_automation(held.id)
        retry = automations()[0]
        unbounded = retry.model_copy(deep=True)
        unbounded.trigger.match.root.pop("prefect.run-count")  # type: ignore[union-attr]
        await client.create_automation(AutomationCore(**unbounded.model_dump(exclude={"id"})))

        done = await ensure_healing()
        assert done == [f"updated {retry.name!r}", f"created {automations()[1].name!r}"], done
        assert await ensure_healing() == []  # idempotent: nothing to do the second time

        held = await client.read_automations_by_name(retry.name)
        assert len(held) == 1
        counts = held[0].trigger.match.root["prefect.run-count"]  # type: ignore[union-attr]
        assert counts == [str(n) for n in range(1, MAX_CRASH_RETRIES + 1)]  # never "0": a run that did not start
