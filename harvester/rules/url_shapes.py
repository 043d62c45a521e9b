"""URL shapes for link classification (``rules.classify``): a URL split once (``_Parts``), a path segment's shape
(``segment_shape``), and the shapes learned per host and depth from example URLs (``_Templates``). Pure: strings in,
shapes out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from harvester.settings import DEFAULT_PRESENTATION_PARAMS, DEFAULT_SESSION_PARAMS, DEFAULT_TRACKING_PARAMS

_SEPARATORS = re.compile(r"[-_+~,.]+")
_EXTENSION = re.compile(r"\.([A-Za-z0-9]{1,5})$")


def segment_shape(segment: str) -> str:
    """A segment's shape: digits → 9, one word → a, several words → a+, mixed → x; separators kept as "-".

    ``my-great-post-123.html`` → ``a+-9.html``; ``12345`` → ``9``; ``about`` → ``a``; ``a1b2c3`` → ``x``.
    """
    if segment.isdigit():
        return "9"
    if segment.isalpha():
        return "a"
    ext = ""
    match = _EXTENSION.search(segment)
    if match is not None and not match.group(1).isdigit():
        ext = "." + match.group(1).lower()
        segment = segment[: match.start()]
    tokens: list[str] = []
    for chunk in _SEPARATORS.split(segment):
        if not chunk:
            continue
        kind = "9" if chunk.isdigit() else "a" if chunk.isalpha() else "x"
        if kind == "a" and tokens and tokens[-1] in ("a", "a+"):
            tokens[-1] = "a+"
        elif kind == "9" and tokens and tokens[-1] == "9":
            continue
        else:
            tokens.append(kind)
    return "-".join(tokens) + ext


_IGNORED_PARAMS = frozenset(
    name.lower() for name in (*DEFAULT_TRACKING_PARAMS, *DEFAULT_PRESENTATION_PARAMS, *DEFAULT_SESSION_PARAMS)
)
"""Query parameters that say nothing about a URL's shape: raw links carry them, canonical sitemap URLs do not."""


class _Parts:
    """One URL split once for classification: host (without www.), path, raw query, segments, shape query."""

    __slots__ = ("host", "path", "query", "query_keys", "segments")

    def __init__(self, url: str) -> None:
        rest = url.partition("://")[2] if "://" in url else url
        rest = rest.partition("#")[0]
        slash = rest.find("/")
        question = rest.find("?")
        if question >= 0 and (slash < 0 or question < slash):
            netloc, path_query = rest[:question], "/" + rest[question:]
        elif slash < 0:
            netloc, path_query = rest, "/"
        else:
            netloc, path_query = rest[:slash], rest[slash:]
        path, _, query = path_query.partition("?")
        self.host = netloc.rpartition("@")[2].lower().removeprefix("www.")
        self.path = path or "/"
        self.query = query
        self.segments = [seg for seg in path.split("/") if seg]
        self.query_keys = _shape_query(query) if query else ""


def _shape_query(query: str) -> str:
    """Sorted query keys that say something about the URL's shape (tracking and session keys dropped)."""
    keys = {
        name for piece in query.split("&") if piece and (name := piece.partition("=")[0]).lower() not in _IGNORED_PARAMS
    }
    return "&".join(sorted(keys))


def _path_parts(url: str) -> tuple[str, list[str], str]:
    """(host without www., path segments, sorted meaningful query keys): what a URL shape is made of."""
    parts = _Parts(url)
    return parts.host, parts.segments, parts.query_keys


