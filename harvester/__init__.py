"""harvester: a polite, incremental, crash-proof sitemap-first web harvester."""

from __future__ import annotations

from harvester.errors import ConfigError, HarvesterError
from harvester.settings import Settings, SiteProfile

__all__ = ["ConfigError", "HarvesterError", "Settings", "SiteProfile"]
__version__ = "0.1.0"
