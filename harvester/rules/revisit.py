"""When to fetch a page again, and what one fetch means for its URL: the rules of incremental re-crawls.

Pure functions over records and an explicit ``now``: the adaptive revisit interval, a host's lastmod
truthfulness, the skip-without-request rule, and ``classify_outcome`` (a fetch → the URL's next state). All the
mapping rules live here so ``phases`` stays a thin loop; discovery documents' schedule is ``revisit_documents``.
Never fetches, never speaks SQL, never sleeps.
"""

from __future__ import annotations

import email.utils
import math
import zlib
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from harvester.records import ClaimedUrl, ErrorClass, FetchResult, UrlState
from harvester.runtime import aware, utcnow
from harvester.settings import PolitenessSettings, RevisitSettings, Settings

HOUR_S = 3600.0
DAY_S = 86_400.0

CHANGEFREQ_S: dict[str, float | None] = {
    "always": None,  # None: as often as allowed, i.e. settings.min_s
    "hourly": HOUR_S,
    "daily": DAY_S,
    "weekly": 7 * DAY_S,
    "monthly": 30 * DAY_S,
    "yearly": 365 * DAY_S,
    "never": math.inf,  # archived pages: as rarely as allowed, i.e. settings.max_s
}
"""sitemaps.org <changefreq> values as first revisit intervals ("a hint, not a command"); clamped to bounds."""

MIN_LASTMOD_CHECKS = 10
"""Default for ``RevisitSettings.lastmod_min_checks``: fewer checks say nothing about a host's lastmod."""

TRUTHFUL_THRESHOLD = 0.9
"""Default for ``RevisitSettings.lastmod_truthful``: the smoothed share of correct lastmod predictions needed."""

MAX_SKIP_AGE_S = 30 * DAY_S
"""A page skipped on its lastmod is still fetched once its last fetch is this old, so truthfulness is re-tested."""

RETRYABLE = frozenset({
    ErrorClass.TIMEOUT, ErrorClass.CONNECT, ErrorClass.PROTOCOL, ErrorClass.HTTP_5XX, ErrorClass.HTTP_429,
    ErrorClass.UNASKED_304,
})
"""Failures that may go away by themselves; the rest (4xx, too large, wrong type, hook) would fail the same way."""

PERMANENT_REDIRECTS = frozenset({301, 308})
"""RFC 9110 §15.4.2 / §15.4.9: the target is the resource's new URI; 302/303/307 leave the URI as it is."""


# --- the revisit interval -----------------------------------------------------------------------------------


LISTED_SOURCES = frozenset({"sitemap", "seed"})
"""First sources whose URLs an exhaustive list keeps naming (a sitemap, the operator's seeds): their deletions show
as they vanish from it, and a sitemap's lastmods announce their changes. URLs first found anywhere else (a feed
entry or a listing page past the part re-read each run, a link) announce neither."""


def listed(claimed: ClaimedUrl) -> bool:
    """Whether an exhaustive list named ``claimed`` first (see ``LISTED_SOURCES``; unknown counts as listed)."""
    return claimed.source is None or claimed.source in LISTED_SOURCES


def next_revisit(
    *, previous_s: float | None, changed: bool, changefreq: str | None, settings: RevisitSettings, now: datetime,
    listed: bool = True,
) -> tuple[float, datetime]:
    """(interval in seconds, when the URL is due next) after one fetch.

    Formula: the first interval (``previous_s`` None) is the sitemap changefreq's (``CHANGEFREQ_S``), else
    ``settings.default_s``; after that ``previous_s × changed_factor`` (0.5) when the content changed and
    ``previous_s × unchanged_factor`` (1.5) when it did not; always clamped to ``[min_s, max_s]``. A page
    that changes at a steady rate settles near it (multiplicative decrease, gentler increase). A URL no exhaustive
    list names (``listed`` False) is asked at least every ``unlisted_max_s``: nothing but asking it tells that it
    changed or is gone.
    """
    if previous_s is None or not math.isfinite(previous_s) or previous_s <= 0:
        interval = first_interval(changefreq, settings)
    elif changed:
        interval = previous_s * settings.changed_factor
    else:
        interval = previous_s * settings.unchanged_factor
    interval = min(max(interval, settings.min_s), settings.max_s if listed else settings.unlisted_max_s)
    return interval, due_at(now, interval, settings)