def _is_variable(values: Counter[str], examples: int) -> bool:
    """A path position is a variable (an id or slug) unless it holds a few plain words (a section name)."""
    if any(any(ch.isdigit() for ch in value) for value in values):
        return True
    if any(segment_shape(value) not in ("a", "") for value in values):
        return True
    return len(values) > max(3, examples // 5)


class _Templates:
    """URL shapes learned from examples, grouped by (host, depth): which positions are literal words.

    Also the literal leading segments of each shape (``/articles/`` of ``/articles/{slug}``): a URL that IS such
    a prefix is the section's own listing page.
    """

    __slots__ = ("_dirty", "_groups", "_hosts", "_keys", "_max_examples", "_prefixes", "_variable")

    # ``_hosts``: each host's groups, so that ``is_section_of`` looks at one host's shapes, not every host's (a
    # profile of many hosts shares one classifier, and that scan ran for every link of every page).

    def __init__(self, max_examples: int) -> None:
        self._max_examples = max_examples
        # Each group's examples as an ordered set: extraction teaches the newest detail URLs of the frontier again
        # whenever discovery hands hosts over (``phases.extract_phase._rescope``), and kept as a list every sample was
        # appended again, up to ``max_examples`` per group: at 2,000 hosts the examples grew all through the run
        # (issue 22), and repeats weighed a section's words as if they were more URLs.
        self._groups: dict[tuple[str, int], dict[tuple[tuple[str, ...], str], None]] = {}
        self._variable: dict[tuple[str, int], list[bool]] = {}
        self._keys: dict[tuple[str, int], set[tuple[str, ...]]] = {}
        self._prefixes: dict[tuple[str, int], set[tuple[str, ...]]] = {}
        self._dirty: set[tuple[str, int]] = set()
        self._hosts: dict[str, set[tuple[str, int]]] = {}

    def knows(self, host: str) -> bool:
        """Whether any example of ``host`` (without www.) was learned."""
        return host in self._hosts

    def add(self, url: str) -> bool:
        """Learn ``url``'s shape; False when it was learned before or its group is full (nothing changed)."""
        host, segments, query = _path_parts(url)
        group = (host, len(segments))
        self._hosts.setdefault(host, set()).add(group)
        examples = self._groups.setdefault(group, {})
        example = (tuple(segments), query)
        if example not in examples and len(examples) < self._max_examples:
            examples[example] = None
            self._dirty.add(group)
            return True
        return False

    def __len__(self) -> int:
        return sum(len(examples) for examples in self._groups.values())

    def _rebuild(self, group: tuple[str, int]) -> None:
        examples = self._groups[group]
        depth = group[1]
        columns: list[Counter[str]] = [Counter() for _ in range(depth)]
        for segments, _ in examples:
            for position, value in enumerate(segments):
                columns[position][value] += 1
        variable = [_is_variable(column, len(examples)) for column in columns]
        self._variable[group] = variable
        self._keys[group] = {self._key(segments, query, variable) for segments, query in examples}
        literal_head = next((i for i, var in enumerate(variable) if var), depth)
        self._prefixes[group] = {tuple(segments[:literal_head]) for segments, _ in examples} if literal_head else set()
        self._dirty.discard(group)

    def _fresh(self) -> None:
        for group in list(self._dirty):
            self._rebuild(group)

    @staticmethod
    def _key(segments: Sequence[str], query: str, variable: list[bool]) -> tuple[str, ...]:
        return (*(segment_shape(seg) if var else seg for seg, var in zip(segments, variable, strict=True)), query)

    def matches(self, url: str | _Parts) -> bool:
        parts = url if isinstance(url, _Parts) else _Parts(url)
        group = (parts.host, len(parts.segments))
        if group not in self._groups:
            return False
        if group in self._dirty:
            self._rebuild(group)
        return self._key(parts.segments, parts.query_keys, self._variable[group]) in self._keys[group]

    def is_section_of(self, url: str | _Parts) -> bool:
        """True when ``url``'s path is exactly the literal head of a learned shape (and has no query)."""
        parts = url if isinstance(url, _Parts) else _Parts(url)
        if not parts.segments or parts.query_keys or (not self._prefixes and not self._dirty):
            return False
        self._fresh()
        head = tuple(parts.segments)
        return any(
            head in self._prefixes[group]
            for group in self._hosts.get(parts.host, ())
            if group[1] > len(head) and group in self._prefixes
        )
