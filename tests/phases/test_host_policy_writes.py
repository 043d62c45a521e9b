"""A host's politeness state is written when it changed, not again at every turn's end and once more at the run's
end (issue 32: 200 hosts cost 400 such transactions, the last 200 of them at the end of the run, after its last
request). What must still hold: the frontier holds the state the client last had."""

from __future__ import annotations

from dataclasses import replace

from harvester.fetch.engine import PoliteClient
from harvester.frontier import FrontierStore
from harvester.phases.host_policy import PolicyKeeper
from harvester.records import DiscoveredUrl, HostPolicy, UrlKind
from harvester.settings import Settings

ORIGIN = "http://127.0.0.1:9111"


async def test_an_unchanged_host_state_is_not_written_again(db_url: str) -> None:
    settings = Settings(database_url=db_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        store.add_discovered([DiscoveredUrl(f"{ORIGIN}/a", UrlKind.DETAIL, "sitemap:x")])
        written: list[HostPolicy] = []
        save = store.save_host_policy

        def counted(policy: HostPolicy) -> None:
            written.append(policy)
            save(policy)

        store.save_host_policy = counted  # type: ignore[method-assign]
        async with PoliteClient(settings) as client:
            keeper = PolicyKeeper(store, client)
            await keeper.load(ORIGIN)
            await keeper.save(ORIGIN)  # the first turn's end: the client's state is not yet the frontier's
            assert len(written) == 1
            assert store.host_policy(ORIGIN) == client.host_policy(ORIGIN)
            await keeper.save(ORIGIN)  # another turn's end, nothing changed since
            await keeper.aclose()  # the run's end
            assert len(written) == 1
            client.apply_policy(replace(client.host_policy(ORIGIN), failures=2))  # the state moves on
            await keeper.aclose()
            assert len(written) == 2
            assert store.host_policy(ORIGIN) == client.host_policy(ORIGIN)
            assert store.host_policy(ORIGIN).failures == 2  # type: ignore[union-attr]

        # A later run's keeper reads the state back and has nothing to write while it stays so.
        written.clear()
        async with PoliteClient(settings) as client:
            keeper = PolicyKeeper(store, client)
            await keeper.load(ORIGIN)
            await keeper.save(ORIGIN)
            await keeper.aclose()
            assert written == []
