"""Scenario ``broad``: a many-host test web harvested end to end by ``harvester harvest`` and by Scrapy, in one run.

    .venv/bin/pip install -e '.[bench]'        # Scrapy, the peer
    .venv/bin/python bench/broad.py [--hosts 200] [--pages 300] [--latency 0.005] [--limit 4] [--only harvester]

The test web (process mode, its own process: its CPU and memory are not counted) serves ``--hosts`` hosts of
``--pages`` detail pages each, every page in the sitemaps (so a sitemap crawler can find them all), answering
after ``--latency`` s. Each tool runs as its own process, as a user runs it, on default settings but the per-host
limit:

- harvester: ``harvester harvest SEED... --db sqlite:///… --per-host LIMIT`` (no Prefect server configured: the
  cycle runs in process), discovery (robots.txt, sitemaps, feeds, listing pages), extraction and storage included;
- Scrapy: a ``SitemapSpider`` from every host's robots.txt, ``ROBOTSTXT_OBEY``, ``CONCURRENT_REQUESTS_PER_DOMAIN =
  LIMIT`` with a download slot per host (Scrapy keys slots by host name, and every test host is 127.0.0.1), each
  page yielded as an item to a JSON-lines feed.

Printed for each: detail pages found (of all), requests made, requests over the per-host limit (the test web counts
what was in flight on the host when each arrived), wall time, CPU (user + system of the process and its children)
per detail page found, and peak RSS (``wait4``'s ``ru_maxrss``: the process or its largest child); then the ratios
harvester / Scrapy. Scrapy's slot limit is counted by Scrapy when a response has arrived; the test web counts a
request in flight until it has written the answer, and sees Scrapy above the limit on most requests (the harvester:
never). Figures are noisy on a shared 2-core machine (the test web competes for the same cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harvester.testing import HostSpec, TestWeb

USER_AGENT = "broad-bench/1.0 (+http://127.0.0.1/contact)"

SPIDER = '''
from urllib.parse import urlsplit

from scrapy.spiders import SitemapSpider


class PerHostSlots:
    """Scrapy keys download slots by host name; the test web's hosts differ by port only."""

    def process_request(self, request, spider=None):
        request.meta["download_slot"] = urlsplit(request.url).netloc


