"""What a robots.txt change does to stored URLs, as the CLI says it, against a server of our own and its access log,
over daily runs on the harvester's clock (``HARVESTER_NOW`` 24 h apart), on SQLite and PostgreSQL.

Three defects: a URL refused at its redirect's target (``/c`` answers 301 to ``/private``, which robots.txt
refuses) was judged by its own path at any later robots.txt change, lifted, asked again for nothing and counted in
``urls_allowed_again``; ``Disallowed by robots.txt: N`` counted what a sitemap named that robots.txt refuses, stored
or not (a stored URL counted there only when its sitemap was read again, and called "neither fetched nor stored"),
while stored URLs refused by a rules change were left out; a holder page robots.txt refuses now left the snapshot
with its content, its duplicates still pointing at it, though their URL is allowed and live.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from daily_cli import HTML, article, cli_on, conditional, run_day

from harvester.testing.schedule import run_at
from harvester.testing.threaded_site import Answer, Asked, sitemap, threaded_site

LASTMOD = (run_at(0)).isoformat()


@pytest.fixture
def db_url(migrated_db_url: str) -> str:
    """No test here is about the migrations: PostgreSQL's case is the session's migrated database, emptied."""
    return migrated_db_url


@dataclass
class Site:
    """A site whose robots.txt disallows ``disallow`` of ``day``, its sitemap listing ``listed``; ``answers`` maps
    a path to its answer (a page, a redirect); every answer is logged as (day, path, status). Pages answer 304 to
    their ETag."""

    listed: list[str]
    answers: dict[str, Answer]
    disallow: dict[int, list[str]]
    day: int = 0
    log: list[tuple[int, str, int]] = field(default_factory=list)

    def respond(self, request: Asked) -> Answer:
        if request.path == "/robots.txt":
            rules = "".join(f"Disallow: {prefix}\n" for prefix in self.disallow.get(self.day, []))
            answer: Answer = (200, {"Content-Type": "text/plain"},
                              f"User-agent: *\n{rules}Sitemap: {request.origin}/sitemap.xml\n".encode())
        elif request.path == "/sitemap.xml":
            answer = sitemap(request.origin, dict.fromkeys(self.listed, LASTMOD))
        elif request.path in self.answers:
            answer = conditional(self.answers[request.path], request)
        else:
            answer = (404, {"Content-Type": "text/plain"}, b"")
        self.log.append((self.day, request.path, answer[0]))
        return answer

    def asked(self, day: int) -> list[tuple[str, int]]:
        return [(path, status) for d, path, status in self.log
                if d == day and path not in ("/robots.txt", "/sitemap.xml", "/")]


@pytest.fixture
def cli(db_url: str, clock: None) -> Callable[..., str]:
    return cli_on(db_url)


def day(cli: Callable[..., str], site: Site, n: int, origin: str, *args: str) -> str:
    """Day ``n``'s run (``run_day``: the harvest on day 0, a re-crawl after), its output."""
    site.day = n
    return run_day(cli, n, origin, *args)


def counter(out: str, name: str) -> int:
    """A discovery counter of a run's summary table (0 when the table leaves it out)."""
    found = re.search(rf"discover\s*│\s*{name}\s*│\s*(\d+)", out)
    return int(found.group(1)) if found else 0


def status(cli: Callable[..., str]) -> dict:
    return json.loads(cli("status", "--json"))


def test_a_url_refused_at_its_redirect_target_is_not_allowed_again_by_an_unrelated_change(
    cli: Callable[..., str],
) -> None:
    """/c answers 301 to /private, which robots.txt refuses: stored ``disallowed``. Day 1 robots.txt also refuses
    /a: /c is still refused (at /private), neither asked nor counted allowed again. Day 2 robots.txt allows
    /private: /c is asked again and counted, its redirect followed."""
    site = Site(listed=["/a", "/b", "/c"],
                answers={"/a": (200, {**HTML, "ETag": '"a"'}, article("A")), "/b": (200, {**HTML, "ETag": '"b"'},
                         article("B")), "/c": (301, {"Location": "/private"}, b""),
                         "/private": (200, {**HTML, "ETag": '"p"'}, article("Private"))},
                disallow={0: ["/private"], 1: ["/a", "/private"], 2: ["/a"]})
    with threaded_site(site.respond) as origin:
        day(cli, site, 0, origin)
        assert ("/c", 301) in site.asked(0) and ("/private", 200) not in site.asked(0)
        assert status(cli)["by_state"]["disallowed"] == 1

        out = day(cli, site, 1, origin, "--refresh")
        assert ("/c", 301) not in site.asked(1), site.asked(1)  # nothing allowed it: not asked for nothing
        assert counter(out, "urls_allowed_again") == 0, out
        assert counter(out, "urls_refused_now") == 1  # /a, harvested on day 0
        assert status(cli)["by_state"]["disallowed"] == 2

        out = day(cli, site, 2, origin)
        assert ("/c", 301) in site.asked(2) and ("/private", 200) in site.asked(2), site.asked(2)
        assert counter(out, "urls_allowed_again") == 1, out
        assert status(cli)["by_state"]["disallowed"] == 1  # /a


