"""Published URL cases, as data under tests/data/urls/ (each file names its source): RFC 3986 §5.4 resolution and
§6.2 equivalence through ``resolve`` + canonicalize, and the http(s) cases of WHATWG's urltestdata.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harvester.rules.urls import Canonicalizer, canonicalize, resolve
from harvester.settings import Settings

DATA = Path(__file__).resolve().parents[1] / "data" / "urls"
URLS = Settings().urls
RFC = json.loads((DATA / "rfc3986.json").read_text(encoding="utf-8"))
WHATWG = json.loads((DATA / "whatwg_urltestdata_http.json").read_text(encoding="utf-8"))


def _ids(rows: list[dict[str, Any]], key: str) -> list[str]:
    return [repr(row[key]) for row in rows]


@pytest.mark.parametrize("row", RFC["resolution_normal"] + RFC["resolution_abnormal"],
                         ids=_ids(RFC["resolution_normal"] + RFC["resolution_abnormal"], "ref"))
def test_rfc3986_reference_resolution_examples(row: dict[str, Any]) -> None:
    base = RFC["base"]
    assert canonicalize(row["ref"], base=base, settings=URLS) == row["canonical"]
    assert Canonicalizer(URLS, cache_size=0).slow(row["ref"], base) == row["canonical"]
    if row["canonical"] is not None:
        # resolve + canonicalize is the RFC's target up to the canonical form (dot segments removed later).
        assert canonicalize(resolve(base, row["ref"]), settings=URLS) == row["canonical"]
        assert canonicalize(row["rfc"], settings=URLS) == row["canonical"]


@pytest.mark.parametrize("group", RFC["equivalent"], ids=[g["section"] for g in RFC["equivalent"]])
def test_rfc3986_equivalent_spellings_give_one_key(group: dict[str, Any]) -> None:
    assert {canonicalize(url, settings=URLS) for url in group["spellings"]} == {group["canonical"]}
    if "different_from" in group:  # control: a URI that is not equivalent keeps its own key
        assert canonicalize(group["different_from"], settings=URLS) != group["canonical"]


@pytest.mark.parametrize("case", WHATWG["cases"], ids=_ids(WHATWG["cases"], "input"))
def test_whatwg_http_cases_agree_up_to_the_canonical_form(case: dict[str, Any]) -> None:
    assert canonicalize(case["input"], base=case["base"], settings=URLS) == case["canonical"]


def test_whatwg_exclusions_still_differ_and_each_has_a_reason() -> None:
    """An excluded case that starts to agree belongs in ``cases``: the exclusions stay true."""
    assert set(WHATWG["excluded"]) <= set(WHATWG["excluded_reasons"])
    for reason, cases in WHATWG["excluded"].items():
        for case in cases:
            got = canonicalize(case["input"], base=case["base"], settings=URLS)
            assert got == case["harvester"], (reason, case)
            expected = None if case["href"] is None else canonicalize(case["href"], settings=URLS)
            assert got != expected, (reason, case)


URL_NORMALIZE = json.loads((DATA / "url_normalize.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", URL_NORMALIZE["cases"],
                         ids=[f"{c['source']}:{c['input']!r}" for c in URL_NORMALIZE["cases"]])
def test_url_normalize_cases_agree_up_to_the_canonical_form(case: dict[str, Any]) -> None:
    assert canonicalize(case["input"], base=case["base"], settings=URLS) == case["canonical"]


def test_url_normalize_exclusions_still_differ_and_each_has_a_reason() -> None:
    """Each difference from niksite/url-normalize is one the RFC decides (the reasons say how): still true."""
    assert set(URL_NORMALIZE["excluded"]) == set(URL_NORMALIZE["excluded_reasons"])
    assert sum(map(len, URL_NORMALIZE["excluded"].values())) + len(URL_NORMALIZE["cases"]) == 135
    for reason, cases in URL_NORMALIZE["excluded"].items():
        for case in cases:
            assert canonicalize(case["input"], base=case["base"], settings=URLS) == case["harvester"], (reason, case)
