"""What the wheel holds (pyproject's explicit package list) matches the source tree, and the migrations are found
by the package name a wheel installs them under. CI's .ci/wheel-demo builds and runs the wheel itself."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

from harvester.frontier import migrate

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def source_packages() -> set[str]:
    """Every package of the source tree under the name it is installed as (migrations/ as harvester._migrations)."""
    found = set()
    for top in ("harvester", "flows"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(init.parent.relative_to(ROOT).parts))
    for init in (ROOT / "migrations").rglob("__init__.py"):
        found.add(".".join(("harvester._migrations", *init.parent.relative_to(ROOT / "migrations").parts)))
    return found


def test_every_package_of_the_source_tree_is_in_the_wheel():
    listed = set(SETUPTOOLS["packages"])
    assert source_packages() - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - source_packages() == set(), "listed in pyproject.toml but not in the source tree"
    assert SETUPTOOLS["package-dir"] == {"harvester._migrations": "migrations"}


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
