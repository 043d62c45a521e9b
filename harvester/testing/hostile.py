"""Hostile routes (mounted under /hostile/ when HostSpec.hostile): placeholder until the full set lands."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harvester.testing.render import Reply, Site, Stream


class HostileRoutes:
    def __init__(self, site: Site) -> None:
        self.site = site

    def respond(self, path: str, query: str) -> Reply | Stream | None:
        return None
