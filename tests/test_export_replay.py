"""The WARC export replays: a 3-day harvest of the test web, exported by the CLI, passes ``warcio check`` and
``warcio index``, and pywb, given the file, answers each page on each day with the bytes the site served that day.

pywb cannot share the project's environment (it pins redis==2.10.6; Prefect needs redis>=6), so it runs from its
own: ``make pywb`` makes ``.venv-pywb``; ``HARVESTER_PYWB_PYTHON`` names another interpreter that has pywb. Without
one the replay cases skip, saying so (with ``HARVESTER_REQUIRE_PYWB=1``, as ``make test`` sets, they fail).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from datetime import date, datetime, timedelta
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest
from warcio.archiveiterator import ArchiveIterator

from harvester import aharvest, arecrawl
from harvester.export import REVISIT_IDENTICAL, REVISIT_NOT_MODIFIED, export_warc
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec
from harvester.testing.schedule import run_at

ROOT = Path(__file__).resolve().parent.parent
REPLAY = Path(__file__).with_name("export_pywb_replay.py")
BIN = Path(sys.executable).parent
SPEC = HostSpec("r", pages=8, sitemap_only=0.0, feed_only=0.0, listing_only=0.0)
PER_REQUEST = re.compile(rb"(impression |sid=)[0-9a-f]{8}")
"""The test web's per-request slots (ad impression, session id): 8 hex digits that differ on every request."""


@pytest.fixture(scope="module")
def pywb_python() -> str:
    python = os.environ.get("HARVESTER_PYWB_PYTHON") or str(ROOT / ".venv-pywb" / "bin" / "python")
    probe = subprocess.run([python, "-c", "import pywb"], capture_output=True, text=True, check=False) \
        if Path(python).exists() else None
    if probe is None or probe.returncode != 0:
        problem = f"no pywb at {python} (make pywb, or set HARVESTER_PYWB_PYTHON)"
        if os.environ.get("HARVESTER_REQUIRE_PYWB") == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return python


def cli(*args: str) -> str:
    done = subprocess.run([str(BIN / "harvester"), *args], capture_output=True, text=True, timeout=300,
                          check=False, env={k: v for k, v in os.environ.items() if not k.startswith("HARVESTER_")})
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return " ".join(done.stdout.split())


def replay(python: str, root: Path, warc: Path, queries: list[tuple[datetime, str]]) -> list[dict]:
    asked = [[when.strftime("%Y%m%d%H%M%S"), url] for when, url in queries]
    done = subprocess.run([python, str(REPLAY), str(root), str(warc)], input=json.dumps(asked), capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((root / "answers.json").read_text())


def memento_day(answer: dict) -> date:
    """The day of the capture pywb served (not a fallback to another capture when a revisit does not resolve)."""
    return parsedate_to_datetime(dict(answer["headers"])["Memento-Datetime"]).date()


def masked(body: bytes) -> bytes:
    return PER_REQUEST.sub(rb"\1--------", body)


async def run_days(web, db_url: str, pages_of_day, days: list[dict]) -> tuple[list[dict], list[dict]]:
    """Harvest on day 0, then move the web on and re-crawl each day; after each, what the site serves now (to
    the test's own request) and the bytes the harvester holds for each page (what it was served)."""
    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=tuple(web.seeds))
    served: list[dict[str, bytes]] = []
    held: list[dict[str, bytes]] = []
    with FrontierStore.open(settings, upgrade=True) as store, httpx.Client() as client:
        for day, change in enumerate([None, *days]):
            if change is not None:
                web.advance_day(**change)
            CLOCK.travel_to(run_at(day))
            await (aharvest(settings, profile) if day == 0 else arecrawl(settings, profile, refresh=True))
            served.append({url: client.get(url).content for url in pages_of_day(web)})
            held.append({page.url: page.body for page in store.iter_pages(latest=True)})
    return served, held


