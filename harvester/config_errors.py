"""Configuration errors a person can act on: each bad key with its value, where the value came from, the rule it
broke and, for an unknown key, the nearest valid one. Never decides a setting; ``settings.py`` calls it when
pydantic refuses one."""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ValidationError

from harvester.errors import ConfigError


def config_error(
    exc: ValidationError, *, where: str, model: type[BaseModel] | None = None, toml: Path | None = None,
    given: Collection[str] = (), sources: bool = False,
) -> ConfigError:
    """Turn pydantic's report into one message that names each bad key, its value, where the value came from
    (``given``: flags and arguments, as dotted keys; an env variable; the ``toml`` file) and the rule broken. An
    unknown key gets the nearest valid one (``model``'s, at the same place) as a suggestion. ``sources``: the
    values came through ``Settings``' sources (flags, env, TOML), so each names the one it came from."""
    problems = []
    for err in exc.errors():
        loc = tuple(str(part) for part in err["loc"])
        key = ".".join(loc) or "(root)"
        value = err.get("input")
        shown = repr(value) if not isinstance(value, dict) else "{...}"
        if len(shown) > 80:
            shown = shown[:77] + "..."
        rule = err["msg"]
        if err["type"] == "extra_forbidden" and model is not None:
            rule = _unknown_key(model, loc)
        source = _source_of(loc, toml=toml, given=given) if sources else None
        problems.append(f"{key}={shown}{f' (from {source})' if source else ''}: {rule}")
    return ConfigError(f"invalid configuration in {where}: " + "; ".join(problems))


def misspelled_env(fields: list[str]) -> str | None:
    """An env variable that looks like a misspelled setting (``HARVESTER_DATABSE_URL``): pydantic ignores unknown
    variables, so the run would go on with the default instead. Only names close to a setting are refused:
    ``HARVESTER_HOME`` and ``HARVESTER_NOW`` are not settings and stay free for other uses."""
    for name in sorted(os.environ):
        if not name.upper().startswith("HARVESTER_"):
            continue
        top, sep, rest = name[len("HARVESTER_"):].partition("__")
        if top.lower() in fields:
            continue
        near = difflib.get_close_matches(top.lower(), fields, n=1, cutoff=0.8)
        if near:
            meant = f"HARVESTER_{near[0].upper()}{sep}{rest}"
            return f"env {name}: no such setting; did you mean {meant}? (harvester/settings.py lists them)"
    return None


def _unknown_key(model: type[BaseModel], loc: tuple[str, ...]) -> str:
    """"unknown key; did you mean 'politeness.per_host_start'?", from the keys valid where ``loc`` points."""
    *parents, leaf = loc
    for part in parents:
        field_info = model.model_fields.get(part)
        annotation = field_info.annotation if field_info is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return "unknown key"
        model = annotation
    valid = sorted(model.model_fields)
    near = difflib.get_close_matches(leaf, valid, n=1, cutoff=0.6)
    if near:
        return f"unknown key; did you mean {'.'.join((*parents, near[0]))!r}?"
    return f"unknown key; valid{' in ' + '.'.join(parents) if parents else ''}: {', '.join(valid)}"


def _source_of(loc: tuple[str, ...], *, toml: Path | None, given: Collection[str]) -> str | None:
    """Where a bad settings value came from, in the order ``Settings`` reads them: flags, env, the TOML file."""
    dotted = ".".join(loc)
    if any(dotted == key or dotted.startswith(key + ".") for key in given):
        return "the arguments"  # a CLI flag, a run's overrides, a library call's keywords
    for depth in range(len(loc), 0, -1):  # HARVESTER_HTTP__USER_AGENT, or the group as JSON in HARVESTER_HTTP
        name = "HARVESTER_" + "__".join(loc[:depth]).upper()
        if any(env.upper() == name for env in os.environ):
            return f"env {name}"
    if loc:  # a group refused as a whole (a renamed key in it): the variable that set a key of it
        for env in sorted(os.environ):
            if env.upper().startswith("HARVESTER_" + loc[0].upper() + "__"):
                return f"env {env}"
    return str(toml) if toml is not None else None
