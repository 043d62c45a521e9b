"""The one exception tree harvester raises; outcomes (304, 404, disallowed, trap) are values, not these.

    HarvesterError
    ├── ConfigError (ValueError)     a setting, profile field, seed or file is invalid; names it and the fix
    ├── ContentRejected              a sitemap/feed body is unusable (DOCTYPE, bomb, over a limit)
    │   └── NotASitemap              an HTML page came back where a sitemap was asked for (a soft 404)
    ├── NothingFetched               a whole cycle got no answer from any seed host (down, or a placeholder)
    ├── ExtractorFailed              the user's extractor hook failed on every page it was given
    ├── EveryRequestFailed           a cycle sent page requests and every one failed (5xx, timeouts, refused)
    ├── CrashedTooOften              a scheduled run crashed and was retried too often: not retried again
    └── StoreError                   the frontier database refused a unit of work
        ├── DatabaseUnavailable      the server could not be reached or went away: nothing was written
        ├── WriteConflict            PostgreSQL chose this unit of work as a deadlock's victim: nothing was written
        ├── SchemaOutOfDate          the database needs ``harvester db upgrade``
        ├── InvalidRecord (ValueError) a row handed to the store is malformed; nothing was written
        ├── LeaseLost                another worker owns the host or URL now: stop, write nothing
        ├── FrontierBusy             another process is extracting from this SQLite frontier
        └── WriterGone               the discovery writer process died or stopped answering

Apart from the tree, ``Interrupted`` is a ``BaseException`` (like ``KeyboardInterrupt``): a stop this process
was asked for (``runtime.request_stop``), which no ``except Exception`` (a task retry, a per-host guard) may
swallow; an orchestrator records it as a crash, and a rerun resumes.

A fetch never raises: timeouts, size caps, redirects, refused addresses and robots.txt come back as a
``FetchResult`` with an ``ErrorClass`` (records.py), since a crawler meets them by the thousand.
"""

from __future__ import annotations


class HarvesterError(Exception):
    """Root: catch this to catch everything harvester raises."""


class ConfigError(HarvesterError, ValueError):
    """A configuration value is invalid. The message names the key or input and the accepted form."""



class ContentRejected(HarvesterError):
    """A discovery document was refused as a whole: hostile markup, a bomb, or over a protocol limit."""


class NotASitemap(ContentRejected):
    """What came back for a sitemap is an HTML page: a soft 404 of a guessed path, mostly, not an attack."""


class NothingFetched(HarvesterError):
    """A harvest or re-crawl asked its seed hosts and none answered anything (robots.txt, a sitemap, a page):
    the site is down or unreachable from here, or the seed is wrong (an unedited placeholder). Raised after
    the cycle is recorded, so a run that harvested nothing is never reported as a success."""


class ExtractorFailed(HarvesterError):
    """The user's extractor hook raised (or returned no dict) on every page of a run: a broken hook, not broken
    pages. Raised after the run is recorded; each page's URL keeps its ``hook_failed`` error."""


class EveryRequestFailed(HarvesterError):
    """A harvest or re-crawl sent page requests and not one was answered usefully: every one failed (a 5xx, a
    timeout, a refused connection, a 403, ...), none got a page, a 304, a 404/410 or a redirect. Its seed hosts
    answered something (robots.txt, a sitemap: not ``NothingFetched``), yet the run harvested nothing; it exited 0
    with the host parked (ops48). Raised after the cycle is recorded; its message names failed URLs and reasons."""


class CrashedTooOften(HarvesterError):
    """A run crashed and was retried ``harvester.flows.healing.MAX_CRASH_RETRIES`` times: something kills it every time
    (memory, a host that hangs the process); it fails for good so the retry automation stops, and says so."""


class StoreError(HarvesterError):
    """The frontier store could not complete a unit of work."""


class DatabaseUnavailable(StoreError):
    """The database server refused the connection, is shutting down or starting, or dropped the connection
    mid-transaction: the unit of work was rolled back, and the same call may succeed once the server is back
    (``runtime.db`` waits for it, within a bound)."""


class WriteConflict(StoreError):
    """PostgreSQL rolled the unit of work back to break a deadlock or a serialization conflict with a concurrent
    one (discovery and extraction writing the same new URLs at once): asking it again succeeds (``runtime.db``
    does, a few times)."""


class SchemaOutOfDate(StoreError):
    """The database schema is behind this version of harvester; run ``harvester db upgrade``."""


class InvalidRecord(StoreError, ValueError):
    """A record handed to the store is malformed; the whole batch was rejected and nothing changed."""


class LeaseLost(StoreError):
    """The lease this worker held expired and another worker took it; the result was not written."""


class FrontierBusy(StoreError):
    """Another process holds this SQLite frontier's extraction lock (``phases.extraction_lock``): a second extraction
    would interleave with it. Not retried in the same run; the message names the file and the holder."""


class WriterGone(StoreError):
    """The discovery writer child (``frontier.writer``) died, hung or broke the protocol: the batch in hand is not
    known to be written, and the caller writes it in-process (the upsert is idempotent, so a batch the child did
    commit is merely seen again)."""


class Interrupted(BaseException):
    """This process was asked to stop (``runtime.request_stop``: its orchestrating parent died): the phase sent no
    new request, wrote what was answered and handed its leases back. Not an ``Exception``, so that nothing
    retries it in this process; Prefect records the run as Crashed, and a rerun resumes from the frontier."""
