"""Sites declared once (issue 23): a sites file's entries become two deployments each; a file with a bad entry is
refused whole, every problem named by site and key, and registers nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import VENV_BIN, stop_group

from harvester.errors import ConfigError
from harvester.flows.serve import pool_yaml
from harvester.flows.sites import load_sites

GOOD = """
[sites.news]
seeds = ["http://127.0.0.1:9/"]
recrawl = "30 4 * * *"

[sites.shop]
seeds = ["http://127.0.0.1:9/shop/"]
harvest = "0 1 * * 6"
timezone = "Europe/Berlin"
max_pages_per_host = 200
[sites.shop.scope]
deny_patterns = ["/cart"]

[sites.docs]
seeds = ["http://127.0.0.1:9/docs/"]
workers = 2
"""

BAD = """
[sites.news]
seeds = ["http://127.0.0.1:9/"]
per_host_limt = 2

[sites.shop]
seeds = ["ftp://shop.example/"]
timezone = "Mars/Olympus"
workers = 0

[sites.docs]
seeds = ["http://127.0.0.1:9/docs/"]
recrawl = "every day"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sites.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_gives_each_site_its_profile_schedules_and_workers(tmp_path: Path) -> None:
    sites = {site.profile.name: site for site in load_sites(write(tmp_path, GOOD))}
    assert list(sites) == ["news", "shop", "docs"]
    assert sites["news"].recrawl_cron == "30 4 * * *" and sites["news"].harvest_cron == "0 2 * * 0"
    assert sites["shop"].timezone == "Europe/Berlin" and sites["shop"].profile.max_pages_per_host == 200
    assert sites["shop"].profile.scope.deny_patterns == ("/cart",)
    assert sites["docs"].workers == 2
    text = pool_yaml(list(sites.values()))
    assert text.count("entrypoint: flows/harvest.py:harvest_flow") == 3
    assert text.count("entrypoint: flows/recrawl.py:recrawl_flow") == 3
    assert "harvester.flows.home.enter_home" in text and "database" not in text
    assert "Scheduled `0 1 * * 6` in time zone Europe/Berlin." in text


def test_a_file_with_bad_entries_names_every_site_and_key_and_yields_nothing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_sites(write(tmp_path, BAD))
    first, *lines = str(raised.value).splitlines()
    assert "nothing was registered" in first and "5 problems" in first
    # Every problem of every site at once (before: the first of each site), one per line.
    assert len(lines) == 5, lines
    assert lines[0].startswith("  site 'news': per_host_limt: unknown key") and "per_host_limit" in lines[0]
    assert lines[1].startswith("  site 'shop': seeds") and "ftp://shop.example/" in lines[1]
    assert lines[2] == "  site 'shop': 'timezone': 'Mars/Olympus' is not a time zone like UTC or Europe/Berlin"
    assert lines[3] == "  site 'shop': 'workers': 0 is not a whole number from 1 to 64"
    assert lines[4].startswith("  site 'docs': 'recrawl': 'every day' is not a cron expression")


def test_the_cli_refuses_a_bad_file_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "deployments.yaml"
    done = subprocess.run([str(VENV_BIN / "harvester"), "deployments", "--sites", str(write(tmp_path, BAD)),
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert "site 'docs'" in done.stderr and not out.exists()


async def test_serve_registers_two_deployments_per_site_with_their_schedules(prefect_api, tmp_path: Path) -> None:
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(VENV_BIN / "harvester"), "serve", "--sites", str(write(tmp_path, GOOD))],
                                env=prefect_api, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=tmp_path)
    names = [f"{kind}/{site}-serve" for site in ("news", "shop", "docs") for kind in ("harvest", "recrawl")]
    found = {}
    try:
        deadline = time.monotonic() + 90
        async with get_client() as client:
            for name in names:
                while name not in found:
                    try:
                        found[name] = await client.read_deployment_by_name(name)
                    except ObjectNotFound:
                        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                        await asyncio.sleep(0.5)
            for name in names:
                await client.delete_deployment(found[name].id)  # the server is shared
    finally:
        stop_group(proc)
    shop = found["harvest/shop-serve"]
    assert shop.schedules[0].schedule.cron == "0 1 * * 6" and shop.schedules[0].schedule.timezone == "Europe/Berlin"
    assert "`0 1 * * 6` in time zone Europe/Berlin" in (shop.description or "")  # the UI shows no zone of its own
    assert found["recrawl/news-serve"].schedules[0].schedule.cron == "30 4 * * *"
    assert {"harvester", "harvest", "shop"} <= set(shop.tags)
    assert shop.parameters["profile"]["name"] == "shop" and found["harvest/docs-serve"].parameters["workers"] == 2
    properties = shop.parameter_openapi_schema["properties"]
    assert {"profile", "overrides", "workers"} <= set(properties)


def test_deployments_without_a_server_says_no_automations_were_created(tmp_path: Path) -> None:
    """Before: without PREFECT_API_URL the healing automations were skipped in silence."""
    out = tmp_path / "deployments.yaml"
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")  # no profile naming a server either
    done = subprocess.run([str(VENV_BIN / "harvester"), "deployments", "--sites", str(write(tmp_path, GOOD)),
                           "-o", str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done
    said = " ".join(done.stderr.split())
    assert "no healing automations were created: PREFECT_API_URL is not set" in said, said
    assert "command: python -m harvester.flows.engine" in out.read_text(encoding="utf-8")
