"""Where a sitemap that ends early stops being whole: a file cut inside ``<loc>`` keeps only entries that closed.

A download cut short, a gzip stream that ends early or the harvester's own byte cap can end a sitemap anywhere.
libxml2's recovery then closes the open elements itself, so ``<loc>https://h/news/article-1081`` cut after
"108" reads as another page, /news/article-108. These functions find the end of the last complete entry so the
parser never sees the partial one. Pattern scans over the document's tail only; never parses, never fetches.
"""

from __future__ import annotations

import re
from typing import NamedTuple, TypeVar

_Text = TypeVar("_Text", str, bytes)

_NAME = r"(?:[A-Za-z_][-\w.]*:)?"
"""An optional namespace prefix: ``<sm:url>`` closes as ``</sm:url>``."""

_ROOT = re.compile(rf"(?:<\?.*?\?>|<!--.*?-->|[\s\ufeff])*<{_NAME}(urlset|sitemapindex)[\s/>]", re.DOTALL)
"""The root element of a sitemap's head, behind its XML declaration, comments and white space."""

ENTRY_OF = {"urlset": "url", "sitemapindex": "sitemap"}

TAIL_WINDOW = 65_536
"""Characters searched first for the last entry's end tag; the window grows only for an entry longer than this."""


class Cut(NamedTuple):
    """Where to cut a document (a byte offset), and what the cut leaves out, for the sitemap's problems."""

    at: int
    root: str
    partial_entry: bool
    """Something of an entry (its start tag) lay past the cut: an entry was dropped, not only white space."""

    def problem(self) -> str:
        entry = ENTRY_OF[self.root]
        what = f"a partial <{entry}> dropped" if self.partial_entry else "no entry after it"
        return (f"ends before </{self.root}> (truncated): kept the entries up to the last complete </{entry}>, "
                f"{what}")


def _texts(root: str) -> tuple[str, str, str]:
    """The patterns of one root: an entry's end tag, an entry's start tag, the root's end tag."""
    entry = ENTRY_OF[root]
    return rf"</{_NAME}{entry}[ \t\r\n]*>", rf"<{_NAME}{entry}[ \t\r\n/>]", rf"</{_NAME}{root}[ \t\r\n]*>"


_TEXT_PATTERNS = {root: tuple(re.compile(t) for t in _texts(root)) for root in ENTRY_OF}
_BYTE_PATTERNS = {root: tuple(re.compile(t.encode("ascii")) for t in _texts(root)) for root in ENTRY_OF}


def entries_cut(body: bytes, head: str, wide: tuple[str, int] | None) -> Cut | None:
    """Where ``body`` (a urlset or sitemap index whose root's end tag never comes) stops holding whole entries;
    None for a whole document or one that is no urlset or index. ``head`` is the document's head as text (the
    prolog sniffed), ``wide`` the UTF-16/32 codec and byte-order-mark length of a wide file."""
    root_match = _ROOT.match(head)
    if root_match is None:
        return None
    root = root_match.group(1)
    if wide is None:
        found = _cut_in(body, *_BYTE_PATTERNS[root])
        return None if found is None else Cut(found[0], root, found[1])
    name, bom = wide
    text = body[bom:].decode(name, errors="replace")
    found = _cut_in(text, *_TEXT_PATTERNS[root])
    if found is None:
        return None
    # An undecodable unit becomes one U+FFFD, which encodes to as many bytes: the offset maps back exactly.
    return Cut(bom + len(text[: found[0]].encode(name)), root, found[1])


def _cut_in(
    doc: _Text, entry_end: re.Pattern[_Text], entry_start: re.Pattern[_Text], root_end: re.Pattern[_Text]
) -> tuple[int, bool] | None:
    """(where to cut, whether an entry's start lies past it), or None when the root closes after the last entry."""
    last = _last_match(doc, entry_end)
    at = last.end() if last is not None else 0
    if root_end.search(doc, at) is not None:
        return None  # whole; whatever follows the root is the parser's to judge
    if last is None:
        start = entry_start.search(doc)
        return None if start is None else (start.start(), True)
    return at, entry_start.search(doc, at) is not None


def _last_match(doc: _Text, pattern: re.Pattern[_Text]) -> re.Match[_Text] | None:
    """The last match of ``pattern``, searched in a window at the end that grows until it finds one."""
    size = TAIL_WINDOW
    while True:
        start = max(0, len(doc) - size)
        last = None
        for last in pattern.finditer(doc, start):  # noqa: B007 (the loop keeps the last)
            pass
        if last is not None or start == 0:
            return last
        size *= 4
