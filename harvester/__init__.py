"""harvester: a polite, incremental, crash-proof sitemap-first web harvester.

The public API is ``__all__`` (guarded by tests/test_public_api.py); everything else may change. ``harvest`` and
``recrawl`` run a whole cycle and block (``aharvest`` and ``arecrawl`` are the same as coroutines);
``discover`` and ``extract`` are the async phases under them, for callers that manage store and runs themselves.

The names that pull in the fetch and storage stack (httpx, SQLAlchemy, ...) load on first use, so importing
``harvester.errors`` or ``harvester.settings`` (the CLI's ``status``, a config check) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harvester._version import __version__ as __version__
from harvester.errors import ConfigError, ExtractorFailed, HarvesterError, NothingFetched

if TYPE_CHECKING:
    from harvester.frontier import FrontierStore
    from harvester.phases import discover, extract
    from harvester.phases.cycles import aharvest, arecrawl, harvest, recrawl
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile


_LAZY = {
    "Settings": "harvester.settings",  # pydantic: ~0.5 s, which `python -m harvester.flows.engine` must not wait
    "SiteProfile": "harvester.site_profile",
    "FrontierStore": "harvester.frontier",
    "discover": "harvester.phases",
    "extract": "harvester.phases",
    "harvest": "harvester.phases.cycles",
    "recrawl": "harvester.phases.cycles",
    "aharvest": "harvester.phases.cycles",
    "arecrawl": "harvester.phases.cycles",
}

__all__ = [
    "ConfigError",
    "ExtractorFailed",
    "FrontierStore",
    "HarvesterError",
    "NothingFetched",
    "Settings",
    "SiteProfile",
    "aharvest",
    "arecrawl",
    "discover",
    "extract",
    "harvest",
    "recrawl",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'harvester' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