class Broad(SitemapSpider):
    name = "broad"
    custom_settings = {"DOWNLOADER_MIDDLEWARES": {__name__ + ".PerHostSlots": 1}}

    def __init__(self, seeds_file, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(seeds_file, encoding="utf-8") as f:
            self.sitemap_urls = [line.strip() + "robots.txt" for line in f if line.strip()]

    def parse(self, response):
        yield {"url": response.url, "bytes": len(response.body)}
'''


@dataclass(frozen=True)
class Outcome:
    """One tool's run, as the test web and the kernel saw it."""

    name: str
    found: int
    requests: int
    over_limit: int
    wall_s: float
    cpu_s: float
    peak_rss_mb: float

    @property
    def cpu_ms_per_page(self) -> float:
        return self.cpu_s / max(1, self.found) * 1e3


def specs(hosts: int, pages: int, latency: float) -> list[HostSpec]:
    """Every detail page in the sitemaps (and in feeds and listings too, as most sites publish them)."""
    return [HostSpec(f"h{i:04d}", pages=pages, latency_s=latency, disallowed_in_sitemap=0.0, sitemap_only=0.0,
                     feed_only=0.0, listing_only=0.0, page_bytes=(5_000, 8_000), sitemap_children=1)
            for i in range(hosts)]


def run_measured(name: str, args: list[str], env: dict[str, str], cwd: Path, web: TestWeb,
                 details: set[str], limit: int) -> Outcome:
    """Run one tool to its end; its CPU and peak RSS come from ``wait4`` on its process."""
    web.clear_records()
    log = cwd / f"{name}.log"
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)  # our commands
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    records = web.records()
    return Outcome(
        name=name,
        found=len({r.url for r in records if r.url in details and r.status == 200}),
        requests=len(records),
        over_limit=sum(1 for r in records if r.in_flight > limit),
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        peak_rss_mb=usage.ru_maxrss / 1024,
    )


def harvester(web: TestWeb, seeds: list[str], limit: int, tmp: Path, details: set[str]) -> Outcome:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "HARVESTER_"))}
    env.update({"PREFECT_HOME": str(tmp / "prefect"), "HARVESTER_HTTP__USER_AGENT": USER_AGENT})
    command = [str(Path(sys.executable).parent / "harvester"), "harvest", *seeds,
               "--db", f"sqlite:///{tmp / 'harvest.db'}", "--per-host", str(limit)]
    return run_measured("harvester", command, env, tmp, web, details, limit)


def scrapy(web: TestWeb, seeds: list[str], limit: int, tmp: Path, details: set[str]) -> Outcome:
    (tmp / "broad_spider.py").write_text(SPIDER, encoding="utf-8")
    (tmp / "seeds.txt").write_text("\n".join(seeds) + "\n", encoding="utf-8")
    settings = {
        "ROBOTSTXT_OBEY": "True", "CONCURRENT_REQUESTS": str(64 * limit), "CONCURRENT_REQUESTS_PER_DOMAIN": str(limit),
        "USER_AGENT": USER_AGENT,
        "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": "False", "FEEDS": '{"items.jsonl": {"format": "jsonlines"}}',
    }
    command = [sys.executable, "-m", "scrapy", "runspider", "broad_spider.py", "-a", f"seeds_file={tmp / 'seeds.txt'}"]
    for key, value in settings.items():
        command += ["-s", f"{key}={value}"]
    env = {**os.environ, "PYTHONPATH": str(tmp)}
    return run_measured("scrapy", command, env, tmp, web, details, limit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--latency", type=float, default=0.005)
    ap.add_argument("--limit", type=int, default=4, help="requests in flight per host, for both tools")
    ap.add_argument("--only", choices=("harvester", "scrapy"), default=None)
    args = ap.parse_args()
    tools = [args.only] if args.only else ["harvester", "scrapy"]
    if "scrapy" in tools and importlib.util.find_spec("scrapy") is None:
        raise SystemExit("Scrapy is the peer of this benchmark: `.venv/bin/pip install -e '.[bench]'` (or --only "
                             "harvester)")
    host_specs = specs(args.hosts, args.pages, args.latency)
    with TestWeb(host_specs, seed=9, mode="process") as web, tempfile.TemporaryDirectory() as tmp_dir:
        seeds = [web.origin(s.name) + "/" for s in host_specs]
        details = {url for s in host_specs for url in web.truth[s.name].detail_urls()}
        print(f"broad: {args.hosts} hosts x {args.pages} pages ({len(details)} detail pages), latency "
              f"{args.latency * 1e3:.0f} ms, limit {args.limit} per host; each tool in its own process")
        results = []
        for tool in tools:
            tmp = Path(tmp_dir) / tool
            tmp.mkdir()
            run = harvester if tool == "harvester" else scrapy
            results.append(run(web, seeds, args.limit, tmp, details))
    print(f"{'':<10}{'found':>14}{'requests':>10}{'over limit':>12}{'wall s':>9}{'CPU ms/page':>13}{'peak RSS MB':>13}")
    for r in results:
        print(f"{r.name:<10}{f'{r.found}/{len(details)}':>14}{r.requests:>10}{r.over_limit:>12}{r.wall_s:>9.1f}"
              f"{r.cpu_ms_per_page:>13.2f}{r.peak_rss_mb:>13.0f}")
    if len(results) == 2:
        ours, peer = results
        print(f"harvester / scrapy: wall {ours.wall_s / peer.wall_s:.2f}, CPU per page "
              f"{ours.cpu_ms_per_page / peer.cpu_ms_per_page:.2f}, peak RSS {ours.peak_rss_mb / peer.peak_rss_mb:.2f}")


if __name__ == "__main__":
    main()
