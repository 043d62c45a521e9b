"""``harvester export --text``: each page's main text and article metadata (a ``main`` object, by trafilatura), as
docs/export.md describes it; a clear error naming the extra when trafilatura is missing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from html import unescape

import httpx
import pytest
from typer.testing import CliRunner

from harvester import harvest
from harvester.cli import app
from harvester.export import JSONL_FIELDS, MAIN_FIELDS
from harvester.export.text import MainText
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.store_results import StoredPage
from harvester.testing.sites import HostSpec

runner = CliRunner()


@pytest.fixture
def harvested(make_web, sqlite_url):
    web = make_web([HostSpec("t", pages=6, sitemap_only=0.0, feed_only=0.0, listing_only=0.0)], seed=5)
    harvest(Settings.load(database_url=sqlite_url), SiteProfile.build(seeds=tuple(web.seeds)))
    with httpx.Client() as client:
        served = {url: client.get(url).text for url in web.truth["t"].detail_urls()}
    return sqlite_url, served


def export(db_url: str, path, *flags: str) -> dict[str, dict]:
    out = runner.invoke(app, ["export", "--latest", "-o", str(path), "--db", db_url, *flags])
    assert out.exit_code == 0, out.output
    return {line["url"]: line for line in map(json.loads, path.read_text().splitlines())}


def paragraphs(html: str) -> list[str]:
    article = html.split("<article>", 1)[1].split("</article>", 1)[0]
    return [unescape(p) for p in re.findall(r"<p>(.*?)</p>", article)]


def test_text_adds_the_article_text_and_metadata_of_every_page(harvested, tmp_path):
    db_url, served = harvested
    lines = export(db_url, tmp_path / "text.jsonl", "--text")
    assert set(served) <= set(lines)
    for url, html in served.items():
        line = lines[url]
        assert tuple(line) == (*JSONL_FIELDS, "main")
        main = line["main"]
        assert tuple(main) == MAIN_FIELDS
        assert main["extractor"].startswith("trafilatura ")
        for paragraph in paragraphs(html):  # every paragraph of the article, in order
            assert paragraph in main["text"], (url, paragraph)
        assert "Sponsored" not in main["text"]  # the ad block and the chrome are not the article
        assert "All rights reserved" not in main["text"]
        byline = re.search(r'<p class="byline">By (Author \d+) · <time datetime="(\d{4}-\d\d-\d\d)', html)
        assert byline is not None
        assert (main["author"], main["published"]) == byline.groups()
        assert main["headline"] and main["headline"] in line["title"]


def test_without_text_there_is_no_main_object(harvested, tmp_path):
    db_url, served = harvested
    lines = export(db_url, tmp_path / "plain.jsonl")
    assert all(tuple(line) == JSONL_FIELDS for line in lines.values())
    assert set(served) <= set(lines)


def test_text_is_refused_for_a_warc(sqlite_url, tmp_path):
    out = runner.invoke(app, ["export", "--text", "--format", "warc", "-o", str(tmp_path / "x.warc.gz"),
                              "--db", sqlite_url])
    assert out.exit_code != 0
    assert "--text adds fields to JSONL" in " ".join(out.output.split())


def test_a_missing_trafilatura_is_an_error_naming_the_extra(sqlite_url, tmp_path):
    assert runner.invoke(app, ["db", "upgrade", "--db", sqlite_url]).exit_code == 0
    target = tmp_path / "out.jsonl"
    code = ("import sys; sys.modules['trafilatura'] = None\n"  # as if it were not installed
            "from harvester.cli import main; main()")
    args = ["export", "--text", "-o", str(target), "--db", sqlite_url]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    said = " ".join(done.stderr.split())
    assert "harvester[text]" in said and "trafilatura" in said
    assert not target.exists()  # refused before anything was written
    control = subprocess.run([sys.executable, "-c", "from harvester.cli import main; main()", *args],
                             capture_output=True, text=True, timeout=120)
    assert control.returncode == 0, control.stderr


def _page(html: str, url: str = "http://127.0.0.1:1/a.html") -> StoredPage:
    return StoredPage(page_id=1, url_id=1, url=url, final_url=url, fetched_at=datetime(2026, 12, 6, tzinfo=UTC),
                      status=200, content_type="text/html; charset=utf-8", etag=None, last_modified=None,
                      content_hash="x", body=html.encode())


ARTICLE = "<p>" + "Some long article text about harvesting the web politely, one site at a time. " * 12 + "</p>"


@pytest.mark.parametrize(("head", "body", "url", "published"), [
    ("", "<footer>Copyright 2026 Example Corp.</footer>", "http://127.0.0.1:1/a.html", None),
    ('<meta property="article:published_time" content="2024-05-06T10:00:00Z">', "", "http://127.0.0.1:1/a.html",
     "2024-05-06"),
    ('<script type="application/ld+json">{"@type": "Article", "datePublished": "2023-07-08"}</script>', "",
     "http://127.0.0.1:1/a.html", "2023-07-08"),
    ("", "", "http://127.0.0.1:1/2022/01/02/a.html", "2022-01-02"),
])
def test_the_publication_date_is_only_one_the_page_states(head, body, url, published):
    """docs/export.md: JSON-LD, meta tags, ``<time>``, the URL. A stranger's pages with only a footer's
    "Copyright 2026" got ``published: 2026-01-01`` (htmldate's search of the free text). A full date and time
    written in the text ("Generated at 2026-12-04 06:00") is still taken: htmldate's quick search reads those."""
    html = f"<html><head><title>T</title>{head}</head><body><article>{ARTICLE}</article>{body}</body></html>"
    assert MainText().of(_page(html, url))["published"] == published


def test_a_page_fetched_after_the_machines_date_keeps_the_date_it_states() -> None:
    """A harvest on ``HARVESTER_NOW`` ahead of the machine's date (rehearsing a schedule, as docs/operations.md
    shows): a page fetched on 2099-05-21 states 2099-05-20 in ``<time>``, a meta tag and JSON-LD. htmldate bounds
    dates by the machine's day, and a stranger's page got a day of the month it named nowhere (2026-12-01 for
    2026-12-11). The bound is the fetch's day; a date after it is none at all, never another one."""
    stated = "2099-05-20T08:00:00Z"
    head = (f'<meta property="article:published_time" content="{stated}"><script type="application/ld+json">'
            f'{{"@type": "NewsArticle", "datePublished": "{stated}"}}</script>')
    html = (f"<html><head><title>T</title>{head}</head><body><article><time datetime=\"{stated}\">20 May 2099</time>"
            f"{ARTICLE}</article></body></html>")
    page = _page(html)
    assert MainText().of(replace(page, fetched_at=datetime(2099, 5, 21, 3, tzinfo=UTC)))["published"] == "2099-05-20"
    assert MainText().of(replace(page, fetched_at=datetime(2099, 5, 20, 3, tzinfo=UTC)))["published"] == "2099-05-20"
    assert MainText().of(replace(page, fetched_at=datetime(2099, 5, 1, 3, tzinfo=UTC)))["published"] is None
