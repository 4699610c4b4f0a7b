"""The per-request pick among a ranking's candidates, once neither stickiness nor exploration has
decided: the fastest with live load (`sort: throughput` / `e2e`), the best of the head by the sort's
value, or, without a sort, at random weighted toward the cheaper; near ties go to the less loaded of
two (power of two choices). Then what a failure falls back to, in order."""

from __future__ import annotations

import itertools
import random
from bisect import bisect
from collections.abc import Callable, Sequence
from math import inf
from operator import itemgetter
from typing import TypeVar

from gateway.context import Candidate
from gateway.policy import Sort
from gateway.routing.curve import Prediction
from gateway.routing.figures import Figures, with_prediction
from gateway.routing.ranked import Ranked, Scored
from gateway.routing.ranking import sort_value

T = TypeVar("T")


def fastest_now(ranked: Ranked, scored: list[Scored], near_equal: float, rng: random.Random,
                predicted: Callable[[Scored], Prediction]) -> Candidate:
    """Throughput: the least predicted time plus marginal cost among the live candidates
    (live.py `score_live`); within `near_equal` of it the lowest tier rank (a premium tier asked for
    while it is not slower), then the less loaded of two. If every one is at its limit, the
    cached order's first. `predicted`: the pick's full prediction, for its figures."""
    best = inf
    for s in scored:  # (plain loops: a comprehension costs a few tenths of a µs before its first item)
        if s[0] < best:
            best = s[0]
    if best == inf:
        return ranked.candidates[0]
    limit = best * (1.0 + near_equal)
    near: list[Scored] = []  # those within `limit` of the lowest tier rank among them, in order
    top_rank = None
    for s in scored:
        if s[0] <= limit:
            if top_rank is None or s[1] < top_rank:
                top_rank, near = s[1], [s]
            elif s[1] == top_rank:
                near.append(s)
    if len(near) >= 2:
        a, b = two_of(near, rng)  # power of two choices: the less loaded of two
        pick = a if a[2] <= b[2] else b
    else:
        pick = near[0]
    c = pick[4]
    return Candidate(c.endpoint, with_prediction(c.figures, predicted(pick)), c.tier_rank, c.notes)


def best_of_head(head: tuple[Candidate, ...], sort: Sort, in_flight_of: Callable[[str], int], near_equal: float,
                 rng: random.Random) -> Candidate:
    """`sort: latency` / `price` and others without a live choice: the best of the head by the sort's
    value with in-flight counts as of now."""
    scored = []
    for c in head:
        in_flight = in_flight_of(c.endpoint.key)
        f = c.figures
        f = Figures(f.decode_tps, f.ttft_ms, f.cost_usd, in_flight, f.samples, f.source)
        scored.append((sort_value(sort, f), in_flight, f, c))
    scored.sort(key=lambda s: s[0])
    best = scored[0][0]
    tolerance = near_equal * abs(best)
    near = [s for s in scored if s[0] - best <= tolerance]
    pick = scored[0]
    if len(near) >= 2:
        a, b = two_of(near, rng)  # power of two choices: the less loaded of two
        pick = a if a[1] <= b[1] else b
    c = pick[3]
    return Candidate(c.endpoint, pick[2], c.tier_rank, c.notes)


def cheap_weighted(group: Sequence[Candidate], rng: random.Random, cum_weights: list[float] | None = None
                   ) -> Candidate:
    """Without a sort: at random, weighted by 1/price (an unpriced endpoint at the mean price).
    `cum_weights`: `cheap_weights(group)`, kept with the ranking (a request draws the same with it)."""
    cum = cum_weights or cheap_weights(group)
    # `rng.choices(group, cum_weights=cum)[0]` without its checks and list: the same draw.
    return group[bisect(cum, rng.random() * (cum[-1] + 0.0), 0, len(group) - 1)]


def two_of(items: Sequence[T], rng: random.Random) -> tuple[T, T]:
    """`rng.sample(items, 2)`, the same two from the same draws, without its generic checks (several
    µs of the live choice, which samples two per request). CPython's `sample` draws `_randbelow(n)`,
    then `_randbelow(n - 1)` from what is left with the last item moved into the first's place."""
    n = len(items)
    if n > 21:  # `sample` draws differently from a large population
        a, b = rng.sample(items, 2)
        return a, b
    # `_randbelow(n)`, inline (Python 3.11's `_randbelow_with_getrandbits`: two calls fewer per request).
    getrandbits = rng.getrandbits
    k = n.bit_length()
    i = getrandbits(k)
    while i >= n:
        i = getrandbits(k)
    k = (n - 1).bit_length()
    j = getrandbits(k)
    while j >= n - 1:
        j = getrandbits(k)
    return items[i], items[n - 1 if j == i else j]


def cheap_weights(group: Sequence[Candidate]) -> list[float]:
    """`cheap_weighted`'s cumulative weights, as `random.choices` accumulates them."""
    costs = [c.figures.cost_usd for c in group]
    known = [x for x in costs if x]
    fallback = sum(known) / len(known) if known else 1.0
    return list(itertools.accumulate(1.0 / (x or fallback) for x in costs))


def fallback_order(ranked: Ranked, scored: list[Scored], chosen: Candidate) -> tuple[Candidate, ...]:
    """The plan's order: the choice, then what a failure (a 429's cool-down among them) falls back to: the live
    candidates by their score now, as the choice itself was made (the tier breaking ties), those
    at their limit or kept out by health last; then the rest in the cached order. Not the cached
    order alone: it can be 250 ms old and put a claim first that has since taken its trial
    share. Not tier first either: a premium tier measured slower than the standard one (a false
    claim) would take every fallback."""
    key = chosen.endpoint.key
    rest = ranked.not_live
    keys = ranked.live_keys
    if key in keys:  # (slices and C calls: no comprehension's frame per request)
        i = keys.index(key)
        live = sorted(scored[:i] + scored[i + 1:], key=_score_rank)
    else:  # chosen from outside the live set (explored, sticky): not twice
        live = sorted(scored, key=_score_rank)
        i = ranked.not_live_index.get(key)
        rest = (*rest[:i], *rest[i + 1:]) if i is not None else tuple(c for c in rest if c.endpoint.key != key)
    return (chosen, *map(_candidate, live), *rest)


_score_rank = itemgetter(0, 1)  # of a `Scored`
_candidate = itemgetter(4)  # of a `Scored`
