"""What the harvest and re-crawl flows do around their bodies so the UI tells the truth: the name a person typed for
a run is kept, and a secret that reached a run's parameters (schema check switched off) is erased from them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from prefect import get_client
from prefect.logging.loggers import flow_run_logger
from prefect.runtime import flow_run as this_run

from harvester.flows.parameters import PLAIN_TEXT_REFUSAL, is_secret

if TYPE_CHECKING:
    from prefect import Flow
    from prefect.client.schemas.objects import FlowRun, State


@cache
def _slug_words(name: str) -> frozenset[str]:
    """The words of one of coolname's lists (Prefect names an unnamed run ``<adjective>-<noun>`` from them)."""
    import coolname.data

    spec = cast("dict[str, Any]", coolname.data.config)[name]
    if spec["type"] == "words":
        return frozenset(spec["words"])
    if spec["type"] == "phrases":
        return frozenset("-".join(p) if isinstance(p, list | tuple) else str(p) for p in spec["phrases"])
    if spec["type"] == "const":
        return frozenset([str(spec["value"])])
    return frozenset(word for part in spec.get("lists", ()) for word in _slug_words(part))


def generated(name: str) -> bool:
    """Whether ``name`` is one Prefect made up (``nice-hare``), not one a person typed in the run form."""
    try:
        first, second = (_slug_words(part) for part in ("adj_any", "subj"))
    except (ImportError, KeyError, TypeError):  # coolname's tables moved: take any word-word name for Prefect's
        return name.count("-") == 1 and name.replace("-", "").isalpha() and name.islower()
    return any(name[:cut] in first and name[cut + 1:] in second for cut in range(len(name)) if name[cut] == "-")


def run_name(kind: str) -> Callable[[], str]:
    """``<kind>-<site>`` for a run Prefect named itself (schedules, an API call without a name); the name typed in
    the UI's custom-run form is kept. Before, every run was renamed at its start, the typed name lost."""

    def name() -> str:
        current = str(this_run.name or "")
        if current and not generated(current):
            return current
        profile = this_run.parameters.get("profile")
        site = getattr(profile, "name", None) or (profile or {}).get("name", "site")
        return f"{kind}-{site}"

    return name


async def tidy_stored_parameters(flow: Flow[..., Any], flow_run: FlowRun, state: State[Any]) -> None:
    """``on_failure``: a run refused for a secret in its overrides (possible only with the server's schema check
    switched off, which otherwise refuses it before storing anything) has it erased from its stored parameters, so
    the secret does not stay readable in the UI and the API. Named for what it does on every failed run (nothing,
    nearly always): Prefect logs the hook's name on each, and ``erase_secrets`` had people look for a leak."""
    overrides = (flow_run.parameters or {}).get("overrides")
    if not isinstance(overrides, dict) or not any(is_secret(key) for key in overrides):
        return
    kept = {key: value for key, value in overrides.items() if not is_secret(key)}
    async with get_client() as client:
        await client.update_flow_run(flow_run.id, parameters={**flow_run.parameters, "overrides": kept})
    flow_run_logger(flow_run, flow).warning("erased %s from this run's stored parameters: each %s",
                                       ", ".join(repr(key) for key in overrides if is_secret(key)), PLAIN_TEXT_REFUSAL)
