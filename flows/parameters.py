"""``RunOverrides``: the settings a run may change from Prefect (a deployment's parameters, the UI's custom-run form).

Whatever a run's parameters hold is stored in Prefect's database in plain text, so only settings that are safe
there are offered, each typed with the bounds of its ``harvester.settings`` field: limits, timeouts, the User-Agent.
Secrets and where the data goes (``database_url``, the store's settings) never are: they come from each worker's
``HARVESTER_*`` environment or ``harvester.toml``. A key that is not offered is refused naming the valid ones,
so a typo (``politness.per_host_start``) is a clear error, not a ``KeyError`` deep in a run.

Where each refusal happens: the deployment's parameter schema (built from these types) is what Prefect's server
checks when a run is created, from the UI form, ``prefect deployment run`` or the API, and it answers 409 before
storing anything: ``workers`` outside 1-64, a seed that is not an absolute http(s) URL (``SEED_SCHEMA`` in
``harvester.settings``), an override key it does not name (a dotted key too: the schema names the
plain keys only), a secret (refused in the project's words, ``PLAIN_TEXT_REFUSAL``). A client that switches the check
off (``enforce_parameter_schema=False``) gets the run stored; the flow then refuses it at its start with the same
words, before anything else runs, and erases the parameter from the stored run (``guards.tidy_stored_parameters``). A
``config_file`` names a file on the worker, which the server never sees: a missing one fails the run at its start.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harvester.settings import RENAMED_PER_HOST, DiscoverySettings, Group, HttpSettings, PolitenessSettings
from harvester.site_profile import SiteProfile

SECRET_HINTS = ("database", "password", "secret", "token", "credential", "dsn", "store.")
"""A key containing any of these is taken for a secret (or for where the data goes) and refused as such."""

PLAIN_TEXT_REFUSAL = (
    "cannot be a run parameter: parameters are stored in Prefect's database in plain text. Set it where the worker "
    "runs: the environment (HARVESTER_DATABASE_URL, HARVESTER_STORE__...) or harvester.toml"
)
"""What a refused secret is told, by the server's schema check and by the flow alike."""

MAX_WORKERS = 64
"""Most extraction workers one run may ask for, wherever it is asked (a run's parameters, a sites file)."""

Workers = Annotated[int, Field(ge=1, le=MAX_WORKERS,
                               description=f"Extraction workers in this run (1 to {MAX_WORKERS}).")]
"""The ``workers`` parameter of the flows: bounded in the deployment's schema, so the server refuses 0 or 65."""


def _refuse_secret_keys(schema: dict[str, Any]) -> None:
    """Put the project's words into the server's refusal of a key. Prefect answers 409 with jsonschema's message
    for the failing keyword, and ``additionalProperties: false`` said only "Additional properties are not allowed".
    One ``propertyNames`` check in its place: a secret fails a ``not`` whose schema carries ``PLAIN_TEXT_REFUSAL`` (the
    message names the key and that schema, never the value typed), any other unknown key fails an ``enum`` that
    lists the valid ones."""
    hints = "|".join(re.escape(hint) for hint in SECRET_HINTS)
    schema.pop("additionalProperties", None)
    schema["propertyNames"] = {
        "if": {"pattern": f"(?i)({hints})"},
        # "type" beside each: jsonschema prefers, over the anyOf's "not valid under any" (which shows the value
        # typed), the error of a schema whose type the instance matches.
        "then": {"type": "string", "not": {"description": f"a secret or where the data goes {PLAIN_TEXT_REFUSAL}"}},
        "else": {"type": "string", "enum": sorted(schema.get("properties", {}))},
    }


def _writes(model: type[Group], name: str, description: str) -> Any:
    """An optional override of ``model``'s field ``name``: the bounds are that field's (``Group.bounds``), None keeps
    what the profile and the worker's settings say."""
    return Field(None, description=description, **model.bounds(name))


