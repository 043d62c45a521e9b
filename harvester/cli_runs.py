"""How a CLI command runs a phase or a cycle: through the Prefect flows when a Prefect server is configured (the
runs, their task runs and artifacts are recorded there), else in this process through the library.

Without a server, the flows would start Prefect's temporary one for every command: about 5 s and 200 MB before the
first request and a few seconds after the last answer, on a run whose records vanish with it (measured in
issue 22). The library runs the same steps (``harvester.phases.cycles``), records the same runs in the frontier
and leaves the same data, so ``harvester status``, ``export`` and a resumed run see no difference.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from harvester.errors import EveryRequestFailed, ExtractorFailed, Interrupted
from harvester.extraction import hook_failed_everywhere, resolve_hook
from harvester.phases.cycles import Cycle, LocalSteps, extraction_failure, harvest_steps, loud, recrawl_steps
from harvester.settings import Settings
from harvester.site_profile import SiteProfile


def prefect_api_url() -> str | None:
    """The Prefect server the user configured: ``PREFECT_API_URL``, else the active profile's (read from the
    profiles file without importing Prefect, which alone costs about a second)."""
    if value := os.environ.get("PREFECT_API_URL"):
        return value
    home = Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or data.get("active")
    profile = (data.get("profiles") or {}).get(active) or {}
    value = profile.get("PREFECT_API_URL") if isinstance(profile, dict) else None
    return str(value) if value else None


def _cycle_dict(cycle: Cycle[Any]) -> dict[str, Any]:
    """A library cycle in the shape the flows return (what the CLI prints)."""
    return {"discover": dict(cycle.discover.counters), "extract": dict(cycle.extract.counters),
            "changes": cycle.changes, "problems": cycle.problems,
            "extract_run": getattr(cycle.extract, "run_id", None)}


async def run_locally(
    kind: str, settings: Settings, profile: SiteProfile, *, workers: int = 1, refresh: bool = False
) -> dict[str, Any]:
    """``kind`` (harvest, recrawl, discover, extract) in this process; returns what the flow would, and the
    extraction's run id (``extract_run``: the run the command's closing table shows)."""
    resolve_hook(profile.extractor, None)  # a bad hook is refused before the site is asked anything
    steps = LocalSteps(settings, profile, workers)
    if kind == "harvest":
        return _cycle_dict(loud(await harvest_steps(steps, settings, profile)))
    if kind == "recrawl":
        return _cycle_dict(loud(await recrawl_steps(steps, settings, profile, refresh=refresh)))
    if kind == "discover":
        return dict((await steps.discover(refresh=refresh)).counters)
    extracted = await steps.extract()
    counters: dict[str, Any] = dict(extracted.counters)
    if (failed := hook_failed_everywhere(counters)) is not None:
        raise ExtractorFailed(failed)
    if extracted.run_id is not None and (unanswered := await extraction_failure(settings, extracted.run_id)):
        raise EveryRequestFailed(unanswered)
    return {**counters, "extract_run": extracted.run_id}


def _counters(ran: object) -> dict[str, Any]:
    """A cycle flow's counters. It returns a state instead only when cancelled from Prefect under a runner
    (``harvester.flows.lifeline``), never called in this process; were it so, the run stopped."""
    if isinstance(ran, dict):
        return ran
    raise Interrupted(f"the run ended {ran}")


async def run_with_prefect(
    kind: str, profile: SiteProfile, *, workers: int, refresh: bool, config_file: str | None,
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """``kind`` as its Prefect flow (recorded on the configured server)."""
    from harvester.flows.parameters import RunOverrides

    typed = RunOverrides.model_validate(overrides)
    if kind == "harvest":
        from harvester.flows.harvest import harvest_flow

        result = _counters(await harvest_flow(profile, workers=workers, config_file=config_file, overrides=typed))
    elif kind == "recrawl":
        from harvester.flows.recrawl import recrawl_flow

        result = _counters(await recrawl_flow(profile, refresh=refresh, workers=workers, config_file=config_file,
                                              overrides=typed))
    elif kind == "discover":
        from harvester.flows.discover import discover_flow

        result = await discover_flow(profile, refresh=refresh, config_file=config_file, overrides=typed)
    else:
        from harvester.flows.extract import extract_flow

        result = await extract_flow(profile, workers=workers, config_file=config_file, overrides=typed)
    return result
