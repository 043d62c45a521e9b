"""The healing automations on a started server: created once, brought up to date when an older release made them.

Before: ``ensure_healing`` created an automation only when none of its name existed, so a server that held the
first release's retry automation (which retried any crash, also of a run that never started) kept it for ever.
"""

from __future__ import annotations

import asyncio
import inspect

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
        expected = [f"updated {retry.name!r}", *(f"created {a.name!r}" for a in automations()[1:])]
        assert done[:len(expected)] == expected, done  # then the closer's, if its deployment is there
        assert await ensure_healing() == []  # idempotent: nothing to do the second time

        held = await client.read_automations_by_name(retry.name)
        assert len(held) == 1
        counts = held[0].trigger.match.root["prefect.run-count"]  # type: ignore[union-attr]
        assert counts == [str(n) for n in range(1, MAX_CRASH_RETRIES + 1)]  # never "0": a run that did not start
        # The UI shows the trigger without its run-count bound: the description says it (read as a person would).
        assert f"in one of its first {MAX_CRASH_RETRIES} starts" in held[0].description
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


async def test_a_run_marked_crashed_has_what_it_left_running_closed_without_a_rerun(prefect_api):
    """After a machine loss the heartbeat automation marks the run Crashed (here set as it does); the fourth
    automation then runs ``close_crashed_run`` for it, which a worker runs (here Prefect's engine in a process, as a
    worker starts it): its task runs and its subflow's are closed at once, not when a rerun starts. Before: they
    stayed Running until a rerun, or for ever when none came."""
    import asyncio
    import subprocess
    import sys
    import time
    from pathlib import Path

    from prefect import get_client, task
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId, FlowRunFilter, FlowRunFilterId
    from prefect.states import Completed, Crashed, Running

    from harvester.flows.extract import extract_flow
    from harvester.flows.harvest import harvest_flow
    from harvester.flows.healing import close_crashed_run

    @task
    def step() -> None: ...

    closer = await (await close_crashed_run.ato_deployment(name="healing")).aapply()
    assert any("close what a crashed run" in done for done in await ensure_healing())
    async with get_client() as client:
        parent = await client.create_flow_run(harvest_flow, parameters={"profile": {"seeds": ["http://127.0.0.1:9/"]}},
                                              tags=["harvester"], state=Running())
        holder = await client.create_task_run(step, parent.id, "extract", state=Running())
        subflow = await client.create_flow_run(extract_flow, parameters={}, parent_task_run_id=holder.id,
                                               state=Running())
        left = [(await client.create_task_run(step, subflow.id, f"w{n}", state=Running())).id for n in range(2)]
        await client.set_flow_run_state(subflow.id, Completed(), force=True)  # a Completed subflow, tasks Running
        left.append((await client.create_task_run(step, parent.id, "publish", state=Running())).id)

        async def running() -> list[object]:
            runs = await client.read_task_runs(task_run_filter=None, flow_run_filter=FlowRunFilter(
                id=FlowRunFilterId(any_=[parent.id, subflow.id])))
            return [run.id for run in runs if run.state is not None and run.state.is_running()]

        assert sorted(map(str, await running())) == sorted(map(str, left))  # control: 3 left Running
        await client.set_flow_run_state(parent.id, Crashed(message="no heartbeat: its process is gone"), force=True)
        deadline = time.monotonic() + 60
        while not (asked := await client.read_flow_runs(deployment_filter=DeploymentFilter(
                id=DeploymentFilterId(any_=[closer])))):
            assert time.monotonic() < deadline, "the automation did not run close-crashed-run"
            await asyncio.sleep(0.5)
        assert asked[0].parameters == {"flow_run_id": f"prefect.flow-run.{parent.id}"}
        env = {**prefect_api, "PREFECT__FLOW_RUN_ID": str(asked[0].id)}
        subprocess.run([sys.executable, "-m", "prefect.engine"], env=env, cwd=Path(__file__).parents[2],
                       capture_output=True, timeout=120, check=True)
        assert await running() == []
        assert (await client.read_flow_run(asked[0].id)).state.is_completed()
        assert (await client.read_flow_run(parent.id)).run_count <= 1  # no rerun did it
        await client.delete_deployment(closer)  # and its automation: the shared server's other tests expect none
        for held in await client.read_automations_by_name("harvester: close what a crashed run left running"):
            await client.delete_automation(held.id)
        await client.delete_flow_run(parent.id)


