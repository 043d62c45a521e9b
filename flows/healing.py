"""Runs that heal themselves: the Prefect automations the project creates (``ensure_healing``), idempotently, when
it registers deployments (``harvester serve``, ``harvester deployments``).

- **retry-crashed**: a harvester run (a deployment run tagged ``harvester``) that ends ``Crashed`` (its process
  killed, out of memory, its machine gone) is put back to ``Scheduled`` (named ``AwaitingRetry``), so a worker runs
  it again with the same parameters; the rerun resumes from the frontier (leases of the dead process return,
  nothing completed is fetched again). A Prefect flow's own ``retries`` do not cover this: they retry what the
  flow raised, in the same process, which a killed process never reaches.
- **mark-silent-crashed**: a run whose heartbeats stop (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY``, which ``harvester
  serve`` sets to ``HEARTBEAT_S`` unless it is set; set it on workers too) while it is still Running is marked
  ``Crashed``, which the first automation then retries: what happens when the whole machine is lost and nothing
  is left to report the crash.

Retries are bounded in the trigger: only a crash of a run's first ``MAX_CRASH_RETRIES`` starts (the event's
``prefect.run-count``) is retried; a third automation, **retries-exhausted**, fails the next crashed start saying so
(``EXHAUSTED``). A run that crashed before it ever started (run count 0: its pull step failed,
``HARVESTER_HOME`` unset, a missing dependency) is a fault of the worker's set-up that a rerun would only repeat, so
it stays Crashed with its message instead of looping Crashed→Scheduled forever. The flow itself checks the bound
again (``check_attempt``) for a run put back by other means. A fourth, **close what a crashed run left running**,
runs ``close_crashed_run`` on a worker when a harvester run is marked Crashed (``closing_automation``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

from prefect import flow, get_client
from prefect.automations import Automation
from prefect.client.orchestration import PrefectClient
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterEndTime,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
    FlowRunFilterParentTaskRunId,
    FlowRunFilterStartTime,
    FlowRunFilterState,
    FlowRunFilterStateType,
    TaskRunFilter,
    TaskRunFilterStartTime,
    TaskRunFilterState,
    TaskRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState, RunDeployment
from prefect.events.schemas.automations import AutomationCore, EventTrigger, Posture
from prefect.exceptions import ObjectNotFound
from prefect.states import Crashed

from harvester.errors import CrashedTooOften

TAG = "harvester"
HEARTBEAT_S = 30
"""Seconds between a flow run's heartbeats when ``harvester serve`` starts it (Prefect's floor; its default: 180)."""

MAX_CRASH_RETRIES = 3

RETRIED_RUN_COUNTS = [str(count) for count in range(1, MAX_CRASH_RETRIES + 1)]
"""The run counts whose crash is retried: a run that started and crashed, up to the bound; never one that did not
start (0)."""

EXHAUSTED = (
    f"crashed {MAX_CRASH_RETRIES + 1} times ({MAX_CRASH_RETRIES} retries exhausted): not retried again. Read the "
    f"attempts' logs (something kills the run each time: memory, a host that hangs it); start a new run once the "
    f"cause is fixed"
)
"""The 4th crash's message: before, it read like any other crash."""

_FOR_OUR_RUNS = {"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{TAG}"}


def automations() -> list[Automation]:
    """The two automations, as the server should hold them."""
    return [
        Automation(
            name="harvester: retry crashed runs",
            description=(f"A harvester run that crashed in one of its first {MAX_CRASH_RETRIES} starts is scheduled "
                         f"again and resumes from the frontier; a run that crashed before it started is not (its "
                         f"worker's set-up: read its logs), nor a {MAX_CRASH_RETRIES + 1}th crash (the next "
                         f"automation fails it)."),
            trigger=EventTrigger(
                expect={"prefect.flow-run.Crashed"},
                match={"prefect.resource.id": "prefect.flow-run.*", "prefect.run-count": RETRIED_RUN_COUNTS},
                match_related=_FOR_OUR_RUNS, posture=Posture.Reactive, threshold=1,
            ),
            actions=[ChangeFlowRunState(state=StateType.SCHEDULED, name="AwaitingRetry", force=True,
                                        message="crashed: scheduled again by harvester's retry automation")],
        ),
        Automation(
            name="harvester: mark silent runs crashed",
            description="A harvester run whose heartbeats stopped while it was running is marked Crashed.",
            trigger=EventTrigger(
                after={"prefect.flow-run.heartbeat"},
                expect={"prefect.flow-run.heartbeat", "prefect.flow-run.Completed", "prefect.flow-run.Failed",
                        "prefect.flow-run.Cancelled", "prefect.flow-run.Crashed"},
                match={"prefect.resource.id": "prefect.flow-run.*"}, match_related=_FOR_OUR_RUNS,
                for_each={"prefect.resource.id"}, posture=Posture.Proactive, threshold=1,
                within=timedelta(seconds=3 * HEARTBEAT_S),
            ),
            actions=[ChangeFlowRunState(state=StateType.CRASHED, message="no heartbeat: its process is gone")],
        ),
        Automation(
            name="harvester: say when crash retries are exhausted",
            description="A harvester run that crashed once more than it is retried fails, saying so.",
            trigger=EventTrigger(
                expect={"prefect.flow-run.Crashed"},
                match={"prefect.resource.id": "prefect.flow-run.*", "prefect.run-count": [str(MAX_CRASH_RETRIES + 1)]},
                match_related=_FOR_OUR_RUNS, posture=Posture.Reactive, threshold=1,
            ),
            actions=[ChangeFlowRunState(state=StateType.FAILED, name="RetriesExhausted", force=True,
                                        message=EXHAUSTED)],
        ),
    ]