def due_at(now: datetime, interval_s: float, settings: RevisitSettings) -> datetime:
    """When a URL or document read at ``now`` is due again: its interval, less a little (``due_early_share`` of
    it, at most ``due_early_max_s``). A scheduled run reads a site over minutes or hours; the next run starts at
    the same clock time the last one started, a little before some of last time's reads are a whole interval
    old. Without the margin, whether a page is due would hang on the minute cron fires (and a page read late in
    one run would wait a whole extra period)."""
    early = min(interval_s * settings.due_early_share, settings.due_early_max_s)
    return aware(now) + timedelta(seconds=interval_s - early)


def gone_recheck_s(previous_s: float | None, settings: RevisitSettings) -> float:
    """How long a URL found gone waits before a source naming it again may make it due (docs/operations.md §4b):
    twice its last interval (a page's revisit interval, or the last recheck's when it was found still gone), at
    least ``default_s``, at most ``max_s``. A stale list that keeps naming a dead URL so costs a request at a
    doubling interval, never one a day; a newer lastmod than the time it went makes it due at once (frontier)."""
    last = previous_s if previous_s is not None and math.isfinite(previous_s) and previous_s > 0 else 0.0
    return min(max(2.0 * last, settings.default_s), settings.max_s)


def failed_recheck_s(past_limit: int, error_class: ErrorClass | None, settings: RevisitSettings) -> float:
    """How long a URL that failed ``politeness.max_attempts`` times in a row waits before its next run asks it
    again (docs/operations.md §4b): ``past_limit`` is how many runs already asked it once more and failed again
    (0 the first time). A failure that may go away by itself (``RETRYABLE``: 5xx, timeout, ...) is asked the next
    daily run (``default_s``), then after twice as long each time, at most ``max_s``; one that would fail the
    same way (a 403, too large, wrong type) after ``max_s``, as between its attempts. A site mends a broken page
    when it will, and only asking tells; the URL keeps its last good version (marked failed) meanwhile, and a
    newer lastmod makes it due at once (frontier)."""
    if error_class is not None and error_class not in RETRYABLE:
        return settings.max_s
    return min(settings.default_s * 2.0 ** min(max(past_limit, 0), 30), settings.max_s)


def first_interval(changefreq: str | None, settings: RevisitSettings) -> float:
    """The seed interval: changefreq when it is one of the seven protocol values, else ``default_s``."""
    key = (changefreq or "").strip().lower()
    if key not in CHANGEFREQ_S:
        return settings.default_s
    value = CHANGEFREQ_S[key]
    if value is None:
        return settings.min_s
    return min(max(value, settings.min_s), settings.max_s)


# --- lastmod truthfulness -----------------------------------------------------------------------------------


def truthfulness(checks: int, hits: int, *, min_checks: int = MIN_LASTMOD_CHECKS) -> float | None:
    """How often a host's lastmod announced a real change, smoothed; None below ``min_checks`` checks.

    A check is a re-fetch that found the content changed, of a URL whose lastmod made a prediction; a hit is a
    change the lastmod announced (newer than our copy). This is what skipping on "not newer" risks: the share
    of changes a skip would miss is ``1 - truthfulness``. Counting correct "unchanged" predictions too would
    let the base rate speak instead (where 5% of pages change a day, a lastmod that never moves scores 95%).
    Laplace smoothing ``(hits + 1) / (checks + 2)`` keeps a short perfect record from reading as certainty.
    """
    if checks < max(min_checks, 1):
        return None
    hits = min(max(hits, 0), checks)
    return (hits + 1) / (checks + 2)


def newer_than_copy(lastmod: datetime | None, copy_last_modified: str | None) -> bool | None:
    """Whether a published date (sitemap or index lastmod, Atom ``updated``) is newer than our copy, judged on
    the server's own clock: against the Last-Modified our copy was served with, so clock skew between the site
    and us never enters. None when either is missing or unparsable.

    A lastmod of exactly midnight UTC is read as a date without a time (W3C Datetime allows ``2026-01-06``), so as
    the end of that day, even one equal to that Last-Modified (a server dating to the day): a change later that day
    is never taken for "not newer", nor skipped. This is the reading that decides skipping a request; whether a
    304 contradicts the lastmod is judged the other way round (``contradicts_304``).
    """
    copy = http_time(copy_last_modified)
    if lastmod is None or copy is None:
        return None
    moment = aware(lastmod)
    if moment.hour == moment.minute == moment.second == moment.microsecond == 0:
        moment += timedelta(days=1)
    return moment > copy


