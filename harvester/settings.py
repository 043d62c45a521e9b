"""Every default, unit and bound of a harvester process (the site to harvest is ``harvester.site_profile``).

``Settings`` is built once at the edge (CLI, flow parameters) and passed down; library code never reads the
environment. Precedence, highest first: explicit arguments (CLI flags), ``HARVESTER_*`` environment,
``harvester.toml`` (or ``--config FILE``), defaults. A bad value raises ``ConfigError`` naming the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from harvester.config_errors import config_error, misspelled_env
from harvester.errors import ConfigError

Network = IPv4Network | IPv6Network
"""An allowed address range (``http.allow_addresses``, a profile's ``allow_addresses``)."""


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """CIDR networks (a bare address is one host). Raises ValueError naming the first bad value and the form
    accepted; host bits set (``10.0.0.5/8``) are an error, with the network meant suggested."""
    out: list[Network] = []
    for value in values:
        text = value.strip()
        try:
            out.append(ip_network(text, strict=True))
        except ValueError:
            try:
                meant = ip_network(text, strict=False)
            except ValueError:
                raise ValueError(
                    f"{value!r} is not an IP network; write CIDR like '10.0.0.0/8', 'fd00::/8' or one address"
                ) from None
            raise ValueError(f"{value!r} has host bits set; did you mean {str(meant)!r}?") from None
    return tuple(out)


DEFAULT_DATABASE_URL = "sqlite:///.harvester/harvester.db"
"""An embedded SQLite file under the working directory: nothing to install for a first harvest."""



def database_url_of(value: str) -> str:
    """A database as users type it: a URL (``postgresql://...``, ``sqlite:///x.db``) as it is, anything without
    ``://`` as the path of a SQLite file (``crawl.db``, ``~/crawls/a.db``), so ``--db crawl.db`` works as
    ``--db sqlite:///crawl.db`` does."""
    text = value.strip()
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower().split("+")[0] == "sqlite" and rest.startswith("/") and not rest[1:].split("?")[0]:
            # sqlite:/// with its path left out. SQLAlchemy reads it as a database in memory (as it does
            # ``sqlite://``, kept for who means that): every connection a new empty one, so the first query failed
            # with "no such table: urls", naming nothing the user could fix.
            raise ValueError(
                f"{text!r} names no file (a SQLite URL is sqlite:/// and then the file's path); write "
                "sqlite:///crawl.db (relative to the working directory), sqlite:////srv/harvester/crawl.db "
                "(absolute: four slashes), or just the path (--db crawl.db)")
        if scheme.lower().split("+")[0] == "sqlite" and rest and not rest.startswith(("/", "?")):
            # sqlite://crawl.db: SQLAlchemy takes "crawl.db" for a host and raised ArgumentError at the first
            # connection, a traceback (exit 1) where every other bad database is one line (exit 2).
            named = rest.split("?")[0]
            raise ValueError(
                f"{text!r} is not a SQLite URL (two slashes: the file's path must follow sqlite:///); write "
                f"sqlite:///{named} (relative to the working directory; an absolute path takes four slashes, "
                f"sqlite:////srv/harvester/crawl.db), or just the path (--db {named})")
        return text
    path = Path(text).expanduser()
    if path.is_dir():
        raise ValueError(f"{text!r} is a directory; name a SQLite file in it ({str(path / 'harvester.db')!r}) or "
                         "give a database URL (postgresql://user@host/db)")
    if any(ch in str(path) for ch in "?#"):
        raise ValueError(f"{text!r}: a SQLite file name with '?' or '#' cannot be given as a path; rename the file")
    return f"sqlite:///{path}"


DEFAULT_USER_AGENT = "harvester/0.1 (+https://harvester.invalid/contact; set HARVESTER_HTTP__USER_AGENT)"
"""Identifies the crawler and where its operator can be reached. Operators should set their own contact."""

DEFAULT_CONFIG_FILE = Path("harvester.toml")



MAX_URL_LENGTH = 2048
"""Longest URL the frontier stores (its URL columns are VARCHAR(2048): a longer bound needs a migration), and so the
most ``urls.max_url_length`` may let through the scope: the two were one number in two homes, and a raised setting
admitted URLs whose whole batch the store refused."""

SITEMAP_PROTOCOL_MAX_BYTES = 52_428_800
"""sitemaps.org: a sitemap file may hold up to 50 MiB uncompressed (and 50,000 URLs): a file inside both is read
in full; ``max_sitemap_bytes`` cuts only above them."""

SITEMAP_PROTOCOL_MAX_URLS = 50_000
"""sitemaps.org: URLs per sitemap file, and sitemaps per index."""

DEFAULT_MAX_SITEMAP_BYTES = SITEMAP_PROTOCOL_MAX_BYTES + 2**20
"""The protocol's 50 MiB plus 1 MiB of headroom (a byte-order mark, white space, a generator that counts its
limit in characters): the decompressed cap, and the fetch's body cap for sitemaps (wire bytes, gzip'd or not)."""

DEFAULT_TRACKING_PARAMS: tuple[str, ...] = (
    "utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content", "utm_id", "utm_name",
    "gclid", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "_gl",
    "igshid", "ref", "ref_src", "spm", "_hsenc", "_hsmi", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id",
)
"""Query parameters that only say where a click came from; removed from the canonical form (``ref`` included:
far more sites use it for ``?ref=sidebar`` than for content; a site that does not can set its own list)."""

DEFAULT_SESSION_PARAMS: tuple[str, ...] = (
    "sid", "sessionid", "session_id", "phpsessid", "jsessionid", "aspsessionid", "cfid", "cftoken",
)
"""Session-id parameters: a URL carrying one is a trap (a fresh spelling of the same page per visit). Not ``s``:
WordPress's search parameter, which sites list in their own sitemaps."""

DEFAULT_PRESENTATION_PARAMS: tuple[str, ...] = (
    "sort", "order", "orderby", "sort_by", "print", "lang_switch",
)
"""Parameters that only re-order or re-print the same content; they are dropped from the canonical form, which
is also the URL fetched. Not ``view``, ``format``, ``layout`` or ``display``: on many sites they select the content
itself (Joomla's ``option=com_content&view=article``, ``format=pdf``), and dropping them fetched another page."""

DEFAULT_LISTING_PRESENTATION_PARAMS: tuple[str, ...] = (
    "view", "display", "layout", "mode", "per_page", "perpage", "page_size", "pagesize", "items_per_page",
    "limit", "show", "columns",
)
"""Parameters that re-present a listing page (layout, page size) without selecting other items. A listing link
carrying one is not crawled when the listing without it was read (``rules.facets``); unlike
``presentation_params`` they stay in every canonical key, since on some sites they select the content itself."""

DEFAULT_FACET_PARAMS: tuple[str, ...] = (
    "color", "colour", "size", "brand", "price", "filter", "facet", "material", "min_price", "max_price",
)
"""Facet parameters: combinations multiply without bound, so URLs carrying many of them are traps."""


_toml_file: ContextVar[Path | None] = ContextVar("harvester_toml_file", default=None)


class Group(BaseModel):
    """A group of settings (and the site profile's): unknown keys are refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def bounds(cls, name: str) -> dict[str, Any]:
        """The bounds of field ``name`` (``ge``, ``le``, ``gt``, ``lt``, ``min_length``, ``max_length``) as ``Field``
        keywords: for another entry that writes the same knob (a site's profile, a flow run's overrides, a CLI
        flag), so that its bounds have one home, this field (shared/STYLE.md §10)."""
        found: dict[str, Any] = {}
        for item in cls.model_fields[name].metadata:
            for key in ("ge", "le", "gt", "lt", "min_length", "max_length"):
                if getattr(item, key, None) is not None:
                    found[key] = getattr(item, key)
        return found


class HttpSettings(Group):
    user_agent: str = Field(DEFAULT_USER_AGENT, min_length=8, description="User-Agent with a contact URL.")
    timeout_s: float = Field(30.0, gt=0, le=600, description="Deadline for a whole fetch: headers and body.")
    connect_timeout_s: float = Field(10.0, gt=0, le=120, description="Deadline for one TCP/TLS connect.")
    max_body_bytes: int = Field(10 * 2**20, gt=0, description="Pages larger than this are cut off and failed.")
    max_redirects: int = Field(5, ge=0, le=20, description="Redirect hops followed, each re-checked.")
    allowed_content_types: tuple[str, ...] = Field(
        ("text/html", "application/xhtml+xml"),
        min_length=1,
        description="Media types kept for detail and listing pages; others are failed as bad_content_type.",
    )
    transport: Literal["aiohttp", "httpcore", "http2"] = Field(
        "aiohttp", description="httpx transport; aiohttp measured cheapest per request (docs/internals.md)."
    )
    allow_addresses: tuple[str, ...] = Field(
        (),
        description="CIDR networks fetched although loopback, private, link-local or otherwise not global "
        "(e.g. '10.0.0.0/8'); the addresses the seeds resolve to are allowed anyway. '0.0.0.0/0' and '::/0' "
        "switch the address policy off.",
    )

    @field_validator("allow_addresses")
    @classmethod
    def _networks(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        return normalized_networks(values)


RENAMED_PER_HOST = (
    "politeness.per_host_limit was renamed politeness.per_host_start (the adaptive limit's start; "
    "max_per_host_limit stays its ceiling); to fix a site's limit instead, set per_host_limit in its profile "
    "(a sites file's section, or --per-host)"
)
"""The one key whose meaning split in two (issue 35): a stored file or variable that still names it is refused
with this, rather than read as the start while the profile's ``per_host_limit`` fixes the limit."""


class PolitenessSettings(Group):
    """Every site's politeness defaults; a site's own limits are its profile's (``SiteProfile.per_host_limit``,
    ``min_delay_s``), and ``GateConfig.from_settings`` is where the two meet."""

    per_host_start: int = Field(2, ge=1, le=64, description="Requests in flight per host at the start (adaptive).")
    max_per_host_limit: int = Field(4, ge=1, le=64, description="Ceiling AIMD may raise the per-host limit to.")
    max_active_hosts: int = Field(64, ge=1, le=10_000, description="Hosts fetched at once; others wait turns.")
    min_delay_s: float = Field(0.0, ge=0, le=3600, description="Least interval between requests to a host.")
    max_crawl_delay_s: float = Field(
        60.0, ge=0, description="robots.txt Crawl-delay above this parks the host instead of crawling it slowly."
    )
    slow_response_s: float = Field(5.0, gt=0, description="A response slower than this halves the limit.")
    backoff_base_s: float = Field(
        1.0, gt=0, description="First back-off after a 429/503 without Retry-After (a 500 or connect failure: after "
        "the third in a row); it doubles with each one more.",
    )
    backoff_max_s: float = Field(
        120.0, gt=0, description="Longest back-off or Retry-After a run waits for; a longer one parks the host for "
        "the rest of the run (a Retry-After: for that long), so a refusing host never holds a daily run up.",
    )
    park_after_failures: int = Field(
        5, ge=1, description="Consecutive connect/protocol/timeout/5xx failures (503 included) after which a host is "
        "parked for the rest of its run.",
    )
    park_s: float = Field(
        86_400.0, gt=0, le=30 * 86_400.0,
        description="Longest a park set by a phase run outside any cycle lasts. A park ends with its cycle: the next "
        "harvest/recrawl asks the host again (robots.txt first), whatever its cadence; one caused by a Retry-After "
        "beyond backoff_max_s lasts that Retry-After instead.",
    )
    max_attempts: int = Field(
        3, ge=1, le=20, description="Attempts per URL in a run before it is marked failed (a later run asks it again)."
    )

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "per_host_limit" in data:
            raise ValueError(RENAMED_PER_HOST)
        return data


PRODUCT_TOKEN_PATTERN = r"^[A-Za-z_-]+$"  # noqa: S105 (a regex, not a secret)
"""RFC 9309 §2.2.1: a crawler's product token holds only letters, underscores and hyphens."""


class RobotsSettings(Group):
    product_token: str | None = Field(
        None, pattern=PRODUCT_TOKEN_PATTERN,
        description="RFC 9309 §2.2.1: the name robots.txt groups, X-Robots-Tag and <meta> name this crawler by "
        "(letters, '_' and '-'). None: read from the User-Agent (its first product, or the one after "
        "'compatible;' in a browser-style UA).",
    )
    max_bytes: int = Field(500 * 1024, gt=0, description="RFC 9309 §2.5: parse at least 500 KiB; more is cut.")
    cache_s: float = Field(86_400.0, gt=0, le=86_400.0, description="RFC 9309 §2.4: at most 24 h.")
    error_cache_s: float = Field(600.0, gt=0, description="A 5xx/unreachable robots.txt is retried after this.")
    max_redirects: int = Field(5, ge=0, le=10, description="RFC 9309 §2.3.1.2: follow at least five.")
    connect_attempts: int = Field(
        3, ge=1, le=10, description="Tries of a robots.txt fetch that no answer came to (connection refused, reset "
        "or dropped) before it is taken as unreachable (RFC 9309 §2.3.1.4) and the host parked for error_cache_s.",
    )
    connect_retry_s: float = Field(
        1.0, ge=0, le=60, description="Wait before the second try of robots.txt after no answer came; it doubles "
        "with each further try.",
    )


class UrlSettings(Group):
    tracking_params: tuple[str, ...] = DEFAULT_TRACKING_PARAMS
    session_params: tuple[str, ...] = DEFAULT_SESSION_PARAMS
    presentation_params: tuple[str, ...] = DEFAULT_PRESENTATION_PARAMS
    facet_params: tuple[str, ...] = DEFAULT_FACET_PARAMS
    listing_presentation_params: tuple[str, ...] = DEFAULT_LISTING_PRESENTATION_PARAMS
    max_url_length: int = Field(MAX_URL_LENGTH, ge=64, le=MAX_URL_LENGTH,
                                description="Longer URLs are traps; at most what the frontier stores.")
    max_path_depth: int = Field(12, ge=1, description="More path segments than this is a trap.")
    max_repeated_segments: int = Field(2, ge=1, description="One segment repeated more often is a trap.")
    max_facets: int = Field(1, ge=0, description="More facet parameters than this in one URL is a trap.")
    max_calendar_urls: int = Field(20, ge=1, description="Date-shaped URLs kept per host path pattern.")
    max_facet_urls: int = Field(20, ge=1, description="Faceted URLs (any facet parameter) kept per host and path.")


class DiscoverySettings(Group):
    known_sitemap_paths: tuple[str, ...] = ("/sitemap.xml", "/sitemap_index.xml", "/sitemap.xml.gz")
    max_sitemap_bytes: int = Field(
        DEFAULT_MAX_SITEMAP_BYTES, gt=0,
        description="Decompressed cap per sitemap, and the fetch's body cap for one (protocol limit 50 MiB: "
        "52,428,800 bytes; the default adds 1 MiB of headroom).",
    )
    max_sitemap_urls: int = Field(
        SITEMAP_PROTOCOL_MAX_URLS, gt=0, description="URLs kept per sitemap file (protocol limit 50,000)."
    )
    sitemap_min_rate_bytes_s: int = Field(
        262_144, ge=16_384,
        description="The slowest transfer rate a sitemap is still read in full at: its whole-fetch deadline is "
        "max_sitemap_bytes at this rate (51 MiB at 256 KiB/s: 204 s), never less than http.timeout_s nor more than "
        "10 times the larger of http.timeout_s and 30 s (300 s by default). A page's "
        "30 s cut a legal 52 MB sitemap on a 1.3 MB/s link at 39 MB, every time; a stalled answer is still cut by "
        "http.timeout_s between two reads.",
    )
    max_sitemap_depth: int = Field(4, ge=1, le=10, description="Index nesting followed.")
    max_sitemaps_per_host: int = Field(2_000, ge=1, description="Sitemap files fetched per host per run.")
    max_feed_bytes: int = Field(10 * 2**20, gt=0)
    max_feed_pages: int = Field(
        100, ge=1, le=10_000, description="Documents of one feed (head, RFC 5005 pages or archives) read per run."
    )
    listing_max_depth: int = Field(3, ge=0, le=20, description="Listing hops from a seed.")
    listing_page_budget: int = Field(200, ge=0, description="Listing pages fetched per host per run.")
    batch_size: int = Field(5_000, ge=1, le=100_000, description="URLs per frontier upsert.")
    writer_process: bool = Field(
        True, description="Past writer_process_after URLs, a host's upserts run in a child process (the other core)."
    )
    writer_process_after: int = Field(
        50_000, ge=0, description="URLs a host admits in-process before its writer process starts."
    )
    feed_revisit_s: float = Field(12 * 3600.0, gt=0)
    listing_revisit_s: float = Field(12 * 3600.0, gt=0, description="Listing pages are asked again after this.")
    sitemap_revisit_s: float = Field(24 * 3600.0, gt=0)
    sitemap_index_revisit_s: float = Field(
        24 * 3600.0, gt=0,
        description="An index without validators is read in full again after this (one with them is asked every "
        "run, conditionally): the index is where a site announces a new child sitemap.",
    )
    sitemap_redirect_recheck_s: float = Field(
        7 * 24 * 3600.0, gt=0,
        description="A sitemap URL that redirected is asked at its own URL again after this; meanwhile its target "
        "is asked directly, with the target's validators.",
    )
    sitemap_index_trust_s: float = Field(
        7 * 24 * 3600.0, ge=0,
        description="A child sitemap its index dates no newer than our copy is still asked once our copy is this "
        "old (0: always ask).",
    )
    feed_mirror_recheck_s: float = Field(
        0.0, ge=0,
        description="A feed that listed only entries another feed of the host had listed in the same run is "
        "polled again after this (0: every run, conditionally: an Atom twin ordered by `updated` is where an "
        "edit of an old entry shows, which its RSS twin ordered by publication never shows).",
    )
    facet_useless_after: int = Field(
        3, ge=1, le=1_000,
        description="Variants of a facet parameter (urls.facet_params) that listed no item other pages had not, "
        "after which its variants are not fetched in the run (one such variant more per parameter once the site's "
        "filters have only repeated its listings); a variant that adds an item keeps the parameter crawled.",
    )
    pagination_recheck_s: float = Field(
        7 * 24 * 3600.0, ge=0,
        description="A listing page reached only through pagination is asked again at least this often even when "
        "the page before it brought nothing new (0: always ask).",
    )


class StoreSettings(Group):
    lease_s: float = Field(300.0, gt=0, description="A claim not completed within this returns to the queue.")
    claim_batch: int = Field(
        50, ge=1, le=10_000, description="URLs leased per host per claim (held leases are renewed while fetched)."
    )
    compress_level: int = Field(6, ge=1, le=9, description="zlib level for stored bodies.")
    sqlite_busy_timeout_s: float = Field(30.0, ge=0, description="Bounded wait on a locked SQLite file.")


class RevisitSettings(Group):
    min_s: float = Field(3600.0, gt=0, description="Shortest revisit interval after a change.")
    max_s: float = Field(30 * 86_400.0, gt=0, description="Longest revisit interval after no change.")
    default_s: float = Field(86_400.0, gt=0, description="First revisit interval without a changefreq.")
    unlisted_max_s: float = Field(
        86_400.0, gt=0,
        description="Longest revisit interval of a URL first found outside a sitemap (a feed, a listing page, a "
        "link): nothing announces its changes or its deletion, so only asking (a 304 when unchanged) keeps the "
        "snapshot equal to the site on a daily schedule. Raise it to trade freshness for requests.",
    )
    due_early_share: float = Field(
        0.1, ge=0, lt=1,
        description="A URL or document is due this share of its interval early, so a run on the same schedule as "
        "the last finds due what the last read minutes or hours after it started.",
    )
    due_early_max_s: float = Field(3 * 3600.0, ge=0, description="The most a URL or document is due early.")
    changed_factor: float = Field(0.5, gt=0, lt=1, description="Interval multiplier after an observed change.")
    unchanged_factor: float = Field(1.5, gt=1, le=10, description="Interval multiplier after an unchanged fetch.")
    lastmod_min_checks: int = Field(
        10, ge=1, description="Lastmod checks a host needs before its lastmod truthfulness is trusted at all."
    )
    lastmod_truthful: float = Field(
        0.9, gt=0, le=1, description="Truthfulness at or above which an unchanged lastmod skips the request."
    )
    lastmod_spot_check: float = Field(
        0.05, ge=0, le=1,
        description="Share of pages a truthful lastmod says are unchanged that are still asked (conditionally), "
        "so the host's truthfulness keeps being measured.",
    )


class Settings(BaseSettings):
    """Process-wide settings. Build with ``Settings.load()`` so errors come back as ``ConfigError``."""

    model_config = SettingsConfigDict(
        env_prefix="HARVESTER_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    database_url: str = Field(
        DEFAULT_DATABASE_URL, min_length=1,
        description="SQLAlchemy URL of the frontier, or the path of a SQLite file (``crawl.db``).",
    )
    http: HttpSettings = HttpSettings()
    politeness: PolitenessSettings = PolitenessSettings()
    robots: RobotsSettings = RobotsSettings()
    urls: UrlSettings = UrlSettings()
    discovery: DiscoverySettings = DiscoverySettings()
    store: StoreSettings = StoreSettings()
    revisit: RevisitSettings = RevisitSettings()
    max_pages_per_host: int = Field(
        100_000, ge=1,
        description="Pages answered per host per extraction run; the rest stay queued for the next run (deferred).",
    )

    @field_validator("database_url")
    @classmethod
    def _url_or_path(cls, value: str) -> str:
        return database_url_of(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = _toml_file.get()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    @classmethod
    def load(cls, config_file: Path | str | None = None, **overrides: Any) -> Settings:
        """Settings from flags (``overrides``, None values ignored), env, then the TOML file.

        ``config_file`` None means ``./harvester.toml`` when it exists; a named file must exist.
        """
        path = Path(config_file) if config_file is not None else None
        if path is not None and not path.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist; pass an existing TOML file")
        if path is None and DEFAULT_CONFIG_FILE.is_file():
            path = DEFAULT_CONFIG_FILE
        given = {key: value for key, value in overrides.items() if value is not None}
        if (misspelled := misspelled_env(list(cls.model_fields))) is not None:
            raise ConfigError(misspelled)
        with _using_toml(path):
            try:
                return cls(**given)
            except ValidationError as exc:
                raise config_error(exc, where="settings", model=cls, toml=path, sources=True,
                                   given=given) from None
            except (ValueError, OSError) as exc:  # TOML syntax errors surface as ValueError
                raise ConfigError(f"cannot read {path}: {exc}") from None

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with dotted keys changed (``politeness.per_host_start=4``), validated like the original."""
        data = self.model_dump()
        for dotted, value in changes.items():
            if value is None:
                continue
            if dotted == "politeness.per_host_limit":
                raise ConfigError(RENAMED_PER_HOST)
            node = data
            *parents, leaf = dotted.split(".")
            for part in parents:
                child = node.get(part)
                if not isinstance(child, dict):
                    raise ConfigError(f"unknown setting {dotted!r}: no group {part!r}; groups: "
                                      f"{', '.join(sorted(k for k, v in data.items() if isinstance(v, dict)))}")
                node = child
            if leaf not in node:
                raise ConfigError(f"unknown setting {dotted!r}; valid here: {', '.join(sorted(node))}")
            node[leaf] = value
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, where="settings", model=type(self), given=changes, sources=True) from None

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


@contextmanager
def _using_toml(path: Path | None) -> Iterator[None]:
    token = _toml_file.set(path)
    try:
        yield
    finally:
        _toml_file.reset(token)


def normalized_networks(values: tuple[str, ...]) -> tuple[str, ...]:
    """CIDR networks, normalised (``10.0.0.0/8``); the error names the bad value and the form accepted."""
    return tuple(str(network) for network in parse_networks(values))
