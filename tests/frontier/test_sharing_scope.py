"""Which other extraction processes a worker shares its site's hosts with: those of the same site only. With two
sites extracting at once on one PostgreSQL frontier, each counted the other's process, gave half its hosts back
and took half as many: nobody else would ever take them (another site's workers never lease this site's hosts)."""

from __future__ import annotations

import psycopg

from harvester import FrontierStore
from harvester.frontier.dialect_postgres import extraction_scope
from harvester.records import DiscoveredUrl, UrlKind
from harvester.settings import Settings

HOSTS = [f"https://h{n}.test" for n in range(4)]


def _session(pg_url: str, name: str) -> psycopg.Connection:
    """Another process's session, as it names itself (``Dialect.extraction_processes``)."""
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    return psycopg.connect(dsn, application_name=name, autocommit=True)


def test_only_the_same_sites_extraction_processes_count_as_others(pg_url: str) -> None:
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/p", UrlKind.DETAIL, "sitemap:x", depth=1) for origin in HOSTS])
        assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 0)
        with _session(pg_url, extraction_scope("b") + "elsewhere:1"):
            assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 0)
            with _session(pg_url, extraction_scope("a") + "elsewhere:2"):
                assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 1)
