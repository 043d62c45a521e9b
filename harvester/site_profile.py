"""The site to harvest: ``SiteProfile`` (its seeds, its ``Scope``, ``ScoreRule``s and its own limits), apart from the
process's ``Settings`` (``harvester.settings``). A profile is per site and travels as a flow parameter; the
settings are per process and come from flags, ``HARVESTER_*`` and ``harvester.toml``. A bad field raises
``ConfigError`` naming it (``SiteProfile.build``).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address
from socket import inet_aton, inet_ntoa
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator

from harvester.config_errors import config_error
from harvester.settings import Group, HttpSettings, PolitenessSettings, normalized_networks

_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)", re.I)


def _odd_ipv4(host: str) -> str | None:
    """The dotted-quad a host means when it is an IPv4 address in another spelling (``0177.0.0.1``, ``0x7f.1``,
    ``2130706433``: a last label that is a number makes it an address, WHATWG URL §3.5), else None."""
    labels = host.rstrip(".").split(".")
    if not labels or not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    try:
        IPv4Address(host)
    except ValueError:
        try:
            return inet_ntoa(inet_aton(host.rstrip(".")))
        except OSError:
            return "four decimal numbers from 0 to 255 (a.b.c.d)"
    return None


SEED_REFUSAL = "is not an absolute http(s) URL like https://example.org/"
"""What a seed of another form is told, by the Prefect server's schema check and by ``SiteProfile`` alike."""

SEED_SCHEMA: dict[str, Any] = {
    "type": "string",
    # jsonschema and the UI's JavaScript read this pattern alike (no inline flags): the scheme in any case, a host.
    "if": {"not": {"pattern": r"^\s*[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s]+"}},
    # "type" beside "not": jsonschema then reports this schema's message (it holds the project's words), not
    # the pattern's "does not match '^\s*[Hh]...'"; the value typed is named, the refusal says the form wanted.
    "then": {"type": "string", "not": {"description": f"a seed {SEED_REFUSAL}"}},
}
"""A seed's check in a deployment's parameter schema: the server answers 409 when a run is created with a seed
``ftp://x/`` (the UI form, ``prefect deployment run``, the API), not the run at its start. The full check (host
characters, IPv4 spellings, the port) is ``SiteProfile``'s, at the run's start."""

_BAD_HOST_CHAR = re.compile(r"[\s\x00-\x1f\x7f<>\"{}|\\^`]")
"""Characters no host name (nor IDN) can hold: a seed with one is a typo to report, not a crawl of nothing."""


class ScoreRule(Group):
    """URLs matching ``pattern`` (a regex searched in the URL) get ``boost`` added to their score."""

    pattern: str = Field(..., min_length=1)
    boost: float = Field(..., ge=-100, le=100)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _check_regex(value)


class Scope(Group):
    """Where the crawl may go. Empty ``domains`` means the seed hosts only."""

    domains: tuple[str, ...] = Field((), description="Registrable domains allowed (with their subdomains).")
    path_prefixes: tuple[str, ...] = Field((), description="Only paths under these prefixes (if any).")
    allow_patterns: tuple[str, ...] = Field((), description="Regexes; when given, a URL must match one.")
    deny_patterns: tuple[str, ...] = Field((), description="Regexes; a matching URL is never scheduled.")

    @field_validator("allow_patterns", "deny_patterns")
    @classmethod
    def _compile_all(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_regex(value) for value in values)

    @field_validator("domains")
    @classmethod
    def _lower(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(value.strip().lower().lstrip(".") for value in values if value.strip())


class SiteProfile(Group):
    """The site to harvest: where to start (seeds), where the crawl may go (scope) and its limits."""

    name: str = Field("site", min_length=1, max_length=100, description="Label used in runs and artifacts.")
    seeds: tuple[str, ...] = Field(..., min_length=1, description="Absolute http(s) URLs to start from.",
                                   json_schema_extra={"items": SEED_SCHEMA})
    scope: Scope = Scope()
    detail_patterns: tuple[str, ...] = Field((), description="Regexes that mark detail pages (overrides).")
    listing_patterns: tuple[str, ...] = Field((), description="Regexes that mark listing pages (overrides).")
    score_rules: tuple[ScoreRule, ...] = ()
    use_sitemaps: bool = True
    use_feeds: bool = True
    use_listings: bool = True
    max_pages_per_host: int | None = Field(None, ge=1, description="Page budget per host; None: settings.")
    # A site's limits write the knobs of settings.politeness and settings.http: their bounds are those fields'.
    per_host_limit: int | None = Field(
        None, **PolitenessSettings.bounds("max_per_host_limit"),
        description="Requests in flight per host, fixed (start and ceiling); None: the adaptive limit of "
        "settings.politeness (per_host_start up to max_per_host_limit).")
    min_delay_s: float | None = Field(
        None, **PolitenessSettings.bounds("min_delay_s"),
        description="Least interval between requests; None: settings.politeness.min_delay_s.")
    user_agent: str | None = Field(
        None, **HttpSettings.bounds("user_agent"), description="Overrides the User-Agent for this site.")
    extractor: str | None = Field(
        None, pattern=r"^([A-Za-z_][\w.]*|.+\.py):[A-Za-z_]\w*$",
        description="User hook as 'module:function' or 'path/to/file.py:function' (docs/getting-started.md).",
    )
    allow_addresses: tuple[str, ...] = Field(
        (),
        description="CIDR networks this site may be fetched from although not global (an intranet's "
        "'10.20.0.0/16'), beside http.allow_addresses and the seeds' own addresses.",
    )

    @field_validator("allow_addresses")
    @classmethod
    def _networks(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return normalized_networks(values)

    @field_validator("seeds")
    @classmethod
    def _absolute_http(cls, seeds: tuple[str, ...]) -> tuple[str, ...]:
        for seed in seeds:
            parts = urlsplit(seed.strip())
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"seed {seed!r} {SEED_REFUSAL}")
            if _BAD_HOST_CHAR.search(parts.hostname):
                raise ValueError(f"seed {seed!r}: the host name {parts.hostname!r} has characters no host name has")
            if (meant := _odd_ipv4(parts.hostname)) is not None:
                raise ValueError(f"seed {seed!r}: {parts.hostname!r} is an IPv4 address in a spelling clients read "
                                 f"differently (a leading zero is octal to a browser, httpx refuses it); write "
                                 f"{meant!r}")
            try:
                parts.port  # noqa: B018 -- urllib checks the range when the port is read
            except ValueError:
                raise ValueError(f"seed {seed!r}: the port is not a number from 0 to 65535") from None
        return tuple(seed.strip() for seed in seeds)

    @field_validator("detail_patterns", "listing_patterns")
    @classmethod
    def _compile_all(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(_check_regex(value) for value in values)

    @classmethod
    def build(cls, **fields: Any) -> SiteProfile:
        """Validated construction that reports problems as ``ConfigError`` naming the field."""
        try:
            return cls(**{key: value for key, value in fields.items() if value is not None})
        except ValidationError as exc:
            raise config_error(exc, where="site profile", model=cls) from None


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None
    return value
