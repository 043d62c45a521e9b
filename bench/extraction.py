"""CPU per page of ``extract_page`` (metadata, main-content hash, JSON-LD, outlinks) over test-web detail pages.

    .venv/bin/python bench/extraction.py [--pages 50] [--rounds 5]

Process CPU time only (the test web runs in a thread and is idle while timing). Noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import time

import httpx

from harvester.extraction import extract_page
from harvester.records import FetchResult
from harvester.settings import Settings
from harvester.testing import HostSpec, TestWeb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    settings = Settings()
    with TestWeb([HostSpec("x", pages=args.pages)], seed=2) as web, httpx.Client() as client:
        responses = [(url, client.get(url)) for url in web.truth["x"].detail_urls()]
    results = [
        FetchResult(url=url, final_url=url, status=200, started_at=0.0, elapsed_s=0.0, body=r.content,
                    content_type=r.headers.get("content-type"), headers=dict(r.headers))
        for url, r in responses
    ]
    size = sum(len(r.body or b"") for r in results) / len(results)
    for round_ in range(args.rounds):
        started = time.process_time()
        for result in results:
            extract_page(result, settings=settings)
        per_page = (time.process_time() - started) / len(results) * 1000
        print(f"round {round_ + 1}: {per_page:.2f} ms CPU per page ({len(results)} pages, {size:,.0f} bytes avg)")


if __name__ == "__main__":
    main()
