"""Row shaping for the frontier: validation of incoming records and the values written for them. No SQL here.

A URL is stored as its host's id plus the rest of the URL after the origin (``path``: path, query), so the
origin is written once per host rather than once per URL. Validation runs over a whole batch before anything
is written, so a bad record rejects the batch and leaves the database untouched.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from harvester.errors import InvalidRecord
from harvester.records import ChangeKind, Completion, DiscoveredUrl, ErrorClass, PageRecord, UrlKind, UrlState
from harvester.rules.revisit import due_at, failed_recheck_s
from harvester.runtime import aware
from harvester.settings import MAX_URL_LENGTH, RevisitSettings
from harvester.store_results import StoredPage

ORIGIN = re.compile(r"https?://[^/?#\x00-\x20\x7f]+")
"""``scheme://netloc`` at the start of an absolute http(s) URL (the same split as ``records.origin_of``)."""

_URL = re.compile(r"(https?://[^/?#\x00-\x20\x7f]+)([/?#][^\x00-\x20\x7f]*)?")
"""A whole acceptable URL in one C-level match: (origin, rest); no spaces or control characters anywhere."""
_KINDS = frozenset(kind.value for kind in UrlKind)
_FINAL = frozenset({UrlState.DONE, UrlState.GONE, UrlState.DUPLICATE, UrlState.DISALLOWED, UrlState.SKIPPED})



def source_kind(label: str) -> str:
    return label.split(":", 1)[0][:20]


def split_url(url: str) -> tuple[str, str]:
    """(origin, path) of an absolute http(s) URL; InvalidRecord otherwise."""
    match = _URL.fullmatch(url) if isinstance(url, str) and len(url) <= MAX_URL_LENGTH else None
    if match is None:
        raise _bad_url(url)
    return match.group(1), match.group(2) or ""


def _fetch_path(fetch: str, origin: str, url: str) -> str:
    """The part of ``fetch`` after ``origin``: a spelling of ``url`` on another origin (or too long) is refused,
    since a record's key and the address requested must never name two different places."""
    if fetch.__class__ is not str or not fetch.startswith(origin) or _URL.fullmatch(fetch) is None \
            or len(fetch) > MAX_URL_LENGTH or fetch[len(origin):len(origin) + 1] not in ("/", "?", ""):
        raise InvalidRecord(f"URL {url[:200]!r} has a fetch form {str(fetch)[:200]!r} on another origin or not"
                            " a valid URL")
    return fetch[len(origin):]


def _bad_url(url: object) -> InvalidRecord:
    return InvalidRecord(
        f"URL {str(url)[:200]!r} is not an absolute http(s) URL of at most {MAX_URL_LENGTH} characters without"
        " spaces or control characters"
    )


@dataclass(slots=True)
class Merged:
    """One URL of a batch after duplicates within the batch were folded together."""

    url: str
    origin: str
    path: str
    kind: str
    score: float
    depth: int
    lastmod: datetime | None
    changefreq: str | None
    priority: float | None
    sources: list[str]
    fetch_path: str | None = None
    """The site's spelling after the origin when it differs from ``path``; the first spelling seen is kept."""
    lastmod_until: datetime | None = None
    """The end of the period ``lastmod`` names when it is of reduced precision (``DiscoveredUrl.lastmod_until``)."""


def merge(batch: Sequence[DiscoveredUrl]) -> list[Merged]:
    """Validate every record (a bad one raises InvalidRecord naming it), folding duplicates within the batch:
    best score, least depth, newest lastmod, every source."""
    out: dict[str, Merged] = {}
    kinds = _KINDS
    isfinite = math.isfinite
    fullmatch = _URL.fullmatch
    for record in batch:
        url = record.url
        match = fullmatch(url) if url.__class__ is str and len(url) <= MAX_URL_LENGTH else None
        if match is None:
            raise _bad_url(url)
        score = record.score
        depth = record.depth
        kind = record.kind
        # A UrlKind member is valid by construction (and hashing an Enum member runs Python code: skip it).
        kind_value = kind._value_ if kind.__class__ is UrlKind else kind
        if kind_value not in kinds:
            raise InvalidRecord(f"URL {url[:200]!r} has kind {kind!r}; expected one of {sorted(kinds)}")
        if score.__class__ is not float:
            if not isinstance(score, int | float):
                raise InvalidRecord(f"URL {url[:200]!r} has a non-numeric score {score!r}")
            score = float(score)
        if not isfinite(score):
            raise InvalidRecord(f"URL {url[:200]!r} has a non-finite score {score!r}")
        if depth.__class__ is not int or not 0 <= depth <= 32_767:
            raise InvalidRecord(f"URL {url[:200]!r} has depth {depth!r}; expected an int 0..32767")
        if not record.source:
            raise InvalidRecord(f"URL {url[:200]!r} has no source")
        lastmod = aware(record.lastmod)
        prior = out.get(url)
        if prior is None:
            origin, path = match.groups()
            fetch = record.fetch_url
            out[url] = Merged(url, origin, path or "", kind_value, score, depth, lastmod, record.changefreq,
                              record.priority, [record.source],
                              None if fetch is None or fetch == url else _fetch_path(fetch, origin, url),
                              aware(record.lastmod_until) if lastmod is not None else None)
            continue
        prior.score = max(prior.score, score)
        prior.depth = min(prior.depth, depth)
        if lastmod is not None and (prior.lastmod is None or lastmod > prior.lastmod):
            prior.lastmod = lastmod
            prior.lastmod_until = aware(record.lastmod_until)
        prior.changefreq = record.changefreq or prior.changefreq
        prior.priority = record.priority if record.priority is not None else prior.priority
        if record.source not in prior.sources:
            prior.sources.append(record.source)
    return list(out.values())


