"""A hook that fails on some pages, as a user meets it through the commands at the daily cadence (issue 34): the
pages are stored all the same with the hook's error (exported, fields null), the summary and ``status`` say how
many (apart from failed requests), and a hook fixed before the next day's run repairs them in that run, whatever
their revisit interval; a page that changed and that the hook fails on never shows the older version's fields."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from aiohttp import web
from click.testing import Result
from typer.testing import CliRunner

from harvester import aharvest, arecrawl
from harvester.cli import app
from harvester.frontier import FrontierStore
from harvester.runtime import CLOCK
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing import HostSpec
from harvester.testing.schedule import run_at

HOOK = """
    from pathlib import Path

    BROKEN = Path(__file__).with_name("broken.txt")

    def words(page):
        if page.url in BROKEN.read_text().split():  # the bug: these pages have no price
            raise KeyError("price")
        return {"words": len(page.main_text.split())}
"""


class Cli:
    """``harvester`` commands as a user types them (typer's runner, in this process: each subprocess paid the CLI's
    imports again, most of this test's time on a loaded machine), in the user's directory (``./ext.py``, its
    harvester.toml), on one database, at a clock the test sets; no ``HARVESTER_*`` variable of the test's own."""

    def __init__(self, tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cwd = tmp_path
        self.db = db
        monkeypatch.chdir(tmp_path)
        for key in os.environ:
            if key.startswith(("HARVESTER_", "PREFECT_API")):
                monkeypatch.delenv(key)
        self.runner = CliRunner()

    def __call__(self, when: datetime, *args: str, status: int = 0) -> Result:
        CLOCK.travel_to(when)
        done = self.runner.invoke(app, [*args, "--db", self.db])
        assert done.exit_code == status, (args, done.stdout[-3000:], done.stderr[-3000:], done.exception)
        return done

    def export(self, when: datetime, *flags: str) -> list[dict[str, Any]]:
        out = self.cwd / "out.jsonl"
        self(when, "export", "-o", str(out), *flags)
        return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]

    def last_cycle(self, when: datetime) -> dict[str, Any]:
        cycle: dict[str, Any] = json.loads(self(when, "status", "--json").stdout)["last_cycle"]
        return cycle


def test_pages_the_hook_failed_on_are_stored_counted_exported_and_repaired_by_the_fixed_hook_next_day(
        make_web, tmp_path, db_url, clock, monkeypatch):
    web = make_web([HostSpec("a", pages=12)], seed=34)
    urls = web.truth["a"].allowed_detail_urls()
    broken = set(urls[:3])
    (tmp_path / "ext.py").write_text(textwrap.dedent(HOOK), encoding="utf-8")
    (tmp_path / "broken.txt").write_text("\n".join(broken), encoding="utf-8")
    # Pages are revisited every other day: what the next day's run asks of an unchanged page is the hook's repair only.
    (tmp_path / "harvester.toml").write_text(
        "[revisit]\nmin_s = 172800\ndefault_s = 172800\nunlisted_max_s = 172800\n", encoding="utf-8")
    cli = Cli(tmp_path, db_url, monkeypatch)

    cli(run_at(0), "db", "upgrade")  # PostgreSQL is never migrated silently
    day0 = cli(run_at(0), "harvest", *web.seeds, "--extractor", "./ext.py:words")
    assert "hook failed: 3" in day0.stdout and "failed: 0" in day0.stdout.replace("hook failed: 3", "")
    cycle = cli.last_cycle(run_at(0, hour=8))
    assert (cycle["hook_failed"], cycle["failed"], cycle["failures"]) == (3, 0, {})  # the requests were good
    assert "failed: 0   hook failed: 3" in cli(run_at(0, hour=8), "status").stdout
    assert cycle["new"] == len(urls) and cycle["fetched"] >= len(urls)
    pages = {line["url"]: line for line in cli.export(run_at(0, hour=8), "--latest") if line["kind"] == "detail"}
    assert set(urls) <= set(pages)  # every page stored, those the hook failed on too
    for url in broken:
        assert pages[url]["fields"] is None and pages[url]["etag"] and pages[url]["change"] == "new"
        assert pages[url]["hook_error"] == {"class": "KeyError", "message": "'price'"}
    assert all(pages[url]["hook_error"] is None and pages[url]["fields"]["words"] > 0 for url in set(urls) - broken)

    # Overnight some pages change; the hook is fixed for the three, but now fails on the changed ones.
    change = web.advance_day(changed=0.3, new=0.0, gone=0.0)
    changed = set(change.all("changed")) - broken
    assert changed, "control: some page the hook did not fail on changed"
    (tmp_path / "broken.txt").write_text("\n".join(changed), encoding="utf-8")
    web.clear_records()
    day1 = cli(run_at(1), "recrawl")
    asked = {web.truth["a"].origin + r.path: r for r in web.records()}
    changed &= {url for url, r in asked.items() if r.status == 200}  # those the site announced (sitemap, feed)
    assert changed, "control: the hook met a changed page"
    assert f"hook failed: {len(changed)}" in day1.stdout, day1.stdout
    for url in broken:  # asked in full, so the fixed hook ran on them
        assert asked[url].status == 200 and asked[url].if_none_match is None and asked[url].if_modified_since is None
    assert not set(asked) & (set(urls) - broken - set(change.all("changed")))  # control: not due otherwise
    latest = {line["url"]: line for line in cli.export(run_at(1, hour=8), "--latest")}
    for url in broken:
        assert latest[url]["hook_error"] is None and latest[url]["fields"]["words"] > 0
    for url in changed:  # the new version lacks the hook's fields: null, never the older version's
        assert latest[url]["change"] == "changed" and latest[url]["fields"] is None
        assert latest[url]["hook_error"] == {"class": "KeyError", "message": "'price'"}
    versions = [line for line in cli.export(run_at(1, hour=8)) if line["url"] in changed]
    assert sorted(line["change"] for line in versions) == sorted(["new", "changed"] * len(changed))
    assert all(line["fields"]["words"] > 0 for line in versions if line["change"] == "new")
    cycle = cli.last_cycle(run_at(1, hour=8))
    assert (cycle["hook_failed"], cycle["failed"]) == (len(changed), 0)

    # Fixed for good: the next day's run repairs the changed ones too; nothing else is asked in full.
    (tmp_path / "broken.txt").write_text("", encoding="utf-8")
    web.clear_records()
    day2 = cli(run_at(2), "recrawl")
    assert "hook failed: 0" in day2.stdout
    full = {web.truth["a"].origin + r.path for r in web.records() if r.status == 200
            and r.if_none_match is None and r.if_modified_since is None}
    assert changed <= full and not (set(urls) - changed) & full
    latest = {line["url"]: line for line in cli.export(run_at(2, hour=8), "--latest")}
    assert all(latest[url]["hook_error"] is None and latest[url]["fields"]["words"] > 0 for url in urls)
    # The test web's pages carry a per-request ad block: asked in full, each is a new payload (restyled), with its
    # fields; the version the hook failed on stays in the history as it was (the same bytes again would have been
    # given their fields in place: the next test).
    versions = [line for line in cli.export(run_at(2, hour=8)) if line["url"] in changed]
    assert sorted(line["change"] for line in versions) == sorted(["new", "changed", "restyled"] * len(changed))
    assert all((line["fields"] is None) == (line["change"] == "changed") for line in versions)


STEADY = ("<html><head><title>Item {n}</title></head><body><main><h1>Item {n}</h1><p>" + "Same words every day. " * 40
          + "</p></main></body></html>")


def steady_site(asked: list[tuple[str, str | None]]) -> Any:
    """Two detail pages that serve the very same bytes each day (no per-request noise), with an ETag."""

    async def handle(request: web.Request) -> web.Response:
        origin = f"http://{request.host}"
        if request.path == "/robots.txt":
            return web.Response(text=f"User-agent: *\nAllow: /\nSitemap: {origin}/sitemap.xml\n")
        if request.path == "/sitemap.xml":
            body = "".join(f"<url><loc>{origin}/item/{n}</loc></url>" for n in (1, 2))
            return web.Response(content_type="application/xml", text=(
                f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</urlset>'))
        if request.path in ("/item/1", "/item/2"):
            asked.append((request.path, request.headers.get("If-None-Match")))
            etag = f'"v1-{request.path[-1]}"'
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers={"ETag": etag})
            return web.Response(content_type="text/html", text=STEADY.format(n=request.path[-1]),
                                headers={"ETag": etag, "Last-Modified": "Mon, 05 Jan 2026 00:00:00 GMT"})
        return web.Response(status=404)

    return handle


class SteadyRun(NamedTuple):
    """A steady site served (its requests in ``asked``), a hook that fails on the URLs in ``broken`` (its first
    item, until the test clears it: the fix), and the settings and profile that harvest it."""

    asked: list[tuple[str, str | None]]
    origin: str
    broken: set[str]
    hook: Callable[[Any], dict[str, Any]]
    settings: Settings
    profile: SiteProfile


async def steady_run(serve: Any, db_url: str) -> SteadyRun:
    asked: list[tuple[str, str | None]] = []
    origin = await serve(steady_site(asked))
    broken = {origin + "/item/1"}

    def hook(page: Any) -> dict[str, Any]:
        if page.url in broken:
            raise KeyError("price")
        return {"words": len(page.main_text.split())}

    settings = Settings.load(database_url=db_url)
    profile = SiteProfile.build(seeds=(origin + "/",), detail_patterns=(r"/item/",))
    return SteadyRun(asked, origin, broken, hook, settings, profile)


async def test_a_page_served_with_the_same_bytes_gets_the_fixed_hooks_fields_on_its_version(serve, db_url, clock):
    """A site that serves the very same bytes each day (no per-request noise): the hook fixed, the next day's run
    asks the page in full, finds the payload it holds and gives that version its fields, clearing the error: no
    second version, no change counted. From then on the page is asked conditionally again (its validators back)."""
    asked, origin, broken, hook, settings, profile = await steady_run(serve, db_url)
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        first = await aharvest(settings, profile, extractor=hook)
        assert first.changes["hook_failed"] == 1 and first.changes["new"] == 2
        (held,) = [page for page in store.iter_pages() if page.url in broken]
        assert held.hook_error == {"class": "KeyError", "message": "'price'"} and held.etag == '"v1-1"'

        broken.clear()  # the hook is fixed
        asked.clear()
        CLOCK.travel_to(run_at(1))
        second = await arecrawl(settings, profile, extractor=hook)
        assert sorted(asked) == [("/item/1", None), ("/item/2", '"v1-2"')]  # the one the hook failed on: in full
        assert {key: second.changes[key] for key in ("new", "changed", "restyled", "hook_failed")} == {
            "new": 0, "changed": 0, "restyled": 0, "hook_failed": 0}
        versions = [page for page in store.iter_pages() if page.url == origin + "/item/1"]
        assert [(page.page_id, page.hook_error, page.fields["words"] > 0) for page in versions] == [
            (held.page_id, None, True)]

        asked.clear()
        CLOCK.travel_to(run_at(3))
        await arecrawl(settings, profile, extractor=hook)
        assert sorted(asked) == [("/item/1", '"v1-1"'), ("/item/2", '"v1-2"')]  # conditional again


async def test_a_run_without_the_hook_neither_erases_its_failure_nor_passes_it_for_repaired(serve, db_url, clock):
    """The hook failed on a page; a run without any hook (a library ``extract()`` given none, a profile without
    one) asks it again and finds the same bytes. It has nothing to say of the hook's fields: the version keeps its
    ``hook_error`` (before: cleared, with empty fields, as if repaired) and the URL keeps no validators, so the next
    run with the fixed hook still asks it in full and repairs it (before: asked conditionally, 304, never repaired)."""
    asked, origin, broken, hook, settings, profile = await steady_run(serve, db_url)
    failure = {"class": "KeyError", "message": "'price'"}
    with FrontierStore.open(settings, upgrade=True) as store:
        CLOCK.travel_to(run_at(0))
        await aharvest(settings, profile, extractor=hook)
        (held,) = [page for page in store.iter_pages() if page.url in broken]
        assert held.hook_error == failure

        asked.clear()
        CLOCK.travel_to(run_at(1))
        hookless = await arecrawl(settings, profile)
        assert ("/item/1", None) in asked  # control: the run without the hook met the page again, in full
        assert hookless.changes["hook_failed"] == 0  # it ran no hook, so none failed in it
        versions = [page for page in store.iter_pages() if page.url in broken]
        assert [(page.page_id, page.hook_error) for page in versions] == [(held.page_id, failure)]

        broken.clear()  # the hook is fixed
        asked.clear()
        CLOCK.travel_to(run_at(3))
        await arecrawl(settings, profile, extractor=hook)
        assert ("/item/1", None) in asked  # in full: the hook runs on it again
        versions = [page for page in store.iter_pages() if page.url in broken or page.url == origin + "/item/1"]
        assert [(page.page_id, page.hook_error, page.fields["words"] > 0) for page in versions] == [
            (held.page_id, None, True)]