def test_disallowed_by_robots_txt_counts_every_url_robots_txt_refuses_once_stored_or_not(
    cli: Callable[..., str],
) -> None:
    """The sitemap lists /a (harvested on day 0, refused from day 1), /c (301 to /private, refused) and
    /private/x (refused from day 0, never stored). What robots.txt keeps from us, as the server's robots.txt and
    redirects say: day 0 /c and /private/x, day 1 all three. ``status`` (its line and per-host table, its JSON)
    and a harvest's summary say the same, each URL once; the stored ones are the ``disallowed`` column."""
    site = Site(listed=["/a", "/c", "/private/x"],
                answers={"/a": (200, {**HTML, "ETag": '"a"'}, article("A")), "/c": (301, {"Location": "/private"}, b""),
                         "/private/x": (200, HTML, article("X"))},
                disallow={0: ["/private"], 1: ["/a", "/private"], 2: ["/a", "/private"]})

    def check(out: str, refused: int, stored: int) -> None:
        figures = status(cli)
        host = figures["hosts"][origin]
        assert figures["last_discover"]["robots_refused"] == refused, figures
        assert figures["last_discover"]["robots_refused_by_host"] == {origin: refused}
        assert host["robots_refused"] == refused
        assert figures["by_state"].get("disallowed", 0) == host["states"].get("disallowed", 0) == stored
        line = f"Disallowed by robots.txt: {refused} URLs discovery found, each once"
        shown = " ".join(cli("status").split())
        assert line in shown and f"{stored} of them stored (state disallowed" in shown, shown
        assert f"{refused - stored} neither fetched nor stored" in shown
        if out:
            assert line in " ".join(out.split()), out

    with threaded_site(site.respond) as origin:
        out = day(cli, site, 0, origin)
        assert not any(path.startswith("/private") for path, _ in site.asked(0))
        check(out, 2, 1)  # /c stored (its 301 asked), /private/x never
        day(cli, site, 1, origin, "--refresh")  # the sitemap read again names /a
        check("", 3, 2)
        day(cli, site, 2, origin)
        check("", 3, 2)
        assert not [asked for asked in site.asked(2) if asked[0] in ("/a", "/c")]


def test_a_holder_robots_txt_refuses_now_leaves_its_content_in_the_snapshot_under_its_duplicate(
    cli: Callable[..., str], tmp_path: Path,
) -> None:
    """/one and /two serve the same article (weekly: not due for days): one holds it, the other is its duplicate.
    Day 1 robots.txt refuses the holder: it leaves ``export --latest``, and the duplicate, allowed and live, is asked
    that run and keeps the article in the snapshot under its own URL."""
    same = article("The same article")
    site = Site(listed=["/one", "/two"],
                answers={"/one": (200, {**HTML, "ETag": '"same"'}, same),
                         "/two": (200, {**HTML, "ETag": '"same"'}, same)},
                disallow={})

    def latest(n: int) -> list[str]:
        out = tmp_path / f"latest-{n}.jsonl"
        cli("export", "--latest", "-o", str(out))
        return sorted(json.loads(line)["url"].removeprefix(origin) for line in out.read_text().splitlines())

    with threaded_site(site.respond) as origin:
        day(cli, site, 0, origin)
        export = tmp_path / "all.jsonl"
        cli("export", "-o", str(export))
        states = {json.loads(line)["url"].removeprefix(origin): json.loads(line)["state"]
                  for line in export.read_text().splitlines()}
        assert status(cli)["by_state"].get("duplicate") == 1, states
        [holder] = latest(0)
        copy = "/two" if holder == "/one" else "/one"
        site.disallow[1] = [holder]
        day(cli, site, 1, origin)
        assert (holder, 200) not in site.asked(1) and (copy, 200) in site.asked(1), site.asked(1)
        assert latest(1) == [copy]
        figures = status(cli)
        assert figures["by_state"].get("disallowed") == 1 and not figures["by_state"].get("duplicate"), figures
