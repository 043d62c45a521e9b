"""The extractor hook as a user meets it: named by its file (``./myext.py:words``) or its module, handed the page
object the docs describe, its fields stored; a hook that fails on some pages leaves those pages stored with its
error and no fields, one that fails on every page fails the run (exit status, first traceback). The next days of
such pages: tests/test_extractor_hook_failures.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester import ExtractorFailed, FrontierStore, Settings, SiteProfile, harvest
from harvester.cli import app
from harvester.errors import ConfigError
from harvester.extraction import load_hook
from harvester.testing.sites import HostSpec

runner = CliRunner()

WORDS = """
    def words(page):
        return {"words": len(page.main_text.split()), "title": page.title}
"""


def write(path: Path, code: str) -> Path:
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    return path


def stored_fields(db: str) -> dict[str, dict[str, object]]:
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        return {page.url: dict(page.fields) for page in store.iter_pages(latest=True)}


@pytest.mark.parametrize("spec", ["./myext.py:words", "myext:words", "hooks/../myext.py:words"])
def test_a_hook_named_by_its_file_or_by_a_module_in_the_working_directory_is_run(spec, make_web, tmp_path,
                                                                                  monkeypatch):
    web = make_web([HostSpec("a", pages=6)], seed=4)
    (tmp_path / "hooks").mkdir()
    write(tmp_path / "myext.py", WORDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "myext", raising=False)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    out = runner.invoke(app, ["harvest", *web.seeds, "--db", db, "--extractor", spec])
    assert out.exit_code == 0, out.output
    fields = stored_fields(db)
    assert set(web.truth["a"].allowed_detail_urls()) <= set(fields)
    assert all(int(f["words"]) > 0 and f["title"] for f in fields.values())  # type: ignore[call-overload]
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        kept = store.last_profile()["extractor"]  # type: ignore[index]
    if spec.endswith(".py:words"):  # a later recrawl from elsewhere finds the same file
        assert kept == f"{tmp_path / 'myext.py'}:words"


def test_a_missing_file_or_function_is_refused_before_any_request(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"no file .*nothere\.py"):
        load_hook("./nothere.py:words")
    write(tmp_path / "myext.py", WORDS)
    with pytest.raises(ConfigError, match=r"has no attribute 'missing'"):
        load_hook("./myext.py:missing")
    with pytest.raises(ConfigError, match="No module named 'notamodule'"):
        load_hook("notamodule:words")  # no notamodule.py here: the import error itself
    assert load_hook(f"{tmp_path / 'myext.py'}:words") is load_hook("./myext.py:words")  # loaded once


def test_the_page_object_has_the_documented_fields_and_types(make_web, tmp_path):
    """The contract in docs/getting-started.md ("Your own fields"): every field named there, of its type."""
    web = make_web([HostSpec("a", pages=5)], seed=6)
    seen: list[dict[str, object]] = []

    def check(page):
        seen.append({
            "url": isinstance(page.url, str), "final_url": isinstance(page.final_url, str),
            "status": page.status == 200, "headers": isinstance(page.headers.get("content-type"), str),
            "bytes": isinstance(page.bytes, bytes), "text": isinstance(page.text, str),
            "title": isinstance(page.title, str), "main_text": bool(page.main_text),
            "content_hash": isinstance(page.content_hash, str), "jsonld": isinstance(page.jsonld, list),
            "tree": page.tree is not None and page.tree.findtext(".//title") == page.title,
        })
        return {"h1": page.tree.findtext(".//h1")} if len(page.url) % 2 else None  # None: no fields

    db = f"sqlite:///{tmp_path / 'h.db'}"
    harvest(Settings.load(database_url=db), SiteProfile.build(seeds=tuple(web.seeds)), extractor=check)
    assert seen and all(all(checks.values()) for checks in seen), seen
    fields = stored_fields(db)
    assert {len(url) % 2 for url, f in fields.items() if f} == {1}
    assert {len(url) % 2 for url, f in fields.items() if not f} == {0}
    assert all(f["h1"] for f in fields.values() if f)


def test_a_hook_failing_on_some_pages_stores_them_with_its_error_and_the_counts_say_how_many(make_web, tmp_path):
    web = make_web([HostSpec("a", pages=10)], seed=7)
    urls = web.truth["a"].allowed_detail_urls()
    broken = set(urls[:3])

    def sometimes(page):
        if page.url in broken:
            raise ValueError("no price on this page")
        return {"ok": True}

    db = f"sqlite:///{tmp_path / 'h.db'}"
    cycle = harvest(Settings.load(database_url=db), SiteProfile.build(seeds=tuple(web.seeds)), extractor=sometimes)
    assert cycle.extract.counters["hook_failed"] == 3
    assert (cycle.changes["hook_failed"], cycle.changes["failed"], cycle.changes["failures"]) == (3, 0, {})
    with FrontierStore.open(Settings.load(database_url=db)) as store:
        states = store.url_states()
        pages = {page.url: page for page in store.iter_pages(latest=True)}
        info = store.url_info(urls[0])
    assert all(states[url][0] == "done" for url in urls)  # a good fetch: the page is the site's truth
    assert {url for url in urls if pages[url].hook_error} == broken
    assert all(pages[url].hook_error == {"class": "ValueError", "message": "no price on this page"}
               for url in broken)
    assert all(pages[url].fields == {"ok": True} for url in set(urls) - broken)
    assert info is not None and info.last_error_class == "hook_failed" and "no price" in (info.last_error or "")


def test_a_hook_failing_on_every_page_fails_the_run_with_its_first_traceback(make_web, tmp_path):
    web = make_web([HostSpec("a", pages=6)], seed=8)
    write(tmp_path / "bad.py", """
        def words(page):
            return helper(page)

        def helper(page):
            raise KeyError("price")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HARVESTER_", "PREFECT_API"))}
    harvester = str(Path(sys.executable).parent / "harvester")
    done = subprocess.run([harvester, "harvest", *web.seeds, "--db", f"sqlite:///{tmp_path / 'h.db'}",
                           "--extractor", "./bad.py:words"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stdout[-2000:]
    assert "failed on all 6 pages" in done.stderr
    assert done.stderr.count("Traceback (most recent call last)") == 1  # the first failure's, not one per page
    assert 'in helper\n    raise KeyError("price")' in done.stderr
    assert done.stderr.count("extractor hook raised KeyError: 'price' on") == 6  # each page says why
    with FrontierStore.open(Settings.load(database_url=f"sqlite:///{tmp_path / 'h.db'}")) as store:
        errors = [page.hook_error for page in store.iter_pages(latest=True) if page.kind == "detail"]
    assert errors == [{"class": "KeyError", "message": "'price'"}] * 6  # stored, each with the hook's error


def test_the_library_raises_extractor_failed_and_a_good_page_saves_the_run(make_web, tmp_path):
    web = make_web([HostSpec("a", pages=6)], seed=9)
    first = web.truth["a"].allowed_detail_urls()[0]
    settings = Settings.load(database_url=f"sqlite:///{tmp_path / 'h.db'}")
    profile = SiteProfile.build(seeds=tuple(web.seeds))

    def never(page):
        raise RuntimeError("broken")

    with pytest.raises(ExtractorFailed, match="failed on all 6 pages"):
        harvest(settings, profile, extractor=never)
    other = Settings.load(database_url=f"sqlite:///{tmp_path / 'h2.db'}")
    harvest(other, profile, extractor=lambda page: {"x": 1} if page.url == first else never(page))  # no raise


def test_the_getting_started_hook_runs_as_documented(make_web, tmp_path, monkeypatch):
    """docs/getting-started.md's myext.py, taken from the page itself, run the way the page says."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "getting-started.md").read_text()
    example = next(block for block in doc.split("```python\n")[1:] if block.startswith("# myext.py"))
    write(tmp_path / "myext.py", example.split("```", 1)[0])
    web = make_web([HostSpec("a", pages=6)], seed=12)
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    out = runner.invoke(app, ["harvest", *web.seeds, "--db", db, "--extractor", "./myext.py:words"])
    assert out.exit_code == 0, out.output
    fields = stored_fields(db)
    details = set(web.truth["a"].allowed_detail_urls())
    assert details <= set(fields)
    assert all(int(fields[url]["words"]) > 0 and "price" in fields[url] for url in details)  # type: ignore[call-overload]
