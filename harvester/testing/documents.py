"""Small documents for tests' own servers (``threaded_site``): an article page the extractor keeps and a urlset, so
a test states only what its case changes (a path, a version, a lastmod)."""

from __future__ import annotations

TEXT = {"Content-Type": "text/plain"}
XML = {"Content-Type": "application/xml"}


def article(path: str, version: int = 1) -> bytes:
    """A page whose main text the extractor keeps, naming its path and version (a new version: new text)."""
    return (f"<!doctype html><html lang='en'><head><title>{path}</title></head><body><main><article><h1>{path}</h1>"
            f"<p>{f'Version {version} of the words enough for the extractor to keep a paragraph. ' * 5}</p>"
            "</article></main></body></html>").encode()


def urlset(entries: list[tuple[str, str | None]]) -> bytes:
    """A sitemap of (loc, lastmod or None) entries."""
    urls = "".join(f"<url><loc>{loc}</loc>{f'<lastmod>{lm}</lastmod>' if lm else ''}</url>\n" for loc, lm in entries)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
            f"{urls}</urlset>\n").encode()
