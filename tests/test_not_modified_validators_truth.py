"""A 304 that carries new validators, told through the CLI at the daily cadence on the harvester's clock, against a
real loopback server whose own log says what it was asked.

RFC 9110 §15.4.5: a 304 sends the validators a 200 would have; RFC 9111 §4.3.4: the stored response is updated with
them (a header the 304 leaves out is kept). So the next conditional request sends the new ones, and the exports'
``etag`` / ``last_modified`` of the version it confirmed are the ones the server last gave (docs/export.md), while
the WARC response of the version keeps its own answer's head.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daily_cli import article, cli_on
from warcio.archiveiterator import ArchiveIterator

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

OLD_DATE = "Mon, 30 Nov 2026 10:00:00 GMT"
NEW_DATE = "Wed, 02 Dec 2026 12:00:00 GMT"


class Site:
    """/a/1 answers the same bytes every day. From day 1 it names them with a new ETag and Last-Modified (a server
    that recomputed its validators, say after a move) and still takes the old ones as a match: a request conditional
    on either gets a 304 carrying the new ones. /a/2 does the same with a new ETag only (its 304 carries no
    Last-Modified, so the stored one is kept). Nothing in the sitemap moves."""

    def __init__(self) -> None:
        self.day = 0
        self.log: list[tuple[int, str, int, str | None, str | None]] = []
        """(day, path, status, If-None-Match, If-Modified-Since) of every request."""

    def respond(self, request: Asked) -> Answer:
        answer = self._answer(request)
        self.log.append((self.day, request.path, answer[0], request.headers.get("if-none-match"),
                         request.headers.get("if-modified-since")))
        return answer

    def _answer(self, request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {"/a/1": "2026-11-30", "/a/2": "2026-11-30"})
        new = self.day >= 1
        if request.path == "/a/1":
            etags = ('"one-old"', '"one-new"')
            headers = {"ETag": etags[new], "Last-Modified": NEW_DATE if new else OLD_DATE}
        elif request.path == "/a/2":
            etags = ('"two-old"', '"two-new"')
            headers = {"ETag": etags[new]}
        else:
            return 404, {"Content-Type": "text/plain"}, b"not found"
        if request.headers.get("if-none-match") in etags[: new + 1]:
            return 304, headers, b""
        body = article(f"Page {request.path}")
        return 200, {"Content-Type": "text/html; charset=utf-8", **headers}, body

    def asked(self, path: str) -> list[tuple[int, int, str | None, str | None]]:
        """(day, status, If-None-Match, If-Modified-Since) of each request for ``path``."""
        return [(day, status, inm, ims) for day, p, status, inm, ims in self.log if p == path]


@pytest.fixture
def site() -> Iterator[tuple[str, Site]]:
    state = Site()
    with threaded_site(state.respond) as origin:
        yield origin, state


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def run(request: pytest.FixtureRequest, tmp_path: Path, clock: None) -> Callable[..., str]:
    url = (f"sqlite:///{tmp_path / 'h.db'}" if request.param == "sqlite"
           else request.getfixturevalue("migrated_pg_url"))
    return cli_on(url)


def _day(run: Callable[..., str], state: Site, day: int, *args: str, shift_s: float = 0.0) -> str:
    state.day = day
    CLOCK.travel_to(run_at(day, shift_s=shift_s))  # 07:00 each day (± shift_s): the daily cadence
    return run(*args)


def _jsonl(run: Callable[..., str], out: Path, *flags: str) -> dict[str, dict[str, object]]:
    run("export", *flags, "-o", str(out))
    return {line["url"]: line for line in map(json.loads, out.read_text().splitlines())}


@pytest.mark.parametrize("shift_s", [-300.0, 300.0])
def test_a_304_with_new_validators_updates_what_is_sent_and_exported(
        site: tuple[str, Site], run: Callable[..., str], tmp_path: Path, shift_s: float) -> None:
    origin, state = site
    run("db", "upgrade")
    _day(run, state, 0, "harvest", f"{origin}/")
    day = 1
    while not any(d == day for d, *_ in state.asked("/a/1")) and day < 5:  # its first revisit, daily runs
        _day(run, state, day, "recrawl", shift_s=shift_s)
        day += 1
    revisit = [entry for entry in state.asked("/a/1") if entry[0] >= 1]
    assert revisit and revisit[0][1:3] == (304, '"one-old"'), state.log  # control: the 304 with new validators
    assert [entry[1:3] for entry in state.asked("/a/2") if entry[0] >= 1][:1] == [(304, '"two-old"')], state.log
    # The next daily runs, until each page is asked again: conditional on what the 304 said.
    start = day
    while day < start + 6 and not (any(d >= start for d, *_ in state.asked("/a/1"))
                                   and any(d >= start for d, *_ in state.asked("/a/2"))):
        _day(run, state, day, "recrawl", shift_s=shift_s)
        day += 1
    after_one = [entry for entry in state.asked("/a/1") if entry[0] >= start]
    after_two = [entry for entry in state.asked("/a/2") if entry[0] >= start]
    assert after_one and after_one[0][1:] == (304, '"one-new"', NEW_DATE), state.log
    assert after_two and after_two[0][1:3] == (304, '"two-new"'), state.log
    for flags in ((), ("--latest",)):
        lines = _jsonl(run, tmp_path / "pages.jsonl", *flags)
        one, two = lines[f"{origin}/a/1"], lines[f"{origin}/a/2"]
        assert (one["etag"], one["last_modified"]) == ('"one-new"', NEW_DATE), (flags, one)
        assert (two["etag"], two["last_modified"]) == ('"two-new"', None), (flags, two)
    # The WARC: the version's response keeps its own answer's head; the 304s are revisits of it, and each request
    # record says what the request carried.
    warc = tmp_path / "all.warc.gz"
    run("export", "--format", "warc", "-o", str(warc))
    records: list[tuple[str, str, dict[str, str]]] = []
    with warc.open("rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_headers.get_header("WARC-Target-URI") == f"{origin}/a/1" and record.http_headers:
                records.append((record.rec_type, record.rec_headers.get_header("WARC-Profile") or "",
                                {k.lower(): v for k, v in record.http_headers.headers}))
            record.content_stream().read()
    response = [head for kind, _, head in records if kind == "response"]
    assert [(h["etag"], h["last-modified"]) for h in response] == [('"one-old"', OLD_DATE)], records
    sent = [head.get("if-none-match") for kind, _, head in records if kind == "request"]
    assert sent == [None, *(inm for _, _, inm, _ in state.asked("/a/1")[1:])], (sent, state.log)