class RunOverrides(BaseModel):
    """What one run changes; None keeps what the profile and the worker's settings say.

    A site's limits (``per_host_limit``, ``min_delay_s``, ``max_pages_per_host``: ``SITE``) write the run's profile,
    the field of the same name and meaning that ``--per-host``, ``--budget`` and a sites file write
    (``site_profile``): ``per_host_limit`` fixes the requests in flight per host, start and ceiling. The other keys
    are the worker's settings (``SETTING``): ``per_host_start`` is where the adaptive limit starts,
    ``max_per_host_limit`` how high it may rise. In Python (``model_validate``, the CLI) a setting's dotted key
    (``politeness.per_host_start``) is taken for its plain one; a deployment's run takes the plain keys only (its
    schema names no other, and the server answers 409)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_refuse_secret_keys)

    # Each field writes the field of the same knob (``SITE``: the profile's; ``SETTING``: the settings'), whose
    # bounds it takes: their one home.
    per_host_limit: int | None = _writes(SiteProfile, "per_host_limit", "Requests in flight per host, fixed.")
    per_host_start: int | None = _writes(
        PolitenessSettings, "per_host_start", "Requests in flight per host at the start (adaptive; no per_host_limit).")
    max_per_host_limit: int | None = _writes(
        PolitenessSettings, "max_per_host_limit", "Ceiling AIMD may raise the limit to.")
    max_active_hosts: int | None = _writes(PolitenessSettings, "max_active_hosts", "Hosts fetched at once.")
    min_delay_s: float | None = _writes(SiteProfile, "min_delay_s", "Least interval between requests to a host.")
    max_crawl_delay_s: float | None = _writes(
        PolitenessSettings, "max_crawl_delay_s", "A larger Crawl-delay parks the host.")
    max_attempts: int | None = _writes(
        PolitenessSettings, "max_attempts", "Attempts per URL in a run before it is failed.")
    user_agent: str | None = _writes(HttpSettings, "user_agent", "User-Agent with a contact URL.")
    timeout_s: float | None = _writes(HttpSettings, "timeout_s", "Deadline for a whole fetch.")
    connect_timeout_s: float | None = _writes(HttpSettings, "connect_timeout_s", "Deadline for one TCP/TLS connect.")
    max_body_bytes: int | None = _writes(
        HttpSettings, "max_body_bytes", "Pages larger than this are cut off and failed.")
    listing_page_budget: int | None = _writes(
        DiscoverySettings, "listing_page_budget", "Listing pages fetched per host per run.")
    listing_max_depth: int | None = _writes(DiscoverySettings, "listing_max_depth", "Listing hops from a seed.")
    max_pages_per_host: int | None = _writes(
        SiteProfile, "max_pages_per_host", "Pages answered per host per extraction run.")

    SITE: ClassVar[tuple[str, ...]] = ("per_host_limit", "min_delay_s", "max_pages_per_host")
    """The site's limits: fields of ``harvester.site_profile.SiteProfile`` of the same name (and bounds)."""

    SETTING: ClassVar[dict[str, str]] = {
        "per_host_start": "politeness.per_host_start",
        "max_per_host_limit": "politeness.max_per_host_limit",
        "max_active_hosts": "politeness.max_active_hosts",
        "max_crawl_delay_s": "politeness.max_crawl_delay_s",
        "max_attempts": "politeness.max_attempts",
        "user_agent": "http.user_agent",
        "timeout_s": "http.timeout_s",
        "connect_timeout_s": "http.connect_timeout_s",
        "max_body_bytes": "http.max_body_bytes",
        "listing_page_budget": "discovery.listing_page_budget",
        "listing_max_depth": "discovery.listing_max_depth",
    }
    """Each other field's key in ``harvester.settings.Settings``, whose bounds it takes (``Group.bounds``;
    tests/flows/test_parameters.py checks the bounds)."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        by_setting = {setting: field for field, setting in cls.SETTING.items()}
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = by_setting.get(key, key)
            if name in cls.SETTING or name in cls.SITE:
                out[name] = value
                continue
            if key == "politeness.per_host_limit":
                raise ValueError(f"{RENAMED_PER_HOST}; as a run's override: per_host_start, or per_host_limit")
            if is_secret(key):
                raise ValueError(f"{key!r} {PLAIN_TEXT_REFUSAL}")
            raise ValueError(f"unknown override {key!r}; valid: {', '.join(sorted((*cls.SETTING, *cls.SITE)))}")
        return out

    def dotted(self) -> dict[str, Any]:
        """The settings given, as ``Settings.with_overrides`` takes them (the site's limits are not settings)."""
        return {self.SETTING[name]: value for name, value in self.model_dump(exclude_none=True).items()
                if name in self.SETTING}

    def site_profile(self, profile: SiteProfile) -> SiteProfile:
        """``profile`` with the site's limits this run changes (``SITE``)."""
        changes = {name: value for name, value in self.model_dump(exclude_none=True).items() if name in self.SITE}
        return profile.model_copy(update=changes) if changes else profile


def is_secret(key: object) -> bool:
    lowered = str(key).lower()
    return any(hint in lowered for hint in SECRET_HINTS)
