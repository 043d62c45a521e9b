"""A sitemap's URLs of another protocol, as a stranger's black-box test saw them
(stranger-ops, stop 46): real servers on 127.0.0.1 that log every request, the CLI's harvest and its daily
recrawl 24 h later on the harvester's clock, the server's log and the frontier the truth.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harvester.runtime import CLOCK
from harvester.testing.documents import TEXT, XML, urlset
from harvester.testing.documents import article as page
from harvester.testing.threaded_site import Answer, Asked, threaded_site

DAY0 = datetime(2026, 12, 8, 3, 0, tzinfo=UTC)


def origins(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {origin for origin, in conn.execute("SELECT origin FROM hosts")}


def test_a_sitemap_entry_of_another_protocol_is_dropped_with_a_problem_and_never_asked(
    cli: Callable[..., str], tmp_path: Path,
) -> None:
    """An http sitemap listing https://its-host/https-page: kept as host https://127.0.0.1:PORT, that host was
    parked "robots.txt unavailable (connect)" after TLS ClientHellos to the http port, and the page deferred every
    run. The entry is dropped (sitemaps.org: a sitemap's URLs use its protocol and host), said as a problem by
    class, and nothing is asked of the other scheme; a link to it from the home page is out of scope too."""
    asked: list[Asked] = []
    routes: dict[str, Answer] = {}

    def answer(request: Asked) -> Answer:
        asked.append(request)
        return routes.get(request.path) or (404, TEXT, b"")

    with threaded_site(answer) as origin:
        other = origin.replace("http://", "https://")
        routes["/robots.txt"] = (200, TEXT, f"User-agent: *\nSitemap: {origin}/map.xml\n".encode())
        routes["/map.xml"] = (200, XML, urlset([(f"{origin}/p1", None), (f"{other}/https-page", None)]))
        routes["/"] = (200, {"Content-Type": "text/html"},
                       f"<html><body><a href='{other}/linked'>x</a><a href='/p2'>y</a></body></html>".encode())
        for path in ("/p1", "/p2", "/https-page", "/linked"):
            routes[path] = (200, {"Content-Type": "text/html"}, page(path))
        CLOCK.travel_to(DAY0)
        summary = " ".join(cli("harvest", f"{origin}/").split())
        status = json.loads(cli("status", "--json"))["last_discover"]["problems"]
        CLOCK.travel_to(DAY0 + timedelta(hours=24, minutes=3))
        again = " ".join(cli("recrawl").split())
    assert "/p1" in {r.path for r in asked}  # control: the sitemap was read and its own entry asked
    assert origins(tmp_path / "harvester.db") == {origin}
    said = f"sitemap {origin}/map.xml: 1 entries of another protocol than the sitemap's dropped"
    assert said in summary and "out_of_scope:other_scheme" in summary and f"{other}/https-page" in summary
    assert any(said in problem for problem in status), status
    assert "parked" not in summary + again and "deferred: 0" in again

