"""Hostile page bodies as a stranger's black-box harvest met them (stranger47): a real server on 127.0.0.1, the CLI's
``harvest`` and ``export``, SQLite and PostgreSQL. Each test is one defect found there.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harvester.cli import app
from harvester.testing.threaded_site import Answer, Asked, robots_txt, sitemap, threaded_site

HTML = {"Content-Type": "text/html; charset=utf-8"}
LONG = "Long enough paragraph for the main content extractor to keep it as the text of the article. " * 4


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file (the CLI creates its schema) or a PostgreSQL database migrated to head (``harvester db
    upgrade``'s work, which the CLI asks of an operator there)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'harvester.db'}"
    url: str = request.getfixturevalue("migrated_pg_url")
    return url


def page(path: str, head: str = "") -> bytes:
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">{head}<title>Page {path}</title></head>'
            f"<body><article><h1>Page {path}</h1><p>{LONG}</p><p>Marker of {path}.</p></article></body></html>"
            ).encode()


def site(routes: dict[str, Answer]) -> Callable[[Asked], Answer]:
    def answer(request: Asked) -> Answer:
        if request.path == "/robots.txt":
            return robots_txt(request.origin)
        if request.path == "/sitemap.xml":
            return sitemap(request.origin, dict.fromkeys(routes))
        return routes.get(request.path) or (404, {}, b"")
    return answer


def harvest_and_export(origin: str, db_url: str, tmp_path: Path, *extra: str) -> dict[str, dict]:
    """``harvester harvest`` of ``origin`` (its exit status asserted 0), then its JSONL export, rows by path."""
    runner = CliRunner()
    run = runner.invoke(app, ["harvest", f"{origin}/", "--db", db_url, *extra])
    assert run.exit_code == 0, run.output
    out = tmp_path / "pages.jsonl"
    exported = runner.invoke(app, ["export", "-o", str(out), "--db", db_url])
    assert exported.exit_code == 0, exported.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return {row["url"][len(origin):]: row for row in rows}


HOOK = '''
def fields(page):
    if "hook-surrogate" in page.final_url:
        return {"name": "x\\ud83dy", "\\udc00key": ["a\\udfffb"]}
    if "hook-raises" in page.final_url:
        raise ValueError("no price in x\\ud83dy")
    return {"ok": True}
'''


def test_a_lone_surrogate_in_json_ld_or_a_hooks_fields_is_stored_as_u_fffd(
        db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``{"name":"x\\ud83dy"}`` in a page's JSON-LD is valid JSON whose string holds a lone surrogate, which has no
    UTF-8 form: hashing the page raised UnicodeEncodeError and the whole harvest exited 1 with its cycle left
    running, on every re-run. The same from a user hook's fields (or the message of the exception it raised) reached
    ``json.dumps(...).encode`` and the database. Each lone surrogate becomes U+FFFD, as an HTML parser makes of
    ``&#xD83D;``: the page is stored whole, the run ends 0, the other pages are untouched. What is logged has a
    UTF-8 form too: the hook's traceback repeated its message raw, and a worker of pytest-xdist died sending it."""
    surrogate_ld = '<script type="application/ld+json">{"@type":"Article","name":"x\\ud83dy"}</script>'
    routes: dict[str, Answer] = {
        "/ok": (200, HTML, page("/ok")),
        "/jsonld-surrogate": (200, HTML, page("/jsonld-surrogate", surrogate_ld)),
        "/hook-surrogate": (200, HTML, page("/hook-surrogate")),
        "/hook-raises": (200, HTML, page("/hook-raises")),
    }
    hook = tmp_path / "surrogate_hook.py"
    hook.write_text(HOOK)
    with threaded_site(site(routes)) as origin:
        rows = harvest_and_export(origin, db_url, tmp_path, "--extractor", f"{hook}:fields")
    assert set(rows) == set(routes)
    assert {row["state"] for row in rows.values()} == {"done"}
    assert rows["/jsonld-surrogate"]["jsonld"] == [{"@type": "Article", "name": "x\ufffdy"}]
    assert rows["/jsonld-surrogate"]["title"] == "Page /jsonld-surrogate"
    assert rows["/hook-surrogate"]["fields"] == {"name": "x\ufffdy", "\ufffdkey": ["a\ufffdb"]}
    assert rows["/hook-raises"]["hook_error"] == {"class": "ValueError", "message": "no price in x\ufffdy"}
    assert rows["/ok"]["fields"] == {"ok": True}
    assert rows["/ok"]["jsonld"] == []
    logged = [r for r in caplog.records if r.name.startswith("harvester")]
    assert any("no price in x" in r.getMessage() for r in logged), "the control: the hook's failure is logged"
    for record in logged:
        logging.Formatter().format(record).encode("utf-8")  # raises on a lone surrogate


def cut(data: bytes, n: int) -> bytes:
    return data[:-n]


def test_a_cut_compressed_body_is_an_incomplete_answer_and_trailing_garbage_is_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzip body without its CRC and length trailer (RFC 1952 §2.3), a zlib-wrapped deflate body cut short and a
    raw deflate one that never reached its final block were stored as complete new versions (exported, counted
    new): they are broken answers (RFC 9112 §6.3), failed as PROTOCOL like a short Content-Length, never stored. A
    complete gzip member followed by bytes that are no gzip member (``\\x00\\x00garbage``) is the page, as curl and
    browsers read it (it was refused as bad_content); several members are still decoded one after another. (The
    fetch decides, whatever the database: SQLite alone here; tests/fetch/test_http.py has each case per transport.)"""
    db_url = f"sqlite:///{tmp_path / 'harvester.db'}"
    # The broken answers' back-off (three protocol failures in a row, then doubling from 1 s) is not what is tested.
    monkeypatch.setenv("HARVESTER_POLITENESS__BACKOFF_BASE_S", "0.02")
    garbage, members = page("/gzip-garbage"), page("/gzip-members")
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    routes: dict[str, Answer] = {
        "/ok": (200, HTML, page("/ok")),
        "/gzip-cut": (200, {**HTML, "Content-Encoding": "gzip"}, cut(gzip.compress(page("/gzip-cut")), 30)),
        "/gzip-no-trailer": (200, {**HTML, "Content-Encoding": "gzip"}, cut(gzip.compress(page("/gzip-cut")), 8)),
        "/deflate-cut": (200, {**HTML, "Content-Encoding": "deflate"}, cut(zlib.compress(page("/deflate-cut")), 20)),
        "/deflate-raw-cut": (200, {**HTML, "Content-Encoding": "deflate"},
                             raw.compress(page("/deflate-raw-cut")) + raw.flush(zlib.Z_SYNC_FLUSH)),
        "/gzip-garbage": (200, {**HTML, "Content-Encoding": "gzip"}, gzip.compress(garbage) + b"\x00\x00garbage"),
        "/gzip-members": (200, {**HTML, "Content-Encoding": "gzip"},
                          gzip.compress(members[:300]) + gzip.compress(members[300:])),
    }
    with threaded_site(site(routes)) as origin:
        rows = harvest_and_export(origin, db_url, tmp_path)
    assert set(rows) == {"/ok", "/gzip-garbage", "/gzip-members"}, sorted(rows)
    for path, body in (("/gzip-garbage", garbage), ("/gzip-members", members)):
        assert rows[path]["payload_digest"] == hashlib.sha256(body).hexdigest()
        assert rows[path]["title"] == f"Page {path}"
    runner = CliRunner()
    status = runner.invoke(app, ["status", "--json", "--db", db_url])
    assert status.exit_code == 0, status.output
    assert '"protocol"' in status.output, status.output
