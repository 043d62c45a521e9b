"""Extraction's own parser gives the tree lxml.html's gives (classes aside); the hook's ``Page.tree`` keeps
lxml.html's element classes."""

from __future__ import annotations

import threading

import lxml.html

from harvester.extraction.content import main_content_text
from harvester.extraction.model import extraction_parser, parse_html_text

PAGE = """<!doctype html><html lang=en><head><title>T</title><!-- c --><?pi x?></head><body>
<header class=site-header><nav><a href=/a>A</a></nav></header><div class="ad" id=ad-top>Sponsored</div>
<main><article><h1>Title</h1><p>Some &amp; text, caf&eacute;.</p><form action=/f><input name=q></form></article></main>
<footer>f</footer></body></html>"""


def test_same_tree_and_main_text_as_lxml_html() -> None:
    fast, classic = parse_html_text(PAGE, for_extraction=True), parse_html_text(PAGE)
    assert fast is not None and classic is not None
    assert lxml.html.tostring(fast) == lxml.html.tostring(classic)
    assert all(isinstance(e, lxml.html.HtmlElement) for e in fast.iter())
    assert isinstance(classic.forms[0], lxml.html.FormElement)  # what a hook's Page.tree offers
    assert main_content_text(fast) == main_content_text(classic)


def test_one_parser_per_thread() -> None:
    mine = extraction_parser()
    assert extraction_parser() is mine
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(extraction_parser()))
    thread.start()
    thread.join()
    assert other[0] is not mine
    again = parse_html_text(PAGE, for_extraction=True)  # the reused parser parses again, the same
    assert again is not None and lxml.html.tostring(again) == lxml.html.tostring(parse_html_text(PAGE))
