"""The public API: exactly the names of ``harvester.__all__``, each importable from the package and documented,
and importing the package stays cheap (the fetch and storage stack loads on first use of a name that needs it)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import harvester

PUBLIC = {
    "Settings", "SiteProfile", "FrontierStore", "discover", "extract", "harvest", "recrawl", "aharvest", "arecrawl",
    "HarvesterError", "ConfigError", "NothingFetched", "ExtractorFailed",
}


def test_all_is_exactly_the_public_api():
    assert set(harvester.__all__) == PUBLIC
    assert len(harvester.__all__) == len(PUBLIC)  # no name twice


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_imports_from_the_package_and_is_documented(name):
    namespace: dict[str, object] = {}
    exec(f"from harvester import {name}", namespace)
    value = namespace[name]
    assert value is getattr(harvester, name)
    assert getattr(value, "__module__", "").startswith("harvester.")
    doc = inspect.getdoc(value)
    assert doc and len(doc) > 40, f"{name} needs a docstring saying what it is for"


def test_the_async_and_blocking_forms_take_the_same_arguments():
    for blocking, coroutine in ((harvester.harvest, harvester.aharvest), (harvester.recrawl, harvester.arecrawl)):
        assert not inspect.iscoroutinefunction(blocking) and inspect.iscoroutinefunction(coroutine)
        assert inspect.signature(blocking).parameters.keys() == inspect.signature(coroutine).parameters.keys()


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        harvester.no_such_name  # noqa: B018


def test_importing_the_package_does_not_load_the_fetch_and_storage_stack():
    code = (
        "import sys, harvester\n"
        "from harvester import ConfigError, Settings, SiteProfile\n"
        "heavy = [m for m in ('harvester.phases', 'harvester.frontier', 'httpx', 'sqlalchemy') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
        "from harvester import harvest\n"
        "print('harvester.phases' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "", f"loaded at import: {out[0]}"
    assert out[1] == "True"  # and the lazy name still brings what it needs
