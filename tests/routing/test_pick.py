"""The per-request pick (routing/pick.py): near ties go to the less loaded, the best otherwise."""

from __future__ import annotations

import random
from pathlib import Path

from gateway.context import Candidate
from gateway.policy import Sort
from gateway.routing.figures import Figures
from gateway.routing.pick import best_of_head, cheap_weighted, cheap_weights
from tests.routing.helpers import catalogue, endpoint


def _head(tmp_path: Path, ttfts: list[float]) -> tuple[Candidate, ...]:
    cat = catalogue(tmp_path, [endpoint(f"p{i}") for i in range(len(ttfts))])
    return tuple(Candidate(e, Figures(100.0, ttft, 0.001, 0, 5, "measured"), 0)
                 for e, ttft in zip(cat.endpoints(), ttfts, strict=True))


def test_latency_near_tie_goes_to_the_less_loaded_and_reports_its_load_now(tmp_path: Path) -> None:
    head = _head(tmp_path, [200.0, 205.0])  # within near_equal (10%) of each other
    loads = {head[0].endpoint.key: 7, head[1].endpoint.key: 1}
    picks = {best_of_head(head, Sort.LATENCY, loads.__getitem__, 0.10, random.Random(seed)).endpoint.key
             for seed in range(20)}
    assert picks == {head[1].endpoint.key}
    pick = best_of_head(head, Sort.LATENCY, loads.__getitem__, 0.10, random.Random(0))
    assert pick.figures.in_flight == 1


def test_latency_picks_the_best_when_the_others_are_not_near(tmp_path: Path) -> None:
    head = _head(tmp_path, [900.0, 200.0, 950.0])
    idle = {c.endpoint.key: 0 for c in head} | {head[1].endpoint.key: 50}  # busy, yet far the fastest
    assert best_of_head(head, Sort.LATENCY, idle.__getitem__, 0.10, random.Random(1)).endpoint.key == \
        head[1].endpoint.key


def test_without_a_sort_the_cheaper_is_picked_more_often(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("cheap"), endpoint("dear")])
    cheap, dear = cat.endpoints()
    group = (Candidate(cheap, Figures(100.0, 200.0, 0.001, 0, 5, "measured"), 0),
             Candidate(dear, Figures(100.0, 200.0, 0.004, 0, 5, "measured"), 0))
    rng = random.Random(3)
    picks = [cheap_weighted(group, rng).endpoint.key for _ in range(2000)]
    assert 0.70 < picks.count(cheap.key) / len(picks) < 0.90  # 1/0.001 : 1/0.004 = 80%


def test_the_weights_kept_with_a_ranking_draw_as_random_choices_does(tmp_path: Path) -> None:
    """The ranking keeps the no-sort pick's cumulative weights (`cheap_weights`); a request then draws
    with them exactly what `random.choices` draws from the weights (an unpriced endpoint at the mean)."""
    cat = catalogue(tmp_path, [endpoint(f"p{i}") for i in range(5)])
    costs = [0.001, None, 0.004, 0.0005, 0.002]
    group = tuple(Candidate(e, Figures(100.0, 200.0, cost, 0, 5, "measured"), 0)
                  for e, cost in zip(cat.endpoints(), costs, strict=True))
    weights = [1.0 / x for x in (0.001, 0.001875, 0.004, 0.0005, 0.002)]
    kept = cheap_weights(group)
    a, b = random.Random(7), random.Random(7)
    for _ in range(500):
        assert cheap_weighted(group, a, kept) is b.choices(group, weights=weights)[0]
