"""One home per knob (issue 35): a site's limits live in its profile. ``--per-host``, a sites file and a Prefect
run's ``per_host_limit`` write ``SiteProfile.per_host_limit`` (fixed: start and ceiling); the adaptive limit's start
is ``politeness.per_host_start`` everywhere; ``GateConfig.from_settings`` is where the two meet.

Before: ``--per-host`` wrote two settings (``politeness.per_host_limit`` and ``max_per_host_limit``), a run's
``per_host_limit`` override the start only, and the profile's field fixed it: one name, two meanings. A stored file
or variable naming the old settings key is refused with a message naming the new one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from harvester.cli import app
from harvester.errors import ConfigError
from harvester.fetch.politeness import GateConfig
from harvester.flows.parameters import RunOverrides
from harvester.flows.sites import load_sites
from harvester.frontier import FrontierStore
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec

PROFILE = SiteProfile.build(seeds=("http://127.0.0.1:9/",))


def gate_of(settings: Settings, profile: SiteProfile) -> tuple[int, int]:
    config = GateConfig.from_settings(settings.politeness, per_host_limit=profile.per_host_limit,
                                      min_delay_s=profile.min_delay_s)
    return config.start_limit, config.max_limit


def test_without_a_site_limit_the_limit_adapts_from_the_start_to_the_ceiling():
    settings = Settings.load().with_overrides(**{"politeness.per_host_start": 3, "politeness.max_per_host_limit": 6})
    assert gate_of(settings, PROFILE) == (3, 6)


def test_a_sites_file_per_host_limit_keeps_fixing_the_limit(tmp_path: Path):
    path = tmp_path / "sites.toml"
    path.write_text('[sites.news]\nseeds = ["http://127.0.0.1:9/"]\nper_host_limit = 1\n', encoding="utf-8")
    (site,) = load_sites(path)
    assert site.profile.per_host_limit == 1
    assert gate_of(Settings.load(), site.profile) == (1, 1)


def test_a_runs_per_host_limit_fixes_the_limit_as_the_flag_does_and_per_host_start_only_starts_it():
    fixed = RunOverrides.model_validate({"per_host_limit": 2})
    assert fixed.dotted() == {}  # not a setting: the run's profile
    assert gate_of(Settings.load().with_overrides(**fixed.dotted()), fixed.site_profile(PROFILE)) == (2, 2)
    started = RunOverrides.model_validate({"politeness.per_host_start": 3})
    assert started.site_profile(PROFILE) is PROFILE
    assert gate_of(Settings.load().with_overrides(**started.dotted()), PROFILE) == (3, 4)
    budget = RunOverrides.model_validate({"max_pages_per_host": 7, "min_delay_s": 0.5}).site_profile(PROFILE)
    assert (budget.max_pages_per_host, budget.min_delay_s) == (7, 0.5)  # the site's other limits: its profile too


@pytest.mark.parametrize("name", RunOverrides.SITE)
def test_each_site_override_has_its_profile_fields_bounds(name: str):
    assert RunOverrides.model_fields[name].metadata == SiteProfile.model_fields[name].metadata


def test_the_old_settings_key_is_refused_naming_the_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("harvester.toml").write_text("[politeness]\nper_host_limit = 3\n")
    with pytest.raises(ConfigError, match=r"\(from harvester\.toml\).*renamed politeness\.per_host_start"):
        Settings.load()
    Path("harvester.toml").unlink()
    monkeypatch.setenv("HARVESTER_POLITENESS__PER_HOST_LIMIT", "3")
    with pytest.raises(ConfigError, match=r"HARVESTER_POLITENESS__PER_HOST_LIMIT.*politeness\.per_host_start"):
        Settings.load()
    monkeypatch.delenv("HARVESTER_POLITENESS__PER_HOST_LIMIT")
    with pytest.raises(ConfigError, match=r"renamed politeness\.per_host_start"):
        Settings.load().with_overrides(**{"politeness.per_host_limit": 3})
    with pytest.raises(ValidationError, match=r"per_host_start, or per_host_limit"):
        RunOverrides.model_validate({"politeness.per_host_limit": 3})
    Path("harvester.toml").write_text("[politeness]\nper_host_start = 3\n")  # control: the new key is read
    assert Settings.load().politeness.per_host_start == 3


def test_the_flag_writes_the_profiles_per_host_limit(make_web, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    for key in ("PREFECT_API_URL", "HARVESTER_DATABASE_URL"):
        monkeypatch.delenv(key, raising=False)
    web = make_web([HostSpec("a", pages=3)], seed=35)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    done = CliRunner().invoke(app, ["discover", *web.seeds, "--db", db, "--per-host", "1"])
    assert done.exit_code == 0, done.output
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        stored = store.last_profile()
    assert stored is not None and stored["per_host_limit"] == 1
    assert gate_of(Settings.load(database_url=db), SiteProfile.build(**stored)) == (1, 1)


def test_a_fixed_limit_stays_fixed_through_slow_answers(migrated_pg_url: str) -> None:
    """Stranger 42: ``extract --per-host 2`` ended with "in flight 2 / 1": one answer slower than
    ``slow_response_s`` halved the limit the help calls fixed (no adaptation)."""
    import re
    import threading

    from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

    pages = [f"/p/{n}" for n in range(6)]
    slow = threading.Event()

    def respond(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, {path: None for path in pages})
        if request.path not in pages:
            return 404, {"Content-Type": "text/plain"}, b""
        slow.wait(0.3)  # slower than slow_response_s below: what halves an adaptive limit
        body = f"<html><head><title>{request.path}</title></head><body><p>{'Plain words. ' * 40}</p></body></html>"
        return 200, {"Content-Type": "text/html"}, body.encode()

    runner = CliRunner()
    with threaded_site(respond) as origin:
        found = runner.invoke(app, ["discover", f"{origin}/", "--db", migrated_pg_url])
        assert found.exit_code == 0, found.output
        done = runner.invoke(app, ["extract", "--per-host", "2", "--db", migrated_pg_url],
                             env={"COLUMNS": "200", "HARVESTER_POLITENESS__SLOW_RESPONSE_S": "0.1"})
    assert done.exit_code == 0, done.output
    row = next(line for line in done.output.splitlines() if origin.removeprefix("http://") in line and "/" in line
               and re.search(r"\d+ / \d+", line))
    assert re.search(r"\b\d+ / 2\b", row), row
    with FrontierStore.open(Settings.load(database_url=migrated_pg_url)) as store:
        policy = store.host_policy(origin)
    assert policy is None or policy.concurrency_limit in (None, 2), policy