def http_time(value: str | None) -> datetime | None:
    """An HTTP date (RFC 9110 §5.6.7) as an aware datetime; None when absent or unparsable."""
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return aware(parsed)


def lastmod_predicts_change(
    lastmod: datetime | None, last_fetched_at: datetime | None, copy_last_modified: str | None = None,
    lastmod_until: datetime | None = None,
) -> bool | None:
    """What the lastmod claims about a URL since our copy: changed (True), not (False), or no claim (None).

    A reduced-precision lastmod names a period (``lastmod`` its start, ``lastmod_until`` its end: "2026-12-09" is
    that whole day, a time without a zone its readings from UTC+14 to UTC-12): while its end is later than our last
    fetch, the change it dates may be after that fetch, so it claims a change (True) whatever its start says.
    Judged by the start, a page edited on the 9th after our fetch at 05:00 and dated "2026-12-09" read as
    unchanged, and a host that had proved its lastmods truthful completed it without a request (review47); such a
    change, once fetched, counted against the host's truthfulness as a change the lastmod failed to announce.

    Otherwise judged against our copy's Last-Modified when it has one (``newer_than_copy``: the server's clock on
    both sides), else against the time we fetched it (our clock against theirs: skew enters, and a site whose dates
    lag ours would always read as "unchanged"). The period's end is never judged against the Last-Modified: a time
    without a zone ends at its reading at UTC-12, later than the instant the site meant (its Last-Modified) for
    every site east of UTC-12, so the page would read as changed for good.
    """
    if lastmod is not None and lastmod_until is not None and last_fetched_at is not None and (
            aware(lastmod_until) > aware(last_fetched_at)):
        return True
    by_copy = newer_than_copy(lastmod, copy_last_modified)
    if by_copy is not None:
        return by_copy
    if lastmod is None or last_fetched_at is None:
        return None
    return aware(lastmod) > aware(last_fetched_at)


def contradicts_304(
    lastmod: datetime | None, last_fetched_at: datetime | None, copy_last_modified: str | None = None
) -> bool:
    """Whether a 304 to our copy contradicts the lastmod: only when the lastmod is surely newer than that copy.

    Against the copy's Last-Modified when it has one, else our fetch time, as ``lastmod_predicts_change``, but a
    midnight lastmod is read as the moment it names, not as the end of its day: a date of our copy's own day
    (equal to its Last-Modified, or earlier) is no claim of a later edit. Reading it as the end of the day made
    every unchanged page of a site that dates its lastmods at midnight (the lastmod equal to the Last-Modified)
    answer a "contradicting" 304, asked again in full each run: a 304 is believed unless the lastmod surely says
    otherwise, so a re-ask (``reask_304``) costs a download only where a lie is plausible.
    """
    if lastmod is None:
        return False
    copy = http_time(copy_last_modified)
    mark = copy if copy is not None else aware(last_fetched_at)
    return mark is not None and aware(lastmod) > mark


def may_skip(
    *,
    lastmod: datetime | None,
    last_fetched_at: datetime | None,
    truthfulness: float | None,
    threshold: float = TRUTHFUL_THRESHOLD,
    now: datetime | None = None,
    max_age_s: float = MAX_SKIP_AGE_S,
    copy_last_modified: str | None = None,
    lastmod_until: datetime | None = None,
) -> bool:
    """True when a due URL may be treated as unchanged without any request.

    Only when its lastmod is known and not newer than our copy (``lastmod_predicts_change``: a reduced-precision
    lastmod whose period, ending at ``lastmod_until``, ends after our last fetch never is; discovery clears
    the lastmod of a URL its re-read sitemap no longer lists, so a vanished page is asked and found gone), AND
    the host has proven its lastmod truthful (``truthfulness`` ≥ ``threshold``; None = not enough checks =
    never skip), AND the last fetch is younger than ``max_age_s`` (so every page is still verified now and
    then, and a host that stops updating its lastmod is caught).
    """
    predicted = lastmod_predicts_change(lastmod, last_fetched_at, copy_last_modified, lastmod_until)
    if predicted is None or predicted or truthfulness is None or truthfulness < threshold:
        return False
    if last_fetched_at is None:
        return False
    age = (aware(now) if now is not None else utcnow()) - aware(last_fetched_at)
    return age.total_seconds() < max_age_s


