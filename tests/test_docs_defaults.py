"""docs/operations.md's table of settings repeats their defaults for the reader; ``harvester/settings.py`` is their
one home. Every default the table states as a number, a size, a duration or a word must be the settings' own, so
a default changed in code cannot leave the page telling operators another one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harvester.settings import Settings

DOC = Path(__file__).parents[1] / "docs" / "operations.md"
UNITS = {"KiB": 1024, "MiB": 2**20, "h": 3600, "d": 86_400}
ROW = re.compile(r"^\| (`[^|]+`) \| ([^|]+) \|")


def default_of(key: str) -> Any:
    """The default of a dotted settings key (``politeness.park_s``)."""
    model: type[BaseModel] = Settings
    *groups, name = key.split(".")
    for group in groups:
        annotation = model.model_fields[group].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel), key
        model = annotation
    return model.model_fields[name].get_default(call_default_factory=True)


def stated(cell: str) -> Any:
    """What a table cell states, as a value to compare; None for a cell written for people only."""
    cell = cell.strip().strip("`")
    if cell in ("true", "false"):
        return cell == "true"
    if match := re.fullmatch(r"(\d+(?:\.\d+)?)(?: (KiB|MiB|h|d))?", cell):
        return float(match[1]) * UNITS.get(match[2] or "", 1)
    return cell if re.fullmatch(r"[a-z0-9+:/._]+", cell) else None


def table_defaults() -> list[tuple[str, Any]]:
    """(key, stated default) for each key of a row whose default cell can be read; ``a.b / c`` names ``a.c`` too."""
    found: list[tuple[str, Any]] = []
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| key | default | what |")  # the settings table; the page's other tables are not settings
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        if not (row := ROW.match(line)) or "*" in row[1]:
            continue
        keys = [key.strip().strip("`") for key in row[1].split(" / ")]
        values = row[2].split(" / ")
        if len(keys) != len(values):
            continue
        prefix = keys[0].rpartition(".")[0]
        for key, value in zip(keys, values, strict=True):
            full = key if "." in key or not prefix else f"{prefix}.{key}"
            if (want := stated(value)) is not None:
                found.append((full, want))
    return found


def test_the_table_states_defaults_of_every_settings_group() -> None:
    """Control: the reader of the table below still finds the rows it checks (a changed table shape fails here)."""
    groups = {key.partition(".")[0] for key, _ in table_defaults() if "." in key}
    assert {"http", "politeness", "robots", "discovery", "store", "revisit"} <= groups


@pytest.mark.parametrize(("key", "want"), table_defaults(), ids=[key for key, _ in table_defaults()])
def test_a_default_stated_in_the_operations_guide_is_the_settings_own(key: str, want: Any) -> None:
    default = default_of(key)
    assert (float(default) if isinstance(default, int | float) and not isinstance(default, bool) else default) \
        == want, f"docs/operations.md says {key} defaults to {want!r}; harvester/settings.py says {default!r}"
