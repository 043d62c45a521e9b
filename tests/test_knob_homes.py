"""A bound the library enforces in two places has one home, the settings (shared/STYLE.md §10: one knob, one home):
what a setting lets through, the next layer must not refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from harvester.errors import ConfigError
from harvester.frontier import FrontierStore
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import MAX_URL_LENGTH, Settings


def test_no_url_the_scope_admits_is_one_the_frontier_refuses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``urls.max_url_length`` (a trap rule) had no upper bound while the frontier refuses a URL over 2,048
    characters (its columns' width): raised, it admitted URLs whose whole batch the store then refused. The
    setting is now bounded by the frontier's width, ``MAX_URL_LENGTH``, their one home."""
    db = f"sqlite:///{tmp_path / 'knobs.db'}"
    monkeypatch.setenv("HARVESTER_URLS__MAX_URL_LENGTH", str(MAX_URL_LENGTH + 1))
    with pytest.raises(ConfigError, match="max_url_length"):
        Settings.load(database_url=db)
    monkeypatch.delenv("HARVESTER_URLS__MAX_URL_LENGTH")
    # Control: the longest URL the scope admits by default is stored.
    settings = Settings.load(database_url=db)
    origin = "http://127.0.0.1:8080"
    url = origin + "/" + "a" * (settings.urls.max_url_length - len(origin) - 1)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(url=url, kind=UrlKind.DETAIL, source="seed", score=0.5)])
        assert url in store.url_states()
