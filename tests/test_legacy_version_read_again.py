"""A version stored before its encoding was recorded (migration 0024: ``pages.encoding`` NULL) is read again, in
place, the first time its bytes are served again.

0024 came with the WHATWG decoders: EUC-KR is read as windows-949 (the strict euc_kr codec made U+FFFD of the
syllables it adds), a ``<meta charset>`` in a comment declares nothing. A database upgraded from 0023 holds its
versions as the old decoders read them; compared by Content-Type (``rows.version_change``), the same bytes were the
same version, rightly, but the version kept the old reading for good: ``export --latest`` said "\ufffdc방각하" for a
page the harvester now reads as "똠방각하" (review47: a real 0023 database upgraded, re-crawled 24 h later). The
version is repaired in place (no new version, no change counted: the site changed nothing), its encoding recorded.
The 0023 versions are made here as the old code left them: encoding NULL, the old reading's title and hash.
Daily runs 24 h apart (and five minutes either side), through the CLI, SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from daily_cli import FILLER, cli_on

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

KOREAN = "똠방각하 뷁"  # 똠 and 뷁 are windows-949's, not EUC-KR's


def page(title: str, head: str = "") -> str:
    return (f"<!doctype html><html><head>{head}<title>{title}</title></head><body><main><article><h1>{title}</h1>"
            f"<p>{FILLER}</p><p>{FILLER}</p></article></main></body></html>")


PAGES = {
    "/ko": ("text/html; charset=euc-kr", page(KOREAN).encode("cp949")),
    "/commented": ("text/html", page("Café “commented”",
                                     "<!-- <meta charset='utf-8'> --><meta charset='windows-1252'>").encode("cp1252")),
    "/plain": ("text/html; charset=utf-8", page("Café “plain”").encode()),
}
OLD_READING = {"/ko": "\ufffdc방각하 \ufffd\ufffd", "/commented": "Caf\ufffd \ufffdcommented\ufffd"}
"""The titles the decoders before 0024 read (strict euc_kr; the commented-out utf-8 obeyed)."""


def answer(request: Asked) -> Answer:
    if request.path == "/robots.txt":
        return robots_txt(request.origin)
    if request.path == "/sitemap.xml":
        return sitemap(request.origin, dict.fromkeys(PAGES))
    if request.path in PAGES:
        content_type, body = PAGES[request.path]
        return 200, {"Content-Type": content_type}, body
    return 404, {"Content-Type": "text/plain"}, b"not here"


@pytest.mark.parametrize("shift_s", [-300.0, 300.0])
def test_a_version_stored_before_0024_is_read_again_in_place_by_its_next_identical_answer(
    db_url: str, clock: None, tmp_path: Path, shift_s: float,
) -> None:
    cli = cli_on(db_url)
    with threaded_site(answer) as origin:
        CLOCK.travel_to(run_at(1))
        cli("db", "upgrade")
        cli("harvest", f"{origin}/")
        engine = sa.create_engine(db_url)
        with engine.begin() as conn:  # the versions as the code at 0023 stored them
            conn.execute(sa.text("UPDATE pages SET encoding = NULL"))
            for path, title in OLD_READING.items():
                conn.execute(sa.text("UPDATE pages SET title = :t, content_hash = :h WHERE url_id ="
                                     " (SELECT id FROM urls WHERE path = :p)"), {"t": title, "h": "0" * 64, "p": path})
                conn.execute(sa.text("UPDATE urls SET content_hash = :h WHERE path = :p"), {"h": "0" * 64, "p": path})
        CLOCK.travel_to(run_at(2, shift_s=shift_s))
        out = cli("recrawl")
        latest = tmp_path / "latest.jsonl"
        cli("export", "--latest", "--output", str(latest))
        with engine.connect() as conn:
            versions = dict(conn.execute(sa.text(
                "SELECT u.path, count(*) FROM pages p JOIN urls u ON u.id = p.url_id GROUP BY u.path")).all())
            encodings = dict(conn.execute(sa.text(
                "SELECT u.path, p.encoding FROM pages p JOIN urls u ON u.id = p.url_id")).all())
        engine.dispose()
    assert "changed: 0" in out and "restyled: 0" in out and "new: 0" in out, out
    assert versions == {"/ko": 1, "/commented": 1, "/plain": 1}, versions
    rows = {json.loads(line)["url"].removeprefix(origin): json.loads(line) for line in latest.read_text().splitlines()}
    assert rows["/ko"]["title"] == KOREAN and rows["/ko"]["change"] == "new", rows["/ko"]
    assert rows["/commented"]["title"] == "Café “commented”", rows["/commented"]
    assert rows["/plain"]["title"] == "Café “plain”", rows["/plain"]
    assert encodings == {"/ko": "cp949", "/commented": "cp1252", "/plain": "utf-8"}, encodings