def fold(items: Sequence[Merged]) -> list[Merged]:
    """Fold already-validated rows from several batches (outlinks of several pages) into one per URL."""
    out: dict[str, Merged] = {}
    for m in items:
        prior = out.get(m.url)
        if prior is None:
            out[m.url] = Merged(m.url, m.origin, m.path, m.kind, m.score, m.depth, m.lastmod, m.changefreq,
                                m.priority, list(m.sources), m.fetch_path, m.lastmod_until)
            continue
        prior.score = max(prior.score, m.score)
        prior.depth = min(prior.depth, m.depth)
        if m.lastmod is not None and (prior.lastmod is None or m.lastmod > prior.lastmod):
            prior.lastmod = m.lastmod
            prior.lastmod_until = m.lastmod_until
        prior.changefreq = m.changefreq or prior.changefreq
        prior.priority = m.priority if m.priority is not None else prior.priority
        prior.sources += [s for s in m.sources if s not in prior.sources]
    return list(out.values())


def check_completion(c: Completion) -> None:
    if not isinstance(c.state, UrlState) or c.state == UrlState.LEASED:
        raise InvalidRecord(f"completion of URL id {c.url_id}: state {c.state!r} is not an outcome")
    if not isinstance(c.fetched_at, datetime):
        raise InvalidRecord(f"completion of URL id {c.url_id}: fetched_at {c.fetched_at!r} is not a datetime")
    if c.final_url is not None and len(c.final_url) > MAX_URL_LENGTH:
        raise InvalidRecord(f"completion of URL id {c.url_id}: final_url is longer than {MAX_URL_LENGTH}")


_NOT_SENT = frozenset({
    ErrorClass.PARKED, ErrorClass.ROBOTS_DISALLOWED, ErrorClass.ADDRESS_REFUSED, ErrorClass.INVALID_URL,
})
"""Failures decided before any request left: nothing was asked of the site."""


def sent(c: Completion) -> bool:
    """Whether a request went out for ``c``: an answer, bytes, or a failure met on the way (a completion without
    a request, such as a page skipped on its truthful lastmod or a filter variant not needed, has none)."""
    if c.status is not None or c.bytes_read:
        return True
    return c.error_class is not None and c.error_class not in _NOT_SENT


def outcome(c: Completion) -> str:
    """How a fetch is counted: fetched (a 2xx) / not_modified / gone / failed, ``unsent`` when no request went
    out, else the state's name."""
    if not sent(c):
        return "unsent"
    if c.status == 304 and c.error_class is None:
        return "not_modified"
    if c.state == UrlState.DONE:
        return "fetched"
    return c.state.value


@dataclass(frozen=True, slots=True)
class UrlOutcome:
    """The URL columns one completion writes (times still datetimes; the dialect converts them)."""

    state: str
    status: int | None
    etag: str | None
    last_modified: str | None
    content_hash: str | None
    next_fetch_at: datetime | None
    revisit_s: float | None
    attempts: int
    error_class: str | None
    error: str | None
    changed_at: datetime | None
    gone_at: datetime | None
    final_url: str | None
    duplicate_of: int | None
    last_fetched_at: datetime | None


def url_outcome(
    c: Completion, attempts: int, old_etag: str | None, old_lm: str | None, old_hash: str | None, max_attempts: int,
    revisit: RevisitSettings | None = None,
) -> UrlOutcome:
    """Apply the completion rules: a FAILED fetch is QUEUED again (at ``next_fetch_at``) until it has failed
    ``max_attempts`` times; then it stays FAILED and is due again at a later run (``revisit.failed_recheck_s`` of
    ``revisit``, growing with each run it fails again; an extraction's start queues it then:
    ``FrontierStore.requeue_rechecks``), never failed for good: a page a site broke for a day is asked again once it
    mends it. A final outcome resets attempts. Validators and the content hash are replaced on a 2xx; a 304 updates
    the validators it carries (RFC 9111 §4.3.4: the others kept); an error keeps them (it says nothing new about
    them). A DUPLICATE keeps its validators: asked at its revisit, a 304 keeps it the copy of its holder
    (``Outcomes._write_outcomes``); made due because its holder's content went away, it is asked in full
    (``Outcomes._release_duplicates``)."""
    fetched_at = aware(c.fetched_at)
    state = c.state
    next_fetch_at = aware(c.next_fetch_at)
    if state == UrlState.FAILED:
        attempts += 1
        if attempts < max_attempts:
            state = UrlState.QUEUED
        elif revisit is not None:
            recheck_s = failed_recheck_s(attempts - max_attempts, c.error_class, revisit)
            next_fetch_at = due_at(fetched_at, recheck_s, revisit)
    elif state in _FINAL:
        attempts = 0
    responded = c.status is not None and 200 <= c.status < 300
    forget = c.forget_validators
    return UrlOutcome(
        state=state.value,
        status=c.status,
        etag=None if forget else c.etag if responded else (c.etag or old_etag),
        last_modified=None if forget else c.last_modified if responded else (c.last_modified or old_lm),
        content_hash=c.content_hash or old_hash,
        next_fetch_at=next_fetch_at,
        revisit_s=c.revisit_s,
        attempts=attempts,
        error_class=c.error_class.value if c.error_class else None,
        error=c.error[:500] if c.error else None,
        changed_at=fetched_at if c.changed else None,
        gone_at=fetched_at if state == UrlState.GONE else None,
        final_url=c.final_url,
        duplicate_of=c.duplicate_of,
        last_fetched_at=fetched_at if c.status is not None else None,
    )