async def ensure_healing() -> list[str]:
    """Create the automations the server does not hold yet, and bring up to date one an older release created (by
    name), so a fix to a trigger reaches servers already in use; returns what it did, e.g. ``created 'x'``."""
    done = []
    async with get_client() as client:
        closer = await _closer_deployment(client)
        for automation in [*automations(), *([closing_automation(closer)] if closer is not None else [])]:
            wanted = AutomationCore(**automation.model_dump(exclude={"id"}))
            held = await client.read_automations_by_name(automation.name)
            if not held:
                await client.create_automation(wanted)
                done.append(f"created {automation.name!r}")
                continue
            stale = [old for old in held if AutomationCore(**old.model_dump(exclude={"id"})) != wanted]
            if stale:
                # Replaced, not updated: Prefect 3.9's update_automation sends a field its own server refuses.
                for old in stale:
                    await client.delete_automation(old.id)
                if len(stale) == len(held):
                    await client.create_automation(wanted)
                done.append(f"updated {automation.name!r}")
    return done


CLOSER_NAME = "close-crashed-run"
CLOSER_DEPLOYMENT = f"{CLOSER_NAME}/healing"
"""The deployment the fourth automation runs, as ``harvester deployments`` writes it for the pool; ``harvester
serve`` serves its own, ``CLOSER_DEPLOYMENT-serve`` (never overwriting the pool's), used when the pool has none."""


def closing_automation(closer: UUID) -> Automation:
    """When a harvester run is marked Crashed (by the heartbeat automation after a machine loss, or any other way),
    run ``close_crashed_run`` for it: the server itself can only change the crashed run's own state, and what its
    lost process left Running (task runs, subflows with theirs) stayed so until a rerun started, or for ever when
    none did (retries exhausted, a run that never started)."""
    return Automation(
        name="harvester: close what a crashed run left running",
        description=("The task runs and subflow runs a crashed harvester run left Running are marked Crashed, by "
                     "the close-crashed-run deployment on a worker or harvester serve; without either, the next "
                     "harvester run to start closes them."),
        trigger=EventTrigger(expect={"prefect.flow-run.Crashed"}, match={"prefect.resource.id": "prefect.flow-run.*"},
                             match_related=_FOR_OUR_RUNS, posture=Posture.Reactive, threshold=1),
        actions=[RunDeployment(source="selected", deployment_id=closer,
                               parameters={"flow_run_id": "{{ event.resource.id }}"})],
    )


async def _closer_deployment(client: PrefectClient) -> UUID | None:
    for name in (CLOSER_DEPLOYMENT, f"{CLOSER_DEPLOYMENT}-serve"):
        try:
            return (await client.read_deployment_by_name(name)).id
        except ObjectNotFound:
            continue
    return None


@flow(name=CLOSER_NAME)
async def close_crashed_run(flow_run_id: str) -> int:
    """Close what a crashed run left Running; returns how many. Only what started before its last crash: the
    retry automation may have scheduled it again meanwhile, and a rerun's own task runs are not touched."""
    run_id = UUID(flow_run_id.removeprefix("prefect.flow-run."))  # the crash event's resource
    async with get_client() as client:
        crashes = [state.timestamp for state in await client.read_flow_run_states(run_id)
                   if state.is_crashed()]
    if not crashes:
        return 0
    return await close_earlier_attempts(run_id, "its process was lost (the run was marked Crashed)",
                                        before=max(crashes))


