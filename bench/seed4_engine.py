"""The harvester's own design for bench/seed4.py: ``PoliteClient`` + ``run_hosts`` (per-host queues and workers).

Picked up by ``bench/seed4.py`` through its hook (``register``). Run it alone with
``.venv/bin/python bench/seed4.py --designs harvester``. The budget is shared across hosts and handed out one
job per claim, so it is spent where hosts are fast, as in the published per-host design.
"""

from __future__ import annotations

from collections.abc import Sequence

from harvester.fetch.engine import PoliteClient
from harvester.fetch.workers import Job, run_hosts
from harvester.records import FetchResult
from harvester.settings import Settings

NAME = "harvester engine (PoliteClient + run_hosts)"


class BudgetWork:
    """HostWork over the scenario's per-host URL lists with one shared page budget."""

    def __init__(self, per_host: dict[str, list[str]], origins: dict[str, str], budget: int) -> None:
        self.todo = {origins[name]: list(reversed(urls)) for name, urls in per_host.items()}
        self.left = budget
        self.ok = 0

    async def hosts(self) -> Sequence[str]:
        return [h for h, urls in self.todo.items() if urls] if self.left > 0 else []

    async def claim(self, host: str, n: int) -> Sequence[Job]:
        urls = self.todo[host]
        take = min(n, len(urls), self.left)
        self.left -= take
        return [Job(url=urls.pop(), host=host) for _ in range(take)]

    async def done(self, job: Job, result: FetchResult) -> None:
        self.ok += result.status == 200


async def design(scenario) -> int:  # type: ignore[no-untyped-def]
    settings = Settings().with_overrides(**{
        "politeness.per_host_start": scenario.per_host_limit,
        "politeness.max_per_host_limit": scenario.per_host_limit,
        "store.claim_batch": 1,  # one job per claim: the shared budget goes where hosts are fast
    })
    work = BudgetWork(scenario.per_host, scenario.origins, scenario.budget)
    async with PoliteClient(settings, user_agent=scenario.user_agent, seeds=tuple(scenario.origins.values())) as client:
        await run_hosts(client, work, max_active_hosts=len(scenario.per_host))
    return work.ok


def register(designs: dict) -> None:  # type: ignore[type-arg]
    designs[NAME] = design
