"""discover_flow met by the process's stop: every host records what it has read or has on the wire before the flow
ends, so its rerun asks none of it again (issue 31: "a kill (or a stop) repeats only what was in flight").

The flow runs each host as a task of its own. Before, the first host to meet the stop (at its next request) raised
``Interrupted`` out of the flow's task group, which cancelled the other hosts' tasks: a feed page they had on the
wire was lost with them and asked again by the rerun (tests/flows/test_shutdown.py saw ``/feeds/rss.xml?page=3``
and ``?page=4`` of one host, and another host's ``/feeds/atom.xml``, fetched twice). The servers force the order:
host P's paged feed has page 3 on the wire when the stop is requested (from P's own handler), and holds it until
host Q's task has ended with the stop; Q's feed head is held until the stop was requested, so its next page, its next
request, meets it. The servers' own logs say what was answered in the stopped run and what the rerun asked.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from conftest import prepared

from harvester.errors import Interrupted
from harvester.frontier import FrontierStore
from harvester.runtime import clear_stop
from harvester.settings import Settings
from harvester.site_profile import SiteProfile
from harvester.testing.stopping_site import WAIT_S, StoppingSite
from harvester.testing.threaded_site import Answer, threaded_site

PAGES = 6


def rss(origin: str, path: str, posts: range, following: str | None) -> Answer:
    items = "".join(f"<item><title>{n}</title><link>{origin}/posts/{n}</link></item>" for n in posts)
    link = f'<atom:link rel="next" href="{origin}{following}"/>' if following else ""
    return 200, {"Content-Type": "application/rss+xml"}, (
        f'<?xml version="1.0"?><rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom"><channel><title>{path}'
        f"</title><link>{origin}/</link>{link}{items}</channel></rss>").encode()


class Site(StoppingSite):
    """A site of feed pages (``pages``: path -> its posts and the next page) whose request ``hold`` is held on the wire
    (its first time) until ``until``."""

    def __init__(self, pages: dict[str, tuple[range, str | None]], hold: str, until: threading.Event,
                 held: threading.Event, *, stop_first: bool = False, head_after: threading.Event | None = None,
                 ) -> None:
        super().__init__(until, held, stop_first=stop_first)
        self.pages = pages
        self.hold = hold
        self.head_after = head_after
        """Set before the site's first feed document is answered (the other host's discovery has begun)."""
        self.robots_asked = threading.Event()

    def holds(self, path: str) -> bool:
        return path == self.hold and all(asked != path for asked, _ in self.asked)

    def arrived(self, path: str) -> None:
        if path == "/robots.txt":
            self.robots_asked.set()
        elif self.head_after is not None:
            self.head_after.wait(WAIT_S)

    def page(self, path: str) -> Answer:
        if path in self.pages:
            posts, following = self.pages[path]
            return rss(self.origin, path, posts, following)
        return 200, {"Content-Type": "text/html"}, b"<html><body>a post</body></html>"


async def test_a_stopped_discover_flow_lets_every_host_record_what_it_has_on_the_wire(
    prefect_api, sqlite_url, monkeypatch, stopped
):
    from harvester.flows import discover as flows_discover
    from harvester.flows.discover import discover_flow

    q_stopped = threading.Event()
    numbered = {f"/feed?page={n}": (range(10 * n, 10 * n + 5), f"/feed?page={n + 1}" if n < PAGES else None)
                for n in range(1, PAGES + 1)}
    paged = {"/atom.xml": (range(500, 505), "/atom-older.xml"), "/atom-older.xml": (range(505, 510), None)}
    # Q's head is answered once the stop was requested (P's page 3 is on the wire): its next page, its next request,
    # meets the stop. P reads its feed once Q's discovery has begun (it asked robots.txt).
    p_held = threading.Event()
    q = Site(paged, "/atom.xml", p_held, threading.Event())
    p = Site(numbered, "/feed?page=3", q_stopped, p_held, stop_first=True, head_after=q.robots_asked)
    host_task = flows_discover.discover_host

    async def spied(profile: SiteProfile, origin: str, *args: Any) -> Any:
        try:
            return await host_task(profile, origin, *args)
        except Interrupted:
            if origin == q.origin:
                q_stopped.set()  # Q's task ended with the stop, beside P's: P's page 3 is answered now
            raise

    monkeypatch.setattr(flows_discover, "discover_host", spied)
    with threaded_site(p.answer) as p.origin, threaded_site(q.answer) as q.origin:
        profile = SiteProfile.build(seeds=(f"{p.origin}/feed?page=1", f"{q.origin}/atom.xml"), name="stopping",
                                    use_sitemaps=False, use_listings=False, per_host_limit=2)
        overrides = prepared(sqlite_url)
        with pytest.raises(Interrupted):
            await discover_flow(profile, overrides=overrides)
        assert q_stopped.is_set()  # control: Q met the stop while P had page 3 on the wire
        with p.lock, q.lock:
            answered = {"p": list(p.answered), "q": list(q.answered)}
            asked_before = {"p": len(p.asked), "q": len(q.asked)}
        assert "/feed?page=3" in answered["p"], answered  # control: answered after the stop was requested
        assert "/atom-older.xml" not in {path for path, _ in q.asked}, q.asked  # nothing sent after the stop

        clear_stop()
        again = await discover_flow(profile, overrides=overrides, return_state=True)
        assert again.is_completed(), again
        with p.lock, q.lock:
            rerun = {"p": Counter(path for path, _ in p.asked[asked_before["p"]:]),
                     "q": Counter(path for path, _ in q.asked[asked_before["q"]:])}
            unconditional = {"p": [path for path, conditional in p.asked[asked_before["p"]:] if not conditional],
                             "q": [path for path, conditional in q.asked[asked_before["q"]:] if not conditional]}
    repeated = {name: sorted(path for path in answered[name] if path in unconditional[name]) for name in ("p", "q")}
    assert repeated == {"p": [], "q": []}, f"answered in the stopped run and asked again in full: {repeated}"
    asked_again = {name: sorted(path for path in answered[name] if rerun[name][path]) for name in ("p", "q")}
    assert asked_again == {"p": [], "q": []}, f"answered in the stopped run and asked again: {asked_again}"
    assert rerun["q"]["/atom-older.xml"] == 1, rerun  # control: the rerun went on where the stop cut
    with FrontierStore.open(Settings.load(database_url=sqlite_url)) as store:
        states = store.url_states()
    wanted = [f"{p.origin}/posts/{n}" for path, (posts, _) in numbered.items() for n in posts]
    wanted += [f"{q.origin}/posts/{n}" for path, (posts, _) in paged.items() for n in posts]
    assert [url for url in wanted if url not in states] == [], sorted(states)
