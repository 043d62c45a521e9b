"""Main text quality on public article data: our extractor (``harvester.extraction.content``) against trafilatura,
side by side in one run; and the CPU a harvest spends per page with and without the export's text.

    .venv/bin/python bench/text_quality.py [--data PATH] [--rounds 1]
    .venv/bin/python bench/text_quality.py --harvest [--pages 300]

The data is scrapinghub's article-extraction-benchmark (181 news and blog pages, each with its article text written
by a person): not in this repository. Get it with
    git clone https://github.com/scrapinghub/article-extraction-benchmark /work/data/article-extraction-benchmark
(only ``html/*.html.gz`` and ``ground-truth.json`` are read). The score is theirs (evaluate.py), written anew here:
per page, 4-token shingles (``\\w+`` tokens) of the extracted text against the human text give tp/fp/fn shares;
precision and recall are means over pages, F1 their harmonic mean. Times are process CPU per page, parse included.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from harvester.export import MainText, export_jsonl
from harvester.extraction.content import main_content_text
from harvester.extraction.model import parse_html_text

DEFAULT_DATA = Path("/work/data/article-extraction-benchmark")
TOKEN = re.compile(r"\w+")
SHINGLE = 4


def shingles(text: str) -> Counter[tuple[str, ...]]:
    tokens = TOKEN.findall(text or "")
    if len(tokens) < SHINGLE:
        return Counter([tuple(tokens)] if tokens else [])
    return Counter(tuple(tokens[i:i + SHINGLE]) for i in range(len(tokens) - SHINGLE + 1))


def shares(true: str, pred: str) -> tuple[float, float, float]:
    """tp, fp, fn over shingles, as shares of their sum (a long article weighs what a short one does)."""
    want, got = shingles(true), shingles(pred)
    tp = sum((want & got).values())
    fp = sum((got - want).values())
    fn = sum((want - got).values())
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total else (0.0, 0.0, 0.0)


def scores(per_page: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """F1, precision, recall as evaluate.py defines them: a page with no text on either side counts as perfect."""
    def ratio(tp: float, other: float, fp: float, fn: float) -> float:
        if fp == fn == 0:
            return 1.0
        return 0.0 if tp == other == 0 else tp / (tp + other)

    precision = statistics.mean(ratio(tp, fp, fp, fn) for tp, fp, fn in per_page if tp + fp > 0)
    recall = statistics.mean(ratio(tp, fn, fp, fn) for tp, fp, fn in per_page if tp + fn > 0)
    return 2 * precision * recall / (precision + recall), precision, recall


def ours(html: str) -> str:
    root = parse_html_text(html, for_extraction=True)
    return main_content_text(root) if root is not None else ""


def load(data: Path) -> list[tuple[str, str, str]]:
    truth_file, html_dir = data / "ground-truth.json", data / "html"
    if not truth_file.is_file() or not html_dir.is_dir():
        # Skipped, not failed: `make bench` runs every bench on machines without the data.
        print(f"skipped: --data {data} has no ground-truth.json and html/. Get the data set with\n"
              f"  git clone https://github.com/scrapinghub/article-extraction-benchmark {data}", file=sys.stderr)
        sys.exit(0)
    truth = json.loads(truth_file.read_text())
    pages = []
    for key, item in sorted(truth.items()):
        html = gzip.decompress((html_dir / f"{key}.html.gz").read_bytes()).decode("utf-8", errors="replace")
        pages.append((item.get("url") or "", html, item.get("articleBody") or ""))
    return pages


def quality(data: Path, rounds: int) -> None:
    pages = load(data)
    main = MainText()
    extractors: dict[str, Callable[[str, str], str]] = {
        "harvester.extraction.content": lambda html, _url: ours(html),
        main.version: lambda html, url: main.text(html, url) or "",
    }
    print(f"{len(pages)} pages from {data}; rounds: {rounds} (CPU per page is the best round)")
    print(f"{'extractor':<30} {'F1':>6} {'prec.':>6} {'recall':>6} {'ms/page':>8}")
    for name, extract in extractors.items():
        best = float("inf")
        texts: list[str] = []
        for _ in range(rounds):
            started = time.process_time()
            texts = [extract(html, url) for url, html, _true in pages]
            best = min(best, (time.process_time() - started) / len(pages) * 1000)
        f1, precision, recall = scores([shares(true, text) for (_u, _h, true), text in zip(pages, texts, strict=True)])
        print(f"{name:<30} {f1:6.3f} {precision:6.3f} {recall:6.3f} {best:8.1f}")


def harvest_cost(pages: int) -> None:
    """CPU of this process (the test web runs in a child process) per page: harvest, then export with and
    without the text."""
    from harvester import harvest
    from harvester.frontier import FrontierStore
    from harvester.settings import Settings
    from harvester.site_profile import SiteProfile
    from harvester.testing import HostSpec, TestWeb

    with tempfile.TemporaryDirectory() as tmp, TestWeb([HostSpec("t", pages=pages)], seed=7, mode="process") as web:
        settings = Settings.load(database_url=f"sqlite:///{tmp}/bench.db")
        started = time.process_time()
        harvest(settings, SiteProfile.build(seeds=tuple(web.seeds)))
        harvest_s = time.process_time() - started
        main = MainText()
        with FrontierStore.open(settings) as store:
            costs = {}
            for label, with_text in (("export", None), ("export --text", main)):
                out = Path(tmp) / "out.jsonl"
                started = time.process_time()
                with out.open("wb") as stream:
                    stored = export_jsonl(store.iter_pages(), stream, main=with_text)
                costs[label] = (time.process_time() - started) / stored * 1000
    per_page = harvest_s / stored * 1000
    print(f"{stored} pages stored; CPU per stored page (ms): harvest {per_page:.1f}, "
          f"export {costs['export']:.2f}, export --text {costs['export --text']:.1f}")
    plain, text = per_page + costs["export"], per_page + costs["export --text"]
    print(f"harvest + export: {plain:.1f} ms/page; with --text {text:.1f} ms/page ({text / plain:.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the benchmark's checkout (see above)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--harvest", action="store_true", help="CPU per page of a harvest, with and without text")
    parser.add_argument("--pages", type=int, default=300)
    args = parser.parse_args()
    if args.harvest:
        harvest_cost(args.pages)
    else:
        quality(args.data, args.rounds)


if __name__ == "__main__":
    main()
