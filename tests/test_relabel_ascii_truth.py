"""A charset label that flips over bytes every label reads alike is no new version (review47).

The same bytes decoded otherwise are a new version (``tests/test_relabel_truth.py``): a label fixed from
iso-8859-1 to utf-8 over UTF-8 bytes turns mojibake into the page. But most pages are ASCII bytes (accents as
entities), which every ASCII-compatible encoding reads as the same text, and a site's answers often disagree on
the label (a cache or a second server that sends ``text/html`` bare, the origin ``charset=iso-8859-1``): each flip
was stored as a new version and counted ``restyled``, a page that never changed. Daily runs 24 h apart (and five
minutes either side), through the CLI, SQLite and PostgreSQL.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from daily_cli import article, cli_on

from harvester.runtime import CLOCK
from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

ASCII = article("Caf&eacute; &ldquo;ascii&rdquo;")
LABELS = {1: "text/html; charset=iso-8859-1", 2: "text/html", 3: "text/html; charset=utf-8",
          4: "text/html; charset=iso-8859-1", 5: "text/html"}


@pytest.mark.parametrize("shift_s", [-300.0, 300.0])
def test_an_ascii_page_whose_label_flips_is_one_version(db_url: str, clock: None, shift_s: float) -> None:
    day = 1
    asked: list[int] = []

    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {"/a/page": None})
        if request.path == "/a/page":
            asked.append(day)
            return 200, {"Content-Type": LABELS[day]}, ASCII
        return 404, {"Content-Type": "text/plain"}, b"not here"

    cli = cli_on(db_url)
    outs = []
    with threaded_site(answer) as origin:
        CLOCK.travel_to(run_at(1))
        cli("db", "upgrade")
        cli("harvest", f"{origin}/")
        for day in (2, 3, 4, 5):
            CLOCK.travel_to(run_at(day, shift_s=shift_s))
            outs.append(cli("recrawl"))
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        versions = conn.execute(sa.text("SELECT count(*) FROM pages p JOIN urls u ON u.id = p.url_id"
                                        " WHERE u.path = '/a/page'")).scalar_one()
    engine.dispose()
    assert asked[:2] == [1, 2] and len(asked) >= 3, asked  # asked under two labels or more after the first
    summaries = [next(line for line in out.splitlines() if line.startswith("new:")) for out in outs]
    assert all("changed: 0" in line and "restyled: 0" in line for line in summaries), summaries
    assert versions == 1