def page_row(url_id: int, fetched_at: datetime, page: PageRecord, body_id: int, change: str) -> dict[str, Any]:
    """A ``pages`` row: one version, its payload in ``bodies`` (``body_id``)."""
    return {
        "url_id": url_id, "fetched_at": aware(fetched_at), "status": page.status, "final_url": page.final_url,
        "content_type": page.content_type, "etag": page.etag, "last_modified": page.last_modified,
        "content_hash": page.content_hash, "canonical_url": page.canonical_url, "title": page.title,
        "description": page.description, "language": page.language, "jsonld": list(page.jsonld),
        # A failed hook left no fields: none stored (null), never an empty or an older version's.
        "fields": None if page.hook_error else dict(page.fields), "robots": ",".join(page.robots),
        "body_id": body_id, "body_size": len(page.body), "change": change,
        "hook_error": dict(page.hook_error) if page.hook_error else None, "encoding": page.encoding,
    }


class StoredVersion(NamedTuple):
    """A URL's latest stored version, as much of it as an answer is compared with (``_store_versions``)."""

    page_id: int
    digest: str
    content_hash: str
    hook_failed: bool
    encoding: str | None
    content_type: str | None


def version_change(before: StoredVersion | None, digest: str, page: PageRecord) -> ChangeKind:
    """What a 2xx payload is to its URL's latest stored version ``before``: the payload digest and the encoding its
    text was decoded with decide whether it is a new version at all; the main text only whether it is changed or
    restyled.

    The same bytes decoded with another encoding are another text (a charset label fixed from iso-8859-1 to utf-8
    turns mojibake into the page): a new version, or the snapshot would keep the old text for good. A version
    stored before its encoding was recorded (0024) is compared by its Content-Type instead, the header that
    carries the label (a page's own ``<meta>`` is in its bytes)."""
    if before is None:
        return ChangeKind.NEW
    if before.digest == digest and not _decoded_otherwise(before, page):
        return ChangeKind.SAME
    return ChangeKind.CHANGED if before.content_hash != page.content_hash else ChangeKind.RESTYLED


_NOT_ASCII_READ = frozenset({"utf-16-le", "utf-16-be", "replacement"})
"""Encodings (``decode_html``'s names) that do not read ASCII bytes as ASCII. ISO-2022-JP does only without its
escapes: a body holding ESC is never taken for plain ASCII."""


def _decoded_otherwise(before: StoredVersion, page: PageRecord) -> bool:
    if page.encoding is None:
        return False  # no text read now: bytes alone
    if page.encoding not in _NOT_ASCII_READ and before.encoding not in _NOT_ASCII_READ and page.body.isascii() and (
            b"\x1b" not in page.body):
        # ASCII bytes are the same text under any ASCII-compatible label (accents as entities, most pages): a label
        # that flips between a site's answers (a cache sending text/html bare) is no new version, no "restyled".
        return False
    if before.encoding is None:
        return before.content_type != page.content_type and before.content_type is not None
    return before.encoding != page.encoding


def stored_page(row: Any) -> StoredPage:
    """A pages row (joined with its URL as ``url``, its body as ``stored_body``) back as a record, decompressed."""
    return StoredPage(
        page_id=row.id, url_id=row.url_id, url=row.url, final_url=row.final_url, fetched_at=row.fetched_at,
        status=row.status, content_type=row.content_type, etag=row.etag, last_modified=row.last_modified,
        content_hash=row.content_hash, body=zlib.decompress(row.stored_body), canonical_url=row.canonical_url,
        title=row.title, description=row.description, language=row.language, jsonld=list(row.jsonld or []),
        fields=dict(row.fields or {}),
        robots=None if row.robots is None else tuple(part for part in row.robots.split(",") if part),
        url_state=row.url_state, payload_digest=row.digest, change=row.change, kind=row.url_kind,
        hook_error=dict(row.hook_error) if row.hook_error else None,
        served=(row.served_etag, row.served_last_modified) if row.served_id is not None and row.served_logged else None,
    )
