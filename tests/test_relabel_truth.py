"""A charset label fixed over identical bytes is a new version (a stranger's trial, stranger47/relabel.py).

Day 1 the site serves an article's UTF-8 bytes as ``text/html; charset=iso-8859-1``: the page is read (and stored) as
windows-1252 mojibake ("CafÃ©"). Day 2 the header says utf-8, the bytes are the same. The payload digest alone
called the answer a repeat: the re-crawl reported 0 changed and ``export --latest`` kept the mojibake, while the
README promises the snapshot equals the site. The text decoded is what a version is, so the same bytes decoded
otherwise are a new one: ``changed`` (its text changed), and the export holds the page as the site now shows it. A
page whose label changes without changing its text (a BOM decides) is no new version. Daily runs 24 h apart on the
harvester's clock (and five minutes either side), through the CLI, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from daily_cli import cli_on

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

TITLE = "Café “relabel”"
BODY = (f"<!DOCTYPE html><html><head><title>{TITLE}</title></head><body><article><h1>{TITLE}</h1>"
        "<p>Crème brûlée — €7.</p><p>"
        + "This paragraph is long enough to be considered the main content of the article by any extractor. " * 3
        + "</p></article></body></html>").encode()
BOM = b"\xef\xbb\xbf" + BODY.replace(b"relabel", b"bompage")


class Site:
    """``/r/page``: the same bytes every day, labelled iso-8859-1 on day 1 and utf-8 after. ``/r/bom``: a BOM page
    whose label changes the same way (the BOM wins: its text never changes)."""

    def __init__(self) -> None:
        self.day = 1
        self.asked: list[tuple[int, str]] = []

    def answer(self, request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {"/r/page": None, "/r/bom": None})
        if request.path in ("/r/page", "/r/bom"):
            self.asked.append((self.day, request.path))
            label = "iso-8859-1" if self.day == 1 else "utf-8"
            return 200, {"Content-Type": f"text/html; charset={label}"}, BODY if request.path == "/r/page" else BOM
        return 404, {"Content-Type": "text/plain"}, b"not here"


@pytest.mark.parametrize("shift_s", [-300.0, 300.0])
def test_a_fixed_charset_label_over_the_same_bytes_is_a_changed_version_the_export_holds(
    db_url: str, clock: None, tmp_path: Path, shift_s: float,
) -> None:
    site = Site()
    cli = cli_on(db_url)
    with threaded_site(site.answer) as origin:
        CLOCK.travel_to(run_at(1))
        cli("db", "upgrade")
        cli("harvest", f"{origin}/")
        first = tmp_path / "day1.jsonl"
        cli("export", "--latest", "--output", str(first))
        site.day = 2
        CLOCK.travel_to(run_at(2, shift_s=shift_s))
        out = cli("recrawl")
        latest = tmp_path / "latest.jsonl"
        cli("export", "--latest", "--output", str(latest))
    assert (2, "/r/page") in site.asked and (2, "/r/bom") in site.asked, site.asked
    day1 = {json.loads(line)["url"]: json.loads(line) for line in first.read_text().splitlines()}
    assert day1[f"{origin}/r/page"]["title"].startswith("CafÃ© â€œrelabel")  # the mojibake day 1 served
    rows = {json.loads(line)["url"]: json.loads(line) for line in latest.read_text().splitlines()}
    page, bom = rows[f"{origin}/r/page"], rows[f"{origin}/r/bom"]
    assert page["title"] == TITLE and page["change"] == "changed", page
    assert page["payload_digest"] == day1[f"{origin}/r/page"]["payload_digest"]  # the same bytes, stored once
    assert bom["title"] == TITLE.replace("relabel", "bompage") and bom["change"] == "new", bom  # no new version
    assert "changed: 1" in out, out


def test_a_version_stored_before_its_encoding_was_recorded_is_compared_by_its_content_type() -> None:
    """Migration 0024 leaves ``pages.encoding`` NULL on older versions: the header that carries the label decides
    for them; bytes read as no text (a listing kept as bytes, a PDF) are compared by their digest alone."""
    from harvester.frontier.rows import StoredVersion, version_change
    from harvester.records import ChangeKind, PageRecord

    def now(content_type: str, encoding: str | None, content_hash: str = "h2") -> PageRecord:
        return PageRecord(final_url="http://127.0.0.1/p", status=200, content_type=content_type,
                          content_hash=content_hash, body=BODY, encoding=encoding)

    legacy = StoredVersion(1, "d", "h1", False, None, "text/html; charset=iso-8859-1")
    assert version_change(legacy, "d", now("text/html; charset=utf-8", "utf-8")) is ChangeKind.CHANGED
    assert version_change(legacy, "d", now("text/html; charset=iso-8859-1", "cp1252")) is ChangeKind.SAME
    assert version_change(legacy, "d", now("text/html; charset=utf-8", None)) is ChangeKind.SAME
    recorded = legacy._replace(encoding="cp1252")
    assert version_change(recorded, "d", now("text/html; charset=windows-1252", "cp1252")) is ChangeKind.SAME
    assert version_change(recorded, "d", now("text/html", "utf-8", "h1")) is ChangeKind.RESTYLED
    assert version_change(recorded, "e", now("text/html", "cp1252", "h1")) is ChangeKind.RESTYLED
