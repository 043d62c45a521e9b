"""The one exception tree harvester raises; outcomes (304, 404, disallowed, trap) are values, not these.

    HarvesterError
    ├── ConfigError (ValueError)     a setting, profile field, seed or file is invalid; names it and the fix
    ├── FetchError                   one bounded fetch could not finish (``retryable`` decided where raised)
    │   ├── FetchTimeout             the total deadline, or a connect/read timeout, ran out
    │   ├── BodyTooLarge             Content-Length or the streamed/decoded bytes passed the cap
    │   ├── TooManyRedirects         more hops than allowed, or a loop
    │   └── ConnectFailed            refused, reset, DNS, protocol error
    ├── ContentRejected              a sitemap/feed/robots body is unusable (DOCTYPE, bomb, over a limit)
    └── StoreError                   the frontier database refused a unit of work
        ├── DatabaseUnavailable      the server could not be reached or went away: nothing was written
        ├── SchemaOutOfDate          the database needs ``harvester db upgrade``
        ├── InvalidRecord (ValueError) a row handed to the store is malformed; nothing was written
        └── LeaseLost                another worker owns the host or URL now: stop, write nothing
"""

from __future__ import annotations


class HarvesterError(Exception):
    """Root: catch this to catch everything harvester raises."""


class ConfigError(HarvesterError, ValueError):
    """A configuration value is invalid. The message names the key or input and the accepted form."""


class FetchError(HarvesterError):
    """One fetch failed in a way the caller may retry later (``retryable``) or record as final."""

    def __init__(self, message: str, *, url: str, retryable: bool) -> None:
        super().__init__(message)
        self.url = url
        self.retryable = retryable


class FetchTimeout(FetchError):
    """The whole-fetch deadline (headers and body) or a connect timeout ran out."""


class BodyTooLarge(FetchError):
    """The body passed the size cap, announced or while streaming/decoding."""


class TooManyRedirects(FetchError):
    """The redirect chain was longer than the cap or came back to a URL already visited."""


class ConnectFailed(FetchError):
    """The connection could not be made or broke (refused, reset, DNS, protocol error)."""


class ContentRejected(HarvesterError):
    """A discovery document was refused as a whole: hostile markup, a bomb, or over a protocol limit."""


class NotASitemap(ContentRejected):
    """What came back for a sitemap is an HTML page: a soft 404 of a guessed path, mostly, not an attack."""


class StoreError(HarvesterError):
    """The frontier store could not complete a unit of work."""


class DatabaseUnavailable(StoreError):
    """The database server refused the connection, is shutting down or starting, or dropped the connection
    mid-transaction: the unit of work was rolled back, and the same call may succeed once the server is back
    (``runtime.db`` waits for it, within a bound)."""


class SchemaOutOfDate(StoreError):
    """The database schema is behind this version of harvester; run ``harvester db upgrade``."""


class InvalidRecord(StoreError, ValueError):
    """A record handed to the store is malformed; the whole batch was rejected and nothing changed."""


class LeaseLost(StoreError):
    """The lease this worker held expired and another worker took it; the result was not written."""