async def test_the_next_run_closes_what_a_crashed_run_left_running_with_no_worker_and_no_serve(
    prefect_api, make_web, sqlite_url, monkeypatch
):
    """No closing deployment, no worker, no ``harvester serve``: a lost run of site ``lost`` left task runs Running
    (one in a Completed subflow, one in a subflow left Running) and was marked Crashed. The next harvester run of
    any site closes them as it starts, and says so in its logs. Before: they stayed Running until ``lost`` itself
    ran again, or for ever. A live run's task run (a Running flow run's) is left alone."""
    from conftest import prepared
    from prefect import get_client, task
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId, LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker
    from prefect.states import Completed, Crashed, Running

    import harvester.flows.healing as healing
    from harvester.flows.extract import extract_flow
    from harvester.flows.harvest import harvest_flow
    from harvester.site_profile import SiteProfile
    from harvester.testing.sites import HostSpec

    @task
    def step() -> None: ...

    monkeypatch.setattr(healing, "SETTLE_S", 0.0)  # the runs below ended a moment ago, not SETTLE_S ago
    async with get_client() as client:
        assert not await client.read_automations_by_name("harvester: close what a crashed run left running")
        lost = await client.create_flow_run(harvest_flow, parameters={"profile": {"seeds": ["http://127.0.0.1:9/"]}},
                                            tags=["harvester"], state=Running())
        subflows, left = [], []
        for name in ("discover", "extract"):
            holder = await client.create_task_run(step, lost.id, name, state=Running())
            subflow = await client.create_flow_run(extract_flow, parameters={}, parent_task_run_id=holder.id,
                                                   state=Running())
            subflows.append(subflow.id)
            left.append((await client.create_task_run(step, subflow.id, f"{name}-w0", state=Running())).id)
        await client.set_flow_run_state(subflows[0], Completed(), force=True)  # a Completed subflow, a task Running
        left.append((await client.create_task_run(step, lost.id, "publish", state=Running())).id)
        await client.set_flow_run_state(lost.id, Crashed(message="no heartbeat: its process is gone"), force=True)
        live = await client.create_flow_run(harvest_flow, parameters={"profile": {"seeds": ["http://127.0.0.1:9/"]}},
                                            tags=["harvester"], state=Running())
        alive = (await client.create_task_run(step, live.id, "busy", state=Running())).id

        async def running(ids: list[object]) -> set[object]:
            runs = await client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
            return {run.id for run in runs if run.state is not None and run.state.is_running()}

        assert await running([lost.id, *subflows]) >= set(left)  # control: the lost run's leftovers

        web = make_web([HostSpec("n", pages=10)], seed=36)
        state = await harvest_flow(SiteProfile.build(seeds=tuple(web.seeds), name="next"),
                                   overrides=prepared(sqlite_url), return_state=True)
        assert state.is_completed(), state

        logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
            any_=[state.state_details.flow_run_id])))
        assert await running([lost.id, *subflows]) == set(), [log.message for log in logs]
        assert (await client.read_flow_run(subflows[1])).state.is_crashed()  # the subflow left Running, closed
        assert await running([live.id]) == {alive}  # a live run's own task run is not touched
        # Logs reach the server in batches from this process's log worker: drained first, then looked for (beside
        # two busy loops the batch had not arrived when read, though the flow had logged it).
        drained = APILogWorker.drain_all(timeout=10)
        if inspect.isawaitable(drained):
            await drained
        for _ in range(60):
            logs = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
                any_=[state.state_details.flow_run_id])))
            if any("that ended harvester runs had left Running" in log.message for log in logs):
                break
            await asyncio.sleep(0.5)
        assert any("that ended harvester runs had left Running" in log.message for log in logs), logs
        for run_id in (lost.id, live.id):
            await client.delete_flow_run(run_id)
