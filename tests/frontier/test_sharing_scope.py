"""Which other extraction processes a worker shares its site's hosts with: those of the same site only. With two
sites extracting at once on one PostgreSQL frontier, each counted the other's process, gave half its hosts back
and took half as many: nobody else would ever take them (another site's workers never lease this site's hosts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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


def test_a_process_whose_leases_all_lapsed_is_no_one_to_share_with(pg_url: str) -> None:
    """A frozen extractor (SIGSTOP, a VM pause) keeps its session, so it was counted as a peer: each survivor kept to
    its share and the frozen one's hosts, their leases lapsed, waited until a survivor ran out of its own (stranger
    45: 6-13 s after the lapse, never within a 12 s freeze). One that still holds a live lease counts."""
    past = datetime.now(UTC) - timedelta(minutes=5)
    frozen, working = "elsewhere:2:extract:0000aaaa:live", "elsewhere:3:extract:0000bbbb:live"
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/p", UrlKind.DETAIL, "sitemap:x", depth=1) for origin in HOSTS])
        assert store.claim_hosts(frozen, limit=2, lease_s=60, now=past, hosts=HOSTS[:2]) == HOSTS[:2]
        with _session(pg_url, extraction_scope("a") + "elsewhere:2"):
            assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 0)
            store.claim_hosts(working, limit=1, lease_s=600, hosts=HOSTS[2:3])
            with _session(pg_url, extraction_scope("a") + "elsewhere:3"):
                assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 1)
            # A process holding one live lease beside lapsed ones is working: it counts.
            store.claim_hosts(frozen, limit=1, lease_s=600, hosts=HOSTS[3:])
            assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 2)


def test_a_frozen_process_whose_hosts_were_taken_still_counts_for_no_one(pg_url: str) -> None:
    """Once the survivors have taken a frozen process's hosts it holds no host row, but the URLs it had claimed
    there stay leased to it (lapsed): counted again as a peer, it made each survivor, now over its share, hand hosts
    back to nobody (review)."""
    past = datetime.now(UTC) - timedelta(minutes=5)
    frozen, taker = "elsewhere:2:extract:0000aaaa:live", "elsewhere:4:extract:0000cccc:live"
    with FrontierStore.open(Settings(database_url=pg_url), upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{origin}/p{n}", UrlKind.DETAIL, "sitemap:x", depth=1)
                              for origin in HOSTS for n in range(2)])
        assert store.claim_hosts(frozen, limit=2, lease_s=60, now=past, hosts=HOSTS[:2]) == HOSTS[:2]
        assert len(store.claim(frozen, hosts=HOSTS[:2], per_host=1, lease_s=60, now=past)) == 2
        assert store.claim_hosts(taker, limit=2, lease_s=600, hosts=HOSTS[:2]) == HOSTS[:2]  # lapsed: taken
        with _session(pg_url, extraction_scope("a") + "elsewhere:2"), \
                _session(pg_url, extraction_scope("a") + "elsewhere:4"):
            assert store.sharing("a-1", hosts=HOSTS, site="a") == (4, 1)