def export_and_check(db_url: str, warc: Path) -> str:
    said = cli("export", "--format", "warc", "-o", str(warc), "--db", db_url)
    for command in (["check", "-v"], ["index"]):  # the WARC tools' own reading: digests, record structure
        done = subprocess.run([str(BIN / "warcio"), *command, str(warc)], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    return said


async def test_each_days_version_of_every_page_replays_through_pywb(make_web, sqlite_url, tmp_path, clock,
                                                                       pywb_python):
    web = make_web([SPEC], seed=41)
    # Day 1 edits every page's main text; day 2 half of them (the other half answer 304 to the re-crawl).
    served, held = await run_days(web, sqlite_url, lambda w: w.truth["r"].detail_urls(),
                            [{"changed": 1.0, "new": 0.0, "gone": 0.0}, {"changed": 0.5, "new": 0.0, "gone": 0.0}])
    warc = tmp_path / "three-days.warc.gz"
    said = export_and_check(sqlite_url, warc)
    urls = sorted(served[0])
    with warc.open("rb") as stream:
        records = [(r.rec_type, r.rec_headers.get_header("WARC-Profile"), r.rec_headers.get_header("WARC-Filename"))
                   for r in ArchiveIterator(stream)]
    assert records[0] == ("warcinfo", None, "three-days.warc.gz")
    not_modified = sum(1 for kind, profile, _ in records if kind == "revisit" and profile == REVISIT_NOT_MODIFIED)
    assert not_modified >= len(urls) // 4, records  # the unchanged half of day 2 is there, as 304 revisits
    assert {profile for kind, profile, _ in records if kind == "revisit"} <= {REVISIT_NOT_MODIFIED, REVISIT_IDENTICAL}
    assert "revisits" in said
    queries = [(run_at(day) + timedelta(hours=1), url) for day in range(3) for url in urls]
    answers = iter(replay(pywb_python, tmp_path / "pywb", warc, queries))
    for day in range(3):
        for url in urls:
            answer = next(answers)
            body = base64.b64decode(answer["body_b64"])
            assert answer["status"] == 200, (day, url, answer["status"])
            assert memento_day(answer) == run_at(day).date(), (day, url)  # that day's record, 304 revisits too
            # Every byte the site served that day, the per-request impression id aside (the test's own request
            # got a different one from the harvester's).
            assert masked(body) == masked(served[day][url]), (day, url)
            assert body == held[day][url], (day, url)  # and exactly the bytes the harvester was served
    # Control: the days' versions really differ, so a replay of the wrong day cannot pass.
    assert all(masked(served[0][u]) != masked(served[1][u]) for u in urls)
    assert sum(masked(served[1][u]) != masked(served[2][u]) for u in urls) == len(urls) // 2


async def test_a_page_whose_bytes_change_outside_main_text_replays_each_day(make_web, sqlite_url, tmp_path, clock,
                                                                           pywb_python):
    web = make_web([HostSpec("l", pages=40, listing_page_size=50)], seed=43)
    listings = lambda w: w.truth["l"].listing_urls()[:1]  # noqa: E731 - one listing: it grows with the new pages
    served, _held = await run_days(web, sqlite_url, listings, [{"changed": 0.0, "new": 0.2, "gone": 0.0}])
    (url,) = served[0]
    assert masked(served[0][url]) != masked(served[1][url])  # control: the listing did change
    warc = tmp_path / "listing.warc.gz"
    export_and_check(sqlite_url, warc)
    answers = replay(pywb_python, tmp_path / "pywb", warc, [(run_at(d) + timedelta(hours=1), url) for d in (0, 1)])
    for day, answer in enumerate(answers):
        assert answer["status"] == 200, (day, answer["status"])
        assert masked(base64.b64decode(answer["body_b64"])) == masked(served[day][url]), day


def test_a_repeated_payload_replays_from_the_response_it_refers_to(tmp_path, pywb_python):
    """An identical-payload-digest revisit (the same bytes stored again a day later) replays through pywb as the
    bytes of the response it names; the next day's new bytes replay as themselves."""
    from test_export_warc import DAY, A, fetch, page  # the WARC writer's own cases build the store's records

    same, new = b"<html><body><p>one</p></body></html>", b"<html><body><p>two</p></body></html>"
    warc = tmp_path / "repeat.warc.gz"
    with warc.open("wb") as out:
        export_warc([fetch(A, 0, 200, page(A, 0, same, '"1"')), fetch(A, 1, 200, page(A, 1, same, '"1b"')),
                     fetch(A, 2, 200, page(A, 2, new, '"2"'))], out, filename=warc.name)
    with warc.open("rb") as stream:
        profiles = [r.rec_headers.get_header("WARC-Profile") for r in ArchiveIterator(stream)
                    if r.rec_type == "revisit"]
    assert profiles == [REVISIT_IDENTICAL]
    answers = replay(pywb_python, tmp_path / "pywb", warc, [(DAY[d] + timedelta(hours=1), A) for d in range(3)])
    assert [(a["status"], base64.b64decode(a["body_b64"])) for a in answers] == [(200, same), (200, same), (200, new)]
    # The day-1 answer is the revisit's (its own ETag) with the day-0 payload, not a fallback to the day-0 capture.
    assert [memento_day(a) for a in answers] == [DAY[0].date(), DAY[1].date(), DAY[2].date()]
    assert [dict(a["headers"])["X-Archive-Orig-ETag"] for a in answers] == ['"1"', '"1b"', '"2"']
