"""``RunOverrides``: the settings a run may change from Prefect (a deployment's parameters, the UI's custom-run form).

Whatever a run's parameters hold is stored in Prefect's database in plain text, so only settings that are safe
there are offered, each typed with the bounds of its ``harvester.settings`` field: limits, timeouts, the User-Agent.
Secrets and where the data goes (``database_url``, the store's settings) never are: they come from each worker's
``HARVESTER_*`` environment or ``harvester.toml``. A key that is not offered is refused naming the valid ones,
so a typo (``politness.per_host_limit``) is a clear error, not a ``KeyError`` deep in a run; since the model
forbids extra keys, its JSON schema does too, and Prefect refuses such a run before storing anything.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

SECRET_HINTS = ("database", "password", "secret", "token", "credential", "dsn", "store.")
"""A key containing any of these is taken for a secret (or for where the data goes) and refused as such."""


class RunOverrides(BaseModel):
    """Settings changed for one run; None keeps the worker's own. Dotted keys (``politeness.per_host_limit``)
    are accepted too."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_host_limit: int | None = Field(None, ge=1, le=64, description="Requests in flight per host at the start.")
    max_per_host_limit: int | None = Field(None, ge=1, le=64, description="Ceiling AIMD may raise the limit to.")
    max_active_hosts: int | None = Field(None, ge=1, le=10_000, description="Hosts fetched at once.")
    min_delay_s: float | None = Field(None, ge=0, le=3600, description="Least interval between requests to a host.")
    max_crawl_delay_s: float | None = Field(None, ge=0, description="A larger Crawl-delay parks the host.")
    max_attempts: int | None = Field(None, ge=1, le=20, description="Attempts per URL before it is failed.")
    user_agent: str | None = Field(None, min_length=8, description="User-Agent with a contact URL.")
    timeout_s: float | None = Field(None, gt=0, le=600, description="Deadline for a whole fetch.")
    connect_timeout_s: float | None = Field(None, gt=0, le=120, description="Deadline for one TCP/TLS connect.")
    max_body_bytes: int | None = Field(None, gt=0, description="Pages larger than this are cut off and failed.")
    listing_page_budget: int | None = Field(None, ge=0, description="Listing pages fetched per host per run.")
    listing_max_depth: int | None = Field(None, ge=0, le=20, description="Listing hops from a seed.")
    max_pages_per_host: int | None = Field(None, ge=1, description="Pages answered per host per extraction run.")

    SETTING: ClassVar[dict[str, str]] = {
        "per_host_limit": "politeness.per_host_limit",
        "max_per_host_limit": "politeness.max_per_host_limit",
        "max_active_hosts": "politeness.max_active_hosts",
        "min_delay_s": "politeness.min_delay_s",
        "max_crawl_delay_s": "politeness.max_crawl_delay_s",
        "max_attempts": "politeness.max_attempts",
        "user_agent": "http.user_agent",
        "timeout_s": "http.timeout_s",
        "connect_timeout_s": "http.connect_timeout_s",
        "max_body_bytes": "http.max_body_bytes",
        "listing_page_budget": "discovery.listing_page_budget",
        "listing_max_depth": "discovery.listing_max_depth",
        "max_pages_per_host": "max_pages_per_host",
    }
    """Each field's key in ``harvester.settings.Settings`` (tests/flows/test_parameters.py checks the bounds match)."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        by_setting = {setting: field for field, setting in cls.SETTING.items()}
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = by_setting.get(key, key)
            if name in cls.SETTING:
                out[name] = value
                continue
            lowered = str(key).lower()
            if any(hint in lowered for hint in SECRET_HINTS):
                raise ValueError(
                    f"{key!r} cannot be a run parameter: parameters are stored in Prefect's database in plain text. "
                    f"Set it where the worker runs: the environment (HARVESTER_DATABASE_URL, HARVESTER_STORE__...) "
                    f"or harvester.toml"
                )
            raise ValueError(f"unknown override {key!r}; valid: {', '.join(sorted(cls.SETTING))}")
        return out

    def dotted(self) -> dict[str, Any]:
        """The overrides given, as ``Settings.with_overrides`` takes them."""
        return {self.SETTING[name]: value for name, value in self.model_dump(exclude_none=True).items()}
