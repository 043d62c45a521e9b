"""``export --since ... --format warc``: a 304 in the window whose confirmed version was stored before it is a
server-not-modified revisit naming that version by URL, date and digest (docs/export.md), never left out.

A harvest on day 0 stores every page; a re-crawl on day 1 of an unchanged site answers 304s. The WARC of day 1 only
holds none of day 0's responses, so each 304 must refer to the version the store kept from day 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from harvester import arecrawl
from harvester.export import REVISIT_NOT_MODIFIED, sha1_digest
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.testing import HostSpec
from harvester.testing.schedule import run_at

BIN = Path(sys.executable).parent


def cli(*args: str) -> str:
    done = subprocess.run([str(BIN / "harvester"), *args], capture_output=True, text=True, timeout=300,
                          check=False, env={k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")})
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return " ".join(done.stdout.split())


async def test_a_304_in_the_window_refers_to_the_version_stored_before_it(harvested_on_day_0, db_url, tmp_path):
    specs = [HostSpec("s", pages=12, sitemap_only=0.0, feed_only=0.0, listing_only=0.0)]
    web, settings, profile = await harvested_on_day_0(specs, seed=3)
    web.advance_day(changed=0.0, new=0.0, gone=0.0)
    web.clear_records()
    CLOCK.travel_to(run_at(1))
    await arecrawl(settings, profile, refresh=True)
    not_modified = {web.url(r.host, r.path) for r in web.records() if r.status == 304}
    with FrontierStore.open(settings) as store:
        stored = {page.url: page for page in store.iter_pages(latest=True, kinds=None)}
    confirmed = {url for url in not_modified if url in stored}
    assert len(confirmed) >= 5, (not_modified, sorted(stored))

    warc = tmp_path / "day1.warc.gz"
    said = cli("export", "--format", "warc", "--since", run_at(1).strftime("%Y-%m-%dT%H:%M:%S"), "-o", str(warc),
               "--db", db_url)
    assert "304s whose earlier response is not in this export" not in said, said
    revisits = {}
    with warc.open("rb") as f:
        for record in ArchiveIterator(f):
            headers = record.rec_headers
            assert record.rec_type != "response" or headers.get_header("WARC-Date") >= "2026", headers
            if record.rec_type == "revisit" and headers.get_header("WARC-Profile") == REVISIT_NOT_MODIFIED:
                revisits[headers.get_header("WARC-Target-URI")] = headers
    assert confirmed <= set(revisits), sorted(confirmed - set(revisits))
    for url in confirmed:
        page, headers = stored[url], revisits[url]
        assert headers.get_header("WARC-Payload-Digest") == sha1_digest(page.body), url
        assert headers.get_header("WARC-Refers-To-Target-URI") == (page.final_url or page.url)
        assert headers.get_header("WARC-Refers-To-Date")[:10] == run_at(0).strftime("%Y-%m-%d")
        assert headers.get_header("WARC-Refers-To") is None  # outside this file: named by URL, date and digest
