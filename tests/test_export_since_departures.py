"""``export --since`` tells a window's deletions: one line per stored page whose URL went gone (404/410) or moved
away (a permanent redirect) in the window, none for a page gone before it (docs/export.md, docs/operations.md).

A stranger's trial: pages answering 404/410 on day 2 were absent from ``export --since <day 2>``, which
docs/operations.md tells downstream readers to take "what changed" from. The web here is harvested on day 0; on
day 1 some pages are deleted and some moved; on day 2 nothing more goes, and the re-crawl asks the gone ones again
(``urls.gone_at`` is stamped anew by each recheck: a window must not take them for new deletions).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

from harvester import arecrawl
from harvester.export import JSONL_FIELDS
from harvester.runtime import CLOCK
from harvester.testing import HostSpec
from harvester.testing.schedule import run_at

BIN = Path(sys.executable).parent


def cli(*args: str) -> str:
    done = subprocess.run([str(BIN / "harvester"), *args], capture_output=True, text=True, timeout=300,
                          check=False, env={k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")})
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return " ".join(done.stdout.split())


def lines(path: Path) -> list[dict]:  # type: ignore[type-arg]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def since(day: int) -> str:
    return run_at(day, hour=0).strftime("%Y-%m-%dT%H:%M:%S")


async def test_a_window_has_one_line_per_page_gone_or_moved_in_it(harvested_on_day_0, db_url, tmp_path):
    specs = [HostSpec("s", pages=30, sitemap_only=0.0, feed_only=0.0, listing_only=0.0)]
    web, settings, profile = await harvested_on_day_0(specs, seed=5)
    day1 = web.advance_day(changed=0.1, new=0.05, gone=0.2, moved=0.1)
    gone, moved = day1.all("gone"), {old for pairs in day1.moved.values() for old, _ in pairs}
    assert len(gone) >= 3 and len(moved) >= 2, (gone, moved)
    CLOCK.travel_to(run_at(1))
    await arecrawl(settings, profile, refresh=True)

    out = tmp_path / "day1.jsonl"
    said = cli("export", "--since", since(1), "-o", str(out), "--db", db_url)
    records = lines(out)
    went = [r for r in records if r["change"] in ("gone", "moved")]
    assert {r["url"] for r in went if r["state"] == "gone"} == gone, said
    assert {r["url"] for r in went if r["state"] == "moved"} == moved, said
    assert len(went) == len(gone) + len(moved), went  # one line per URL
    assert f"and {len(went)} pages gone or moved" in said, said
    for r in went:
        assert list(r) == list(JSONL_FIELDS), r  # the export's shape, every key in its order
        assert r["fetched_at"] >= since(1) and r["fetched_at"] < run_at(2).isoformat(), r  # when it went
        assert r["status"] in ((404, 410) if r["state"] == "gone" else (301, 308)), r
        assert r["payload_digest"] is None and r["content_hash"] is None, r  # no body: nothing of one
    assert all(r["final_url"] != r["url"] for r in went if r["state"] == "moved"), went

    # The full export (no window) is unchanged: stored versions only, the gone ones saying state gone.
    full = tmp_path / "all.jsonl"
    cli("export", "-o", str(full), "--db", db_url)
    assert not [r for r in lines(full) if r["change"] in ("gone", "moved")]
    assert gone <= {r["url"] for r in lines(full) if r["state"] == "gone"}

    # Day 2: nothing more goes; the gone pages are asked again (refresh) and still answer 404/410.
    web.advance_day(changed=0.1, new=0.0, gone=0.0, moved=0.0)
    CLOCK.travel_to(run_at(2))
    await arecrawl(settings, profile, refresh=True)
    out2 = tmp_path / "day2.jsonl.gz"  # and gzipped, as the name asks
    said = cli("export", "--since", since(2), "-o", str(out2), "--db", db_url)
    assert "and 0 pages gone or moved" in said, said
    assert not [r for r in lines(out2) if r["state"] in ("gone", "moved")], said

    # A snapshot holds live pages only: no deletion lines there.
    latest = tmp_path / "latest.jsonl"
    cli("export", "--since", since(1), "--latest", "-o", str(latest), "--db", db_url)
    assert not [r for r in lines(latest) if r["state"] in ("gone", "moved")]
