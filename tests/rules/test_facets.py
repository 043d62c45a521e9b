"""FacetLearner with plain values: which listing variants are fetched, learned from what the variants read added."""

from __future__ import annotations

from harvester.rules.facets import FacetChoice, FacetLearner
from harvester.settings import DEFAULT_FACET_PARAMS, DEFAULT_LISTING_PRESENTATION_PARAMS

BASE = "http://h/cat/shoes/"


def learner(useless_after: int = 3) -> FacetLearner:
    return FacetLearner(DEFAULT_FACET_PARAMS, DEFAULT_LISTING_PRESENTATION_PARAMS, useless_after=useless_after)


def read(facets: FacetLearner, url: str, added: int) -> FacetChoice:
    """Ask, then (unless refused) read the variant and report what it added, as the listing crawl does."""
    choice = facets.choose(url)
    if choice is FacetChoice.PROBE:
        facets.learned(url, added=added)
    return choice


def test_a_plain_listing_is_no_variant():
    facets = learner()
    assert facets.choose(BASE) is FacetChoice.PLAIN
    assert facets.choose(BASE + "?page=2") is FacetChoice.PLAIN
    assert facets.facets_of(BASE + "?Color=red&page=2") == ["color"]


def test_filters_that_add_nothing_cost_at_most_five_reads_on_a_three_parameter_site():
    facets = learner()
    fetched = 0
    for value in ("red", "blue", "green", "black", "white"):
        for name in ("color", "size", "brand"):
            for path in ("/cat/shoes/", "/cat/hats/"):
                if read(facets, f"http://h{path}?{name}={value}", added=0) is FacetChoice.PROBE:
                    fetched += 1
    # Three useless variants, then one probe of each parameter not yet tried (here the three came from two).
    assert fetched == 4
    assert facets.choose(BASE + "?brand=zzz") is FacetChoice.USELESS
    assert facets.counts["useless"] == fetched


def test_parameters_taken_in_turn_cost_the_first_three_and_one_probe_of_each_other():
    facets = learner()
    urls = [BASE + f"?{name}={value}" for name in ("color", "size", "brand") for value in ("a", "b", "c", "d")]
    fetched = [url for url in urls if read(facets, url, added=0) is FacetChoice.PROBE]
    assert fetched == [BASE + "?color=a", BASE + "?color=b", BASE + "?color=c", BASE + "?size=a", BASE + "?brand=a"]


def test_a_variant_that_adds_items_keeps_its_parameter_crawled():
    facets = learner()
    assert read(facets, BASE + "?color=red", added=0) is FacetChoice.PROBE
    assert read(facets, BASE + "?color=blue", added=2) is FacetChoice.PROBE
    for value in ("green", "black", "white", "grey"):
        assert read(facets, BASE + f"?color={value}", added=0) is FacetChoice.FETCH
    # Another parameter still gets the full trial: the site's filters have been seen to matter.
    for value in ("s", "m", "l"):
        assert read(facets, BASE + f"?size={value}", added=0) is FacetChoice.PROBE
    assert facets.choose(BASE + "?size=xl") is FacetChoice.USELESS
    assert facets.choose(BASE + "?color=cyan") is FacetChoice.FETCH


def test_a_useful_parameter_tried_after_useless_ones_still_gets_its_probe_and_wins():
    facets = learner()
    for value in ("red", "blue", "green"):
        read(facets, BASE + f"?color={value}", added=0)
    assert facets.choose(BASE + "?color=black") is FacetChoice.USELESS
    assert read(facets, BASE + "?brand=acme", added=1) is FacetChoice.PROBE
    assert facets.choose(BASE + "?brand=globex") is FacetChoice.FETCH


def test_a_variant_with_one_useful_parameter_is_fetched():
    facets = learner(useless_after=1)
    read(facets, BASE + "?color=red", added=0)
    read(facets, BASE + "?size=m", added=3)
    assert facets.choose(BASE + "?color=blue") is FacetChoice.USELESS
    assert facets.choose(BASE + "?color=blue&size=s") is FacetChoice.FETCH


def test_a_variant_read_before_any_verdict_is_asked_again_and_refused_once_the_verdict_is_in():
    facets = learner(useless_after=2)
    waiting = [BASE + f"?color={value}" for value in ("red", "blue", "green", "black")]
    assert all(facets.choose(url) is FacetChoice.PROBE for url in waiting)  # one claim batch
    facets.learned(waiting[0], added=0)
    facets.learned(waiting[1], added=0)
    assert [facets.choose(url) for url in waiting[2:]] == [FacetChoice.USELESS, FacetChoice.USELESS]


def test_presentation_of_a_listing_already_read_is_refused():
    facets = learner()
    assert facets.without_presentation(BASE + "?view=grid") == BASE
    assert facets.without_presentation(BASE + "?page=2&per_page=48") == BASE + "?page=2"
    assert facets.without_presentation(BASE + "?page=2") is None
    assert facets.presentation(BASE + "?view=grid", found_on=BASE)
    assert facets.presentation(BASE + "?color=red&limit=96", found_on=BASE + "?color=red")
    # Not read: admitted as it is (on some sites ``view`` selects the content, e.g. Joomla's view=category).
    assert not facets.presentation("http://h/index.php?id=3&option=com_content&view=category", found_on=BASE)
    assert not facets.presentation(BASE + "?page=2&per_page=48", found_on=BASE)
    facets.read_plain(BASE + "?page=2")
    assert facets.presentation(BASE + "?page=2&per_page=48", found_on=BASE)
    assert not facets.presentation(BASE + "?page=3", found_on=BASE)
