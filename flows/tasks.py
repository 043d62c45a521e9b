"""One Prefect task per library call, per host (discovery) or per extraction worker; never one per URL.

Idempotence comes from the frontier, not from Prefect's result cache (``cache_policy=NO_CACHE``): a retried or
rerun task resumes from database state (expired or orphaned leases requeued, completed URLs never refetched).
Task results are small counters.
"""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import aupdate_progress_artifact
from prefect.cache_policies import NO_CACHE

from harvester import phases
from harvester.errors import ConfigError, FrontierBusy, InvalidRecord, SchemaOutOfDate
from harvester.fetch.workers import PROGRESS_EVERY_S
from harvester.flows.logs import send_library_lines_to_runs
from harvester.flows.parameters import RunOverrides
from harvester.phases import Progress
from harvester.phases.cycle_state import find_cycle
from harvester.settings import Settings
from harvester.site_profile import SiteProfile

LOG_EVERY_S = 15.0
"""How often a worker logs how far it got: one line, never a line per URL or per host (each host gets one line per
run, from the extraction flow when its workers are done: ``host_line``)."""

RETRY_DELAYS_S: list[float] = [2.0, 10.0, 60.0]


def is_retryable(task: Any, task_run: Any, state: Any) -> bool:
    """Retry everything except errors a retry cannot fix (bad configuration, schema, malformed rows, a SQLite
    frontier another process is extracting from)."""
    # Prefect's task engine hands over Failed(data=<the exception>). ``state.result()`` must not be used here:
    # inside an async task it returns an un-awaited coroutine, which raised nothing and so retried nothing.
    error = getattr(state, "data", None)
    if not isinstance(error, BaseException):
        return True  # no exception to classify: Prefect's default (retry)
    return not isinstance(error, ConfigError | SchemaOutOfDate | InvalidRecord | FrontierBusy)


def load_settings(config_file: str | None, overrides: RunOverrides | dict[str, Any] | None) -> Settings:
    """Settings at the edge: the run's overrides, then HARVESTER_* env, then the TOML file."""
    if overrides is None:
        return Settings.load(config_file)
    return Settings.load(config_file).with_overrides(**_typed(overrides).dotted())


def run_profile(profile: SiteProfile, overrides: RunOverrides | dict[str, Any] | None) -> SiteProfile:
    """The profile at the edge: with the site's limits the run's overrides change (``RunOverrides.SITE``)."""
    return profile if overrides is None else _typed(overrides).site_profile(profile)


def _typed(overrides: RunOverrides | dict[str, Any]) -> RunOverrides:
    return overrides if isinstance(overrides, RunOverrides) else RunOverrides.model_validate(overrides)


@task(
    retries=3, retry_delay_seconds=RETRY_DELAYS_S, retry_jitter_factor=0.5, retry_condition_fn=is_retryable,
    cache_policy=NO_CACHE, task_run_name="discover-{origin}",
)
async def discover_host(
    profile: SiteProfile, origin: str, run_id: int, refresh: bool, config_file: str | None,
    overrides: RunOverrides | None, handover: str | None = None,
) -> dict[str, Any]:
    """Discovery of one host; a rerun skips documents this run already processed. Done, the host is handed to
    the cycle's extraction (``handover``: the key of the cycle's state in this process, ``find_cycle``)."""
    settings = load_settings(config_file, overrides)
    async with phases.open_store(settings) as store:
        result = await phases.discover(store, settings, profile, hosts=[origin], run_id=run_id, refresh=refresh,
                                       cycle=find_cycle(handover))
    return result.as_dict()


@task(
    retries=3, retry_delay_seconds=RETRY_DELAYS_S, retry_jitter_factor=0.5, retry_condition_fn=is_retryable,
    cache_policy=NO_CACHE, task_run_name="extract-{worker}",
)
async def extract_worker(
    profile: SiteProfile, worker: int, run_id: int, progress_id: str | None, config_file: str | None,
    overrides: RunOverrides | None, handover: str | None = None,
) -> dict[str, Any]:
    """One extraction worker: leases hosts (SKIP LOCKED on PostgreSQL) and fetches their due URLs; ``handover``
    finds the cycle's state in this process (``find_cycle``): only hosts its discovery has handed over, and what an
    earlier attempt of this task could not write."""
    settings = load_settings(config_file, overrides)
    reporter = _Reporter(progress_id)
    async with phases.open_store(settings) as store:
        result = await phases.extract(store, settings, profile, run_id=run_id, worker=worker, on_progress=reporter,
                                      cycle=find_cycle(handover))
    return result.as_dict()


class _Reporter:
    """Turns the library's progress callbacks into a progress artifact (at most every ``PROGRESS_EVERY_S``, the
    library's pace of them) and a throttled progress line."""

    def __init__(self, progress_id: str | None) -> None:
        self._progress_id = progress_id
        self._logger = get_run_logger()
        self._last_progress = 0.0
        self._last_log = time.monotonic()

    async def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        final = progress.final
        if self._progress_id and (final or now - self._last_progress >= PROGRESS_EVERY_S):
            self._last_progress = now
            await aupdate_progress_artifact(artifact_id=UUID(self._progress_id), progress=progress.percent)
        if not final and now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            active = sum(1 for host in progress.hosts.values() if host.in_flight)
            self._logger.info("%d of %d due URLs done (%d%%), %d hosts fetching", progress.done, progress.total,
                              int(progress.percent), active)


def host_line(origin: str, host: dict[str, Any]) -> str:
    """A host's one log line of an extraction run (``PhaseResult.hosts``): what it answered, how hard it was
    asked, what failed and why it was parked."""
    errors = ",".join(f"{name}={count}" for name, count in sorted((host.get("errors") or {}).items())) or "-"
    return (f"{origin} fetched={host.get('fetched', 0)} 304={host.get('not_modified', 0)} gone={host.get('gone', 0)} "
            f"failed={host.get('failed', 0)} peak={host.get('peak_in_flight', 0)}/{host.get('limit', 0)} "
            f"rate={float(host.get('rate_per_s') or 0):.1f}/s errors={errors}"
            + (f" parked={host['parked_reason']}" if host.get("parked_reason") else ""))


send_library_lines_to_runs()  # every flow imports this module: the library's lines reach the run's logs