async def close_earlier_attempts(
    flow_run_id: UUID, message: str = "its process was lost; a later attempt of the run resumed from the frontier",
    *, before: datetime | None = None,
) -> int:
    """At a rerun's start, or when the run is marked Crashed (``close_crashed_run``): what an earlier attempt left
    Running is marked Crashed, its task runs and its subflow runs with theirs; returns how many. A lost machine
    sends no last events: before, the task runs of completed subflows stayed Running for ever (subflows carry no
    tags, no automation covered them), and the UI showed a Completed subflow with Running tasks."""
    async with get_client() as client:
        subflows = await client.read_flow_runs(flow_run_filter=FlowRunFilter(
            parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]),
            start_time=FlowRunFilterStartTime(before_=before) if before is not None else None))
        runs = [flow_run_id, *(subflow.id for subflow in subflows)]
        tasks = await client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=runs)),
            task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=_OPEN)),
                                          start_time=TaskRunFilterStartTime(before_=before) if before else None))
        for task_run in tasks:
            await client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
        left = [subflow for subflow in subflows if subflow.state_type in _OPEN]
        for subflow in left:
            await client.set_flow_run_state(subflow.id, Crashed(message=message), force=True)
    return len(tasks) + len(left)


_OPEN = [StateType.RUNNING, StateType.PENDING]
_ENDED = [StateType.COMPLETED, StateType.FAILED, StateType.CANCELLED, StateType.CRASHED]
FLOW_NAMES = ["harvest", "recrawl", "discover", "extract"]
"""The harvester's flows, whose leftovers ``close_leftovers`` looks for: by flow name (subflows carry no tags), so
another project's flows of these names on the same Prefect server would be swept too; give the harvester a server
(or a workspace) of its own."""

SETTLE_S = 30.0
"""How long after a flow run ended its leftovers are left alone: a run's last task states may reach the server just
after its own (a graceful stop ends tasks and flow together)."""

LEFTOVER = "left Running by a run that had ended (its process was lost); closed when a later harvester run started"


async def close_leftovers(message: str = LEFTOVER) -> int:
    """At every harvest or re-crawl start: what any ended harvester run left Running (task runs; subflow runs, with
    theirs) is marked Crashed; returns how many. The closing automation's deployment needs a worker or ``harvester
    serve`` to run it: without one, a lost run's leftovers stayed Running until that run itself came back, or for
    ever. Looked for through the API (three queries when there is nothing to close), for every site: a site's next
    run closes another's. A run the retry automation put back to Scheduled counts as ended: its rerun, which would
    close them, needs a worker too."""
    settled = datetime.now(UTC) - timedelta(seconds=SETTLE_S)
    ours = FlowFilter(name=FlowFilterName(any_=FLOW_NAMES))
    closed = 0
    async with get_client() as client:
        subflows = await client.read_flow_runs(flow_filter=ours, flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_OPEN)),
            parent_task_run_id=FlowRunFilterParentTaskRunId(is_null_=False)))
        for subflow in subflows:
            holder = await client.read_task_run(subflow.parent_task_run_id)  # type: ignore[arg-type]
            parent = await client.read_flow_run(holder.flow_run_id) if holder.flow_run_id else None
            if parent is not None and (parent.state_type == StateType.SCHEDULED or (
                    parent.state_type in _ENDED and (parent.end_time or settled) <= settled)):
                await client.set_flow_run_state(subflow.id, Crashed(message=message), force=True)
                closed += 1 + await _close_task_runs(client, [subflow.id], message)
        # An ended run's, once settled; and a run's put back to Scheduled (the retry automation): its open task
        # runs are its lost attempt's, and with no worker its rerun never comes to close them.
        open_tasks = TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=_OPEN)))
        tasks = [*await client.read_task_runs(
            flow_filter=ours, task_run_filter=open_tasks,
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_ENDED)),
                                          end_time=FlowRunFilterEndTime(before_=settled))),
            *await client.read_task_runs(flow_filter=ours, task_run_filter=open_tasks, flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))))]
        for task_run in tasks:
            await client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
    return closed + len(tasks)


async def close_leftovers_at_start() -> None:
    """``close_leftovers`` for a starting run, saying in its logs what it closed; a failure to look is logged, never
    fails the run (the leftovers are another run's)."""
    from prefect import get_run_logger

    logger = get_run_logger()
    try:
        closed = await close_leftovers()
    except Exception as error:  # the API refused or failed: the run goes on, saying so
        logger.warning("could not look for what ended runs left Running: %s", error)
        return
    if closed:
        logger.info("closed %d task or subflow runs that ended harvester runs had left Running (marked Crashed)",
                    closed)


async def _close_task_runs(client: PrefectClient, flow_run_ids: list[UUID], message: str) -> int:
    tasks = await client.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=flow_run_ids)),
        task_run_filter=TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=_OPEN))))
    for task_run in tasks:
        await client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
    return len(tasks)


def check_attempt(run_count: int) -> None:
    """Refuse a rerun beyond the bound (``run_count`` is Prefect's: 1 for the first run of a flow run)."""
    if run_count > MAX_CRASH_RETRIES + 1:
        raise CrashedTooOften(
            f"this run has started {run_count} times (crashed and retried {run_count - 1} times): not retried "
            f"again. Read the crashed attempts' logs; start a new run once the cause is fixed"
        )