REASK_PROBES = 3
"""Contradicting 304s a host has asked again in full before its record decides (``reask_304``)."""


def reask_304(asked: int, changed: int, *, pending: int = 0, probes: int = REASK_PROBES) -> bool:
    """Whether a 304 that contradicts a lastmod newer than our copy is asked again without validators.

    ``asked``/``changed``: the host's earlier such re-asks (stored and of this run, each counted when it was
    decided) and how many brought a changed page (a full answer read in a later run than its 304, or never, counts
    as none: the host leans to believing its 304s, as before re-asks existed). A server may keep a validator across
    an edit (a template's ETag, an inode's), so its 304 hides a change the lastmod announced; a sitemap may instead
    stamp every URL with today's date, and asking all of its 304s again would undo the savings of conditional
    requests. So every contradicting 304 of a host is asked again until ``probes`` re-asks were decided, then as
    long as at least half of them found a change (its lastmod is right, its 304s are not); once most found none,
    its 304s are believed (the caller still probes one a run, so a host that
    mends its ways is noticed).

    ``pending``: of ``asked``, the re-asks of this run whose answers have not come yet. They are no evidence either
    way, so the share is judged on the others; but they are spent: once ``probes`` re-asks were decided, no more
    are until their answers came, so a burst of 304s read before the first answer costs ``probes`` downloads, not
    one per 304 (a stranger's test saw 44 a host of 200 pages)."""
    if asked < probes:
        return True
    answered = asked - pending
    if answered < probes:
        return False
    return 2 * changed >= answered


def spot_check(url: str, now: datetime, share: float) -> bool:
    """Whether ``url`` is among the ``share`` of pages asked anyway although the lastmod says unchanged, so a
    trusted host's lastmod keeps being tested where it matters (a lastmod that stops moving on changes shows up
    as misses). Deterministic per URL and UTC day, a different sample each day."""
    if share <= 0:
        return False
    digest = zlib.crc32(f"{aware(now).date().isoformat()} {url}".encode())
    return digest % 10_000 < share * 10_000


