"""The healing automations on a started server: created once, brought up to date when an older release made them.

Before: ``ensure_healing`` created an automation only when none of its name existed, so a server that held the
first release's retry automation (which retried any crash, also of a run that never started) kept it for ever.
"""

from __future__ import annotations

from harvester.flows.healing import MAX_CRASH_RETRIES, automations, ensure_healing


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
        assert done == [f"updated {retry.name!r}", *(f"created {a.name!r}" for a in automations()[1:])], done
        assert await ensure_healing() == []  # idempotent: nothing to do the second time

        held = await client.read_automations_by_name(retry.name)
        assert len(held) == 1
        counts = held[0].trigger.match.root["prefect.run-count"]  # type: ignore[union-attr]
        assert counts == [str(n) for n in range(1, MAX_CRASH_RETRIES + 1)]  # never "0": a run that did not start
        exhausted = (await client.read_automations_by_name(automations()[2].name))[0]
        assert exhausted.trigger.match.root["prefect.run-count"] == [str(MAX_CRASH_RETRIES + 1)]  # type: ignore[union-attr]
        assert "retries exhausted" in exhausted.actions[0].message  # type: ignore[union-attr]


async def test_a_crash_past_the_retries_fails_the_run_saying_they_are_exhausted(prefect_api):
    """The 4th crash (run count 4) is not retried and says why; before, it read like any other crash. The event is
    the one Prefect emits for a crashed flow run, sent here for a run that never ran."""
    import asyncio
    import time

    from prefect import get_client
    from prefect.events import emit_event
    from prefect.events.worker import EventsWorker
    from prefect.states import Crashed

    from harvester.flows.harvest import harvest_flow
    from harvester.flows.healing import EXHAUSTED

    await ensure_healing()
    async with get_client() as client:
        run = await client.create_flow_run(harvest_flow, parameters={"profile": {"seeds": ["http://127.0.0.1:9/"]}},
                                           tags=["harvester"], state=Crashed(message="killed"))
        for count in ("3", str(MAX_CRASH_RETRIES + 1)):  # control first: the 3rd crash is retried, not failed
            emit_event("prefect.flow-run.Crashed",
                       resource={"prefect.resource.id": f"prefect.flow-run.{run.id}", "prefect.run-count": count},
                       related=[{"prefect.resource.id": "prefect.tag.harvester", "prefect.resource.role": "tag"}])
            await EventsWorker.drain_all(timeout=10)  # in an event loop it returns an awaitable
            deadline = time.monotonic() + 60
            while True:
                state = (await client.read_flow_run(run.id)).state
                if state is not None and not state.is_crashed():
                    break
                assert time.monotonic() < deadline, state
                await asyncio.sleep(0.5)
            if count == "3":
                assert state.is_scheduled(), state
                await client.set_flow_run_state(run.id, Crashed(message="killed again"), force=True)
        assert state.is_failed() and state.message == EXHAUSTED, state
        await client.delete_flow_run(run.id)
