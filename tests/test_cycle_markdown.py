"""The run page's summary as a person reads it in the Prefect UI: a re-crawl before anything was due showed a
table of zeros with no word on why, which read as a broken run."""

from __future__ import annotations

from typing import Any

from harvester.flows.artifacts import cycle_markdown
from harvester.phases.cycles import Cycle
from harvester.store_results import CYCLE_COUNTS, Changes

NOTHING_DUE = "Nothing was due"


def changes(**counts: int) -> Changes:
    values: dict[str, Any] = {name: 0 for name in CYCLE_COUNTS}
    values.update(cycle=1, failures={}, new_urls=[], changed_urls=[], restyled_urls=[], gone_urls=[], hosts={})
    values.update(counts)
    return Changes(**values)  # type: ignore[typeddict-item]


def test_a_recrawl_before_anything_is_due_says_so() -> None:
    page = cycle_markdown("recrawl", "shop", Cycle(discover={}, extract={}, changes=changes()))
    assert NOTHING_DUE in page
    assert "| fetched | 0 |" in page


def test_a_cycle_that_asked_pages_or_found_some_does_not_say_nothing_was_due() -> None:
    for cycle in (Cycle(discover={}, extract={}, changes=changes(fetched=3, not_modified=3)),
                  Cycle(discover={}, extract={}, changes=changes(), found=5),
                  Cycle(discover={}, extract={}, changes=changes(deferred=2))):
        assert NOTHING_DUE not in cycle_markdown("recrawl", "shop", cycle)


def test_a_failed_cycle_says_why_it_failed_not_that_nothing_was_due() -> None:
    cycle = Cycle(discover={}, extract={}, changes=changes(), silent="no seed host answered")
    page = cycle_markdown("harvest", "shop", cycle)
    assert "**Failed: no seed host answered**" in page
    assert NOTHING_DUE not in page


def test_the_problems_a_summary_cuts_are_counted_not_dropped() -> None:
    """The run page listed the first 20 of a cycle's discovery problems and the phase summary the first 50, with no
    word of the rest: every cut list says how many it left out, as the CLI's does."""
    from harvester.flows.artifacts import summary_markdown
    from harvester.phases.results import PhaseResult

    problems = [f"sitemap {i} refused" for i in range(57)]
    page = cycle_markdown("harvest", "shop", Cycle(discover={}, extract={}, changes=changes(), problems=problems))
    assert "- ... and 37 more" in page
    phase = summary_markdown(PhaseResult(phase="discover", problems=problems), title="t", run_id=1, stats={})
    assert "- ... and 7 more" in phase