# --- one fetch → the URL's next state -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one fetch means for its URL; the caller copies it into a ``Completion``.

    ``content_hash`` is the hash the URL should hold afterwards (None: keep nothing, e.g. a moved URL, so the
    target is not taken for a duplicate of its old address). ``counter`` names the outcome for a run's own
    diagnostics (``text_changed``: the main text differs from the stored version's; ``text_new``: there was none to
    differ from, a first fetch); what a cycle changed is counted by the store (``FrontierStore.cycle_counts``),
    never from these.
    """

    state: UrlState
    changed: bool
    counter: str
    next_fetch_at: datetime | None = None
    revisit_s: float | None = None
    error_class: ErrorClass | None = None
    error: str | None = None
    store_page: bool = False
    expand_links: bool = False
    moved_to: str | None = None
    content_hash: str | None = None
    retry: bool = False


def classify_outcome(
    claimed: ClaimedUrl,
    result: FetchResult,
    new_hash: str | None,
    *,
    settings: Settings,
    now: datetime,
    hook_error: str | None = None,
    duplicate_of: int | None = None,
) -> Outcome:
    """The URL's next state after ``result``. The rules, in order:

    - 304 to a conditional request → DONE, unchanged, no body stored, interval grows. A 304 to a request that
      sent no validator names no copy of ours (RFC 9110 §15.4.5: it answers a conditional GET): nothing arrived,
      so it is a failure of that fetch (``UNASKED_304``, retried after a back-off), never a stored state.
    - 404 / 410 → GONE (the store keeps the row and stamps ``gone_at``); never promoted like a revisit, but
      ``next_fetch_at`` says when a source naming it again may make it due (``gone_recheck_s``).
    - robots refused → DISALLOWED; a redirect out of scope or into a trap → SKIPPED.
    - a failure → FAILED with ``next_fetch_at`` set; the store counts the attempt and queues the URL again at
      that time while attempts stay below ``politeness.max_attempts``; then it stays FAILED (next_fetch_at None
      here), and the store sets when a later run asks it once more (``failed_recheck_s``, growing each time).
      Retryable failures (timeout, connect, 5xx, 429; ``retry`` True) come back after a back-off
      (Retry-After when the server gave one, else ``backoff_base_s × 2^attempts``, capped by
      ``backoff_max_s``); the others (4xx, too large, wrong type) only after ``revisit.max_s``, since they
      would fail the same way now. A parked host (no request sent) → QUEUED, no attempt counted.
    - 2xx reached through permanent redirects only (301/308) → DONE, ``moved_to`` the final URL (the caller
      enqueues it), nothing stored here, revisited rarely (``max_s``). The same for a permanent redirect left
      unfollowed because its target was already read in this run (``FetchResult.unfollowed``): the redirect's
      own answer says where the URL moved, and the target's copy is its own URL's.
    - 2xx whose main content is held by another URL (``duplicate_of``) → DUPLICATE, links not expanded.
    - 2xx with the known content hash → DONE, unchanged; with a new hash → DONE, changed, links expanded,
      interval shrinks. Either way the payload goes to the store (``store_page``), which keeps it as a new version
      when its digest differs from the stored one's: the main text decides the revisit, never what is kept.
    - 2xx with a failed hook → as any 2xx (DONE, the page stored, links expanded), labelled HOOK_FAILED with
      the hook's error (counter ``hook_failed``): the request succeeded, the hook did not. The caller keeps no
      validators on the URL (pass etag/last_modified None), so its next fetch is unconditional and the (fixed)
      hook runs again; the phase makes such URLs due at its next run (``FrontierStore.due_hook_retries``).
    """
    status = result.status
    if status == 304:
        if not (claimed.etag or claimed.last_modified):
            unasked = replace(result, error_class=ErrorClass.UNASKED_304,
                              error="304 Not Modified to a request that sent no validator")
            return _failure(claimed, unasked, settings, now)
        return _done(claimed, settings, now, changed=False, counter="not_modified", content_hash=claimed.content_hash)
    if status in (404, 410):
        recheck_s = gone_recheck_s(claimed.revisit_s, settings.revisit)
        return Outcome(state=UrlState.GONE, changed=claimed.content_hash is not None, counter="answered_gone",
                       revisit_s=recheck_s, next_fetch_at=due_at(now, recheck_s, settings.revisit))
    if result.unfollowed and result.error_class is None and is_permanent_move(result):
        return _moved(result, settings, now)
    if result.error_class is not None or status is None or not 200 <= status < 300:
        return _failure(claimed, result, settings, now)
    if is_permanent_move(result):
        return _moved(result, settings, now)
    if duplicate_of is not None:
        return Outcome(state=UrlState.DUPLICATE, changed=False, counter="duplicate", content_hash=new_hash)
    changed = new_hash is not None and new_hash != claimed.content_hash
    if not changed:
        done = _done(claimed, settings, now, changed=False, counter="text_same",
                     content_hash=new_hash or claimed.content_hash, store_page=True)
    else:
        # A first fetch (no text stored to differ from) is new, not changed: a first harvest counted every page
        # ``text_changed``.
        counter = "text_changed" if claimed.content_hash is not None else "text_new"
        done = _done(claimed, settings, now, changed=True, counter=counter, content_hash=new_hash,
                     store_page=True, expand_links=True)
    if hook_error is not None:  # the fetch and the page are good: only the hook's fields are missing
        return replace(done, counter="hook_failed", error_class=ErrorClass.HOOK_FAILED, error=hook_error)
    return done


def is_permanent_move(result: FetchResult) -> bool:
    """Every hop was 301/308 and the fetch ended elsewhere. Unknown hop statuses count as temporary."""
    return (
        bool(result.redirects)
        and len(result.redirect_statuses) == len(result.redirects)
        and all(code in PERMANENT_REDIRECTS for code in result.redirect_statuses)
        and result.final_url != result.url
    )


def _moved(result: FetchResult, settings: Settings, now: datetime) -> Outcome:
    return Outcome(
        state=UrlState.DONE, changed=False, counter="moved", next_fetch_at=aware(now) + timedelta(
            seconds=settings.revisit.max_s), revisit_s=settings.revisit.max_s, moved_to=result.final_url,
    )


def retry_delay_s(attempts: int, retry_after_s: float | None, settings: PolitenessSettings) -> float:
    """Back-off before attempt ``attempts + 1``: exponential, never shorter than the server's Retry-After."""
    delay: float = settings.backoff_base_s * 2.0 ** min(max(attempts, 0), 30)
    if retry_after_s is not None and math.isfinite(retry_after_s):
        delay = max(delay, retry_after_s)
    return min(delay, settings.backoff_max_s)


