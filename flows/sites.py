"""Sites declared once: a TOML file with one table per site, read by ``harvester serve --sites`` and by
``harvester deployments --sites`` (which writes the ``prefect.yaml`` of the work-pool deployments).

    [sites.shop]
    seeds = ["https://shop.example/"]
    harvest = "0 2 * * 0"          # cron of the full harvest (default: Sundays 02:00)
    recrawl = "0 3 * * *"          # cron of the re-crawl (default: daily 03:00)
    timezone = "Europe/Berlin"     # of both crons (default: UTC)
    workers = 2                    # extraction workers inside one run (default: 1)
    max_pages_per_host = 5000      # any other key is a SiteProfile field: scope, patterns, limits, extractor
    [sites.shop.scope]
    deny_patterns = ["/cart"]

Every site gets two deployments, ``harvest/<site>`` and ``recrawl/<site>``, whose runs carry its name (in the run
name, the ``profile`` parameter and a tag). A file with any bad entry registers nothing: every problem of every site
is reported at once, one per line, each naming the site and the key.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from prefect.client.schemas.schedules import CronSchedule
from pydantic import ValidationError

from harvester.errors import ConfigError
from harvester.flows.parameters import MAX_WORKERS
from harvester.site_profile import SiteProfile

HARVEST_CRON = "0 2 * * 0"
"""Full harvest: Sundays 02:00."""

RECRAWL_CRON = "0 3 * * *"
"""Incremental re-crawl: daily 03:00."""

SCHEDULE_KEYS = ("harvest", "recrawl", "timezone", "workers")


@dataclass(frozen=True, slots=True)
class SiteSpec:
    """One site of the file: its profile and how its two deployments run."""

    profile: SiteProfile
    harvest_cron: str = HARVEST_CRON
    recrawl_cron: str = RECRAWL_CRON
    timezone: str = "UTC"
    workers: int = 1


def load_sites(path: Path) -> list[SiteSpec]:
    """Every site of ``path``, or a ``ConfigError`` listing every bad entry (site and key) and nothing else."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"sites file {path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"sites file {path} is not valid TOML: {exc}") from None
    tables = data.get("sites")
    unknown = sorted(set(data) - {"sites"})
    if unknown or not isinstance(tables, dict) or not tables:
        raise ConfigError(f"sites file {path}: expected [sites.<name>] tables only"
                          + (f" (found {', '.join(unknown)})" if unknown else ""))
    sites, problems = [], []
    for name, table in tables.items():
        found = _problems(name, table)
        if found:
            problems += [f"  site {name!r}: {problem}" for problem in found]
        else:
            sites.append(_site(name, table))
    if problems:
        raise ConfigError(f"sites file {path}: nothing was registered; fix these {len(problems)} problems:\n"
                          + "\n".join(problems))
    return sites


def _site(name: str, table: dict[str, Any]) -> SiteSpec:
    """A table ``_problems`` found nothing wrong with."""
    fields = {key: value for key, value in table.items() if key not in SCHEDULE_KEYS}
    return SiteSpec(profile=SiteProfile(name=name, **fields), harvest_cron=str(table.get("harvest", HARVEST_CRON)),
                    recrawl_cron=str(table.get("recrawl", RECRAWL_CRON)), timezone=str(table.get("timezone", "UTC")),
                    workers=table.get("workers", 1))


def _problems(name: str, table: Any) -> list[str]:
    """Every problem of one site's table, each naming its key, so one round of fixes is enough."""
    if not isinstance(table, dict):
        return ["must be a table ([sites.<name>]) of keys"]
    problems = []
    fields = {key: value for key, value in table.items() if key not in SCHEDULE_KEYS}
    if "name" in fields:
        problems.append("'name': the table's name is the site's name; drop the key")
        fields.pop("name")
    try:
        SiteProfile(name=name, **fields)
    except ValidationError as exc:
        problems += [f"{'.'.join(str(part) for part in error['loc']) or 'value'}: {_message(error)}"
                     for error in exc.errors()]
    timezone = table.get("timezone", "UTC")
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        problems.append(f"'timezone': {timezone!r} is not a time zone like UTC or Europe/Berlin")
        timezone = "UTC"
    for key, default in (("harvest", HARVEST_CRON), ("recrawl", RECRAWL_CRON)):
        cron = str(table.get(key, default))
        try:
            CronSchedule(cron=cron, timezone=str(timezone))
        except ValidationError:
            problems.append(f"{key!r}: {cron!r} is not a cron expression like \"0 3 * * *\"")
    workers = table.get("workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= MAX_WORKERS:
        problems.append(f"'workers': {workers!r} is not a whole number from 1 to {MAX_WORKERS}")
    return problems


def _message(error: Any) -> str:
    if error.get("type") == "extra_forbidden":
        return f"unknown key; site keys are {', '.join(SCHEDULE_KEYS)} and the fields of SiteProfile: " + ", ".join(
            sorted(set(SiteProfile.model_fields) - {"name"}))
    return str(error.get("msg", "invalid"))
