"""A listing page's exported row, as a downstream reader saw it (stranger47): its title, description, language and
JSON-LD are the page's, as a detail page's are; null only where the page gives none."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from harvester.cli import app
from harvester.testing.threaded_site import Answer, Asked, threaded_site

ARTICLE = "Words enough for the extractor to keep a paragraph of this article and call it the main text. " * 4
LIST_LD = '{"@type": "ItemList", "name": "Latest"}'


def answer(request: Asked) -> Answer:
    if request.path == "/robots.txt":
        return 200, {"Content-Type": "text/plain"}, b"User-agent: *\nAllow: /\n"
    html = {"Content-Type": "text/html; charset=utf-8"}
    if request.path == "/":
        links = "".join(f'<li><a href="/news/story-{n}">Story {n}</a></li>' for n in range(1, 4))
        return 200, html, (
            '<!doctype html><html lang="de-AT"><head><title>Latest  news</title>'
            '<meta name="description" content="Every story, newest first.">'
            f'<script type="application/ld+json">{LIST_LD}</script></head>'
            f"<body><ul>{links}</ul></body></html>").encode()
    if request.path.startswith("/news/story-"):
        return 200, html, (f"<!doctype html><html lang='de'><head><title>{request.path}</title></head><body>"
                           f"<article><h1>{request.path}</h1><p>{ARTICLE}</p></article></body></html>").encode()
    return 404, {"Content-Type": "text/plain"}, b""


def test_a_listing_rows_title_and_language_are_the_pages(tmp_path: Path) -> None:
    """Listing pages are stored by the listing crawl, not by extraction, and their rows had title, description and
    language null and jsonld empty for a page with ``<title>``, ``<meta name=description>``, ``<html lang>`` and a
    JSON-LD block, where docs/export.md says null is a value the page did not give. They are read from the parse
    the listing crawl makes for its links, as extraction reads a detail page's."""
    db = f"sqlite:///{tmp_path / 'h.db'}"
    out = tmp_path / "all.jsonl"
    runner = CliRunner()
    with threaded_site(answer) as origin:
        run = runner.invoke(app, ["harvest", f"{origin}/", "--db", db])
        assert run.exit_code == 0, run.output
    exported = runner.invoke(app, ["export", "-o", str(out), "--db", db])
    assert exported.exit_code == 0, exported.output
    rows = {row["url"][len(origin):]: row for row in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    home = rows["/"]
    assert home["kind"] == "listing", home
    assert (home["title"], home["description"], home["language"]) == (
        "Latest news", "Every story, newest first.", "de-AT")
    assert home["jsonld"] == [json.loads(LIST_LD)]
    assert (home["canonical"], home["fields"]) == (None, {})
    story = rows["/news/story-1"]
    assert (story["kind"], story["title"], story["language"]) == ("detail", "/news/story-1", "de")