def _done(
    claimed: ClaimedUrl, settings: Settings, now: datetime, *, changed: bool, counter: str,
    content_hash: str | None, store_page: bool = False, expand_links: bool = False,
) -> Outcome:
    revisit_s, next_at = next_revisit(
        previous_s=claimed.revisit_s, changed=changed, changefreq=claimed.changefreq, settings=settings.revisit,
        now=now, listed=listed(claimed),
    )
    return Outcome(
        state=UrlState.DONE, changed=changed, counter=counter, next_fetch_at=next_at, revisit_s=revisit_s,
        store_page=store_page, expand_links=expand_links, content_hash=content_hash,
    )


def _failure(claimed: ClaimedUrl, result: FetchResult, settings: Settings, now: datetime) -> Outcome:
    politeness = settings.politeness
    error_class = result.error_class or _class_for_status(result.status)
    error = result.error or (f"HTTP {result.status}" if result.status is not None else error_class.value)
    if error_class is ErrorClass.ROBOTS_DISALLOWED:
        return Outcome(state=UrlState.DISALLOWED, changed=False, counter="disallowed", error_class=error_class,
                       error=error)
    if error_class in (ErrorClass.OUT_OF_SCOPE, ErrorClass.TRAP):
        return Outcome(state=UrlState.SKIPPED, changed=False, counter="skipped", error_class=error_class, error=error)
    if error_class is ErrorClass.ADDRESS_REFUSED:
        # Nothing was sent, and a retry would be refused the same way: a final state, like an out-of-scope URL.
        return Outcome(state=UrlState.SKIPPED, changed=False, counter="address_refused", error_class=error_class,
                       error=error)
    if error_class.value == "parked":
        # The host is parked and no request was sent: QUEUED keeps ``attempts`` as it is (the store counts an
        # attempt only for FAILED), so parking never turns into a failure.
        delay = retry_delay_s(0, result.retry_after_s, politeness)
        return Outcome(
            state=UrlState.QUEUED, changed=False, counter="parked", retry=True, error_class=error_class, error=error,
            next_fetch_at=aware(now) + timedelta(seconds=delay), content_hash=claimed.content_hash,
        )
    if claimed.attempts + 1 >= politeness.max_attempts:
        return Outcome(state=UrlState.FAILED, changed=False, counter="failed", error_class=error_class, error=error,
                       content_hash=claimed.content_hash)
    # FAILED below max_attempts: the store counts the attempt and queues the URL again at next_fetch_at.
    if error_class in RETRYABLE:
        delay = retry_delay_s(claimed.attempts, result.retry_after_s, politeness)
        counter = "retry"
    else:
        delay = settings.revisit.max_s  # would fail the same way now: try again only after the longest interval
        counter = "failed"
    return _failed(claimed, error_class, error, now + timedelta(seconds=delay), counter=counter,
                   retry=error_class in RETRYABLE)


def _failed(
    claimed: ClaimedUrl, error_class: ErrorClass, error: str, next_at: datetime | None, *, counter: str, retry: bool
) -> Outcome:
    return Outcome(state=UrlState.FAILED, changed=False, counter=counter, error_class=error_class, error=error,
                   next_fetch_at=aware(next_at) if next_at else None, retry=retry, content_hash=claimed.content_hash)


def _class_for_status(status: int | None) -> ErrorClass:
    if status is None:
        return ErrorClass.CONNECT
    if status == 429:
        return ErrorClass.HTTP_429
    if status >= 500:
        return ErrorClass.HTTP_5XX
    if status >= 400:
        return ErrorClass.HTTP_4XX
    return ErrorClass.BAD_CONTENT  # a 1xx/3xx that was not followed: nothing usable arrived



__all__ = [
    "CHANGEFREQ_S",
    "RETRYABLE",
    "Outcome",
    "classify_outcome",
    "contradicts_304",
    "failed_recheck_s",
    "first_interval",
    "gone_recheck_s",
    "http_time",
    "is_permanent_move",
    "lastmod_predicts_change",
    "may_skip",
    "newer_than_copy",
    "next_revisit",
    "retry_delay_s",
    "spot_check",
    "truthfulness",
]
