"""What the wheel holds (pyproject's explicit package list) matches the source tree, and the migrations are found
by the package name a wheel installs them under; the wheel itself, installed in a fresh venv outside the checkout,
runs the demo, its printed commands and the README's example (.ci/wheel-demo)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from harvester.frontier import migrate

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def source_packages() -> set[str]:
    """Every package of the source tree under the name it is installed as (migrations/ as harvester._migrations,
    flows/ as harvester.flows)."""
    found = set()
    for top, name in (("harvester", "harvester"), ("flows", "harvester.flows")):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join((name, *init.parent.relative_to(ROOT / top).parts)))
    for init in (ROOT / "migrations").rglob("__init__.py"):
        found.add(".".join(("harvester._migrations", *init.parent.relative_to(ROOT / "migrations").parts)))
    return found


def test_every_package_of_the_source_tree_is_in_the_wheel():
    listed = set(SETUPTOOLS["packages"])
    assert source_packages() - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - source_packages() == set(), "listed in pyproject.toml but not in the source tree"
    assert SETUPTOOLS["package-dir"] == {"harvester._migrations": "migrations"}


def test_the_flows_are_the_package_harvester_flows_and_nothing_imports_a_top_level_flows():
    link = ROOT / "harvester" / "flows"
    assert link.is_symlink() and link.resolve() == ROOT / "flows"  # one copy of the code, two paths to it
    flows = importlib.import_module("harvester.flows")
    assert Path(flows.__file__).parent.resolve() == ROOT / "flows"  # type: ignore[arg-type]
    top_level = re.compile(r"^\s*(from flows[ .]|import flows\b)", re.MULTILINE)
    stale = [str(path.relative_to(ROOT)) for top in ("harvester", "flows", "tests", "bench")
             for path in (ROOT / top).rglob("*.py") if top_level.search(path.read_text())]
    assert stale == [], "import harvester.flows, not flows"


def test_the_migrations_are_found_by_their_installed_name():
    spec = importlib.util.find_spec(migrate.MIGRATIONS_PACKAGE)
    assert spec is not None and spec.origin is not None
    assert migrate.MIGRATIONS_DIR == Path(spec.origin).parent == ROOT / "migrations"
    # Every revision is a module of the shipped versions package, and Alembic reads them all from there.
    revisions = {path.stem for path in (migrate.MIGRATIONS_DIR / "versions").glob("0*.py")}
    assert len(revisions) >= 6
    assert migrate.head_revision()


def test_every_non_python_file_of_the_migrations_is_package_data():
    data = {path.name for path in (ROOT / "migrations").rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts}
    assert data <= set(SETUPTOOLS["package-data"]["harvester._migrations"]), data


@pytest.mark.slow
def test_the_wheel_installed_outside_the_checkout_runs_the_demo_its_commands_and_the_readme_example():
    """One venv of the wheel alone (--no-deps; its requirements linked from .venv, `pip check` says they are met:
    10-60 s by the load, where pip installing ~145 packages from the index took 2-4 min on a fresh machine), then
    `harvester-crawl --version`, `harvester demo` twice
    (the second the next day's re-crawl), the commands it prints run as printed, the README's library example; the
    wheel installs no top-level package beside harvester. The script says which step failed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_API"))}
    done = subprocess.run([str(ROOT / ".ci" / "wheel-demo")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "the installed wheel" in done.stdout
