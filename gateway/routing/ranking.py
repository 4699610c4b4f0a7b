"""Ordering candidates: sort keys, premium tiers that spill, soft thresholds, and `order`.

All functions are pure: candidates and figures in, a new order out. The steps, in the order the
router applies them:

1. `rank()`: by tier group, then by the sort key (throughput: predicted end-to-end time of this
   request at the load it would join, plus the time it adds to the others, lowest first (curve.py);
   latency: TTFT with this prompt's prefill, lowest first; e2e: that plus the output's decode at the
   load it would join, lowest first; price: estimated cost of this request, lowest first).
2. `spill_premium()`: a fast or ultrafast endpoint that is at capacity, or predicted slower than the
   best endpoint of the next tier down, moves behind that tier ("capacity" / "slower"): paying for
   speed must never buy less.
3. `soft_thresholds()`: endpoints that miss `preferred_min_throughput` or `preferred_max_latency`
   move to the back; they serve only when nothing meets them.
4. `prefer_order()`: endpoints named in `order` go first, in that order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gateway.config import Tier
from gateway.context import Candidate, Preferences, Spill
from gateway.policy import PercentileThreshold, Sort
from gateway.routing.figures import Figures
from gateway.routing.filters import matches
from gateway.telemetry.stats import EndpointStats

PREMIUM = frozenset({Tier.FAST, Tier.ULTRAFAST})
# The sorts as plain names: looking an enum member up on its class costs ~0.2 µs (Python 3.11), and
# `sort_value` runs per candidate, per request for the head of a ranking.
_THROUGHPUT, _LATENCY, _E2E = Sort.THROUGHPUT, Sort.LATENCY, Sort.E2E


def sort_value(sort: Sort | None, figures: Figures) -> float:
    """Smaller is better; unknown figures sort last."""
    if sort is _THROUGHPUT:  # the predicted time of this request plus what it adds to others
        return figures.score_s
    if sort is _LATENCY:
        return figures.ttft_ms if figures.ttft_ms is not None else math.inf
    if sort is _E2E:  # TTFT with this prompt's prefill + its output at the decode rate of its load
        return figures.e2e_s if figures.e2e_s is not None else math.inf
    return figures.cost_usd if figures.cost_usd is not None else math.inf


def rank(candidates: Sequence[Candidate], sort: Sort | None) -> list[Candidate]:
    return sorted(candidates, key=lambda c: (c.tier_rank, sort_value(sort, c.figures)))


def _at_capacity(c: Candidate) -> bool:
    limit = c.endpoint.max_concurrency
    return limit is not None and c.figures.in_flight >= limit


def spill_premium(candidates: list[Candidate]) -> tuple[list[Candidate], list[Spill]]:
    """Move premium endpoints that would buy less behind the next tier group (see module doc)."""
    spills: list[Spill] = []
    ranks = sorted({c.tier_rank for c in candidates})
    out = list(candidates)
    for r, next_r in itertools.pairwise(ranks):
        below = [c.figures.decode_tps for c in out if c.tier_rank == next_r and c.figures.decode_tps]
        best_below = max(below, default=None)
        for c in [c for c in out if c.tier_rank == r and c.endpoint.tier in PREMIUM]:
            reason = None
            if _at_capacity(c):
                reason = "capacity"
            elif best_below and c.figures.decode_tps and c.figures.decode_tps < best_below:
                reason = "slower"
            if reason is None:
                continue
            out.remove(c)
            last_of_next = max(i for i, o in enumerate(out) if o.tier_rank == next_r)
            out.insert(last_of_next + 1, replace(c, notes=(*c.notes, reason)))
            spills.append(Spill(c.endpoint.id, reason))
    return out, spills


_THROUGHPUT_PERCENTILE = {"p75": "p25", "p90": "p25", "p99": "p25"}


def _misses(threshold: PercentileThreshold | None, stats: EndpointStats | None, figures: Figures,
            throughput: bool) -> bool:
    if threshold is None:
        return False
    dist = None if stats is None else (stats.decode_tps if throughput else stats.ttft_ms)
    for name in ("p50", "p75", "p90", "p99"):
        limit = getattr(threshold, name)
        if limit is None:
            continue
        if throughput:
            # "p90 >= X" reads "90% of requests get at least X": a low percentile of the rate
            # (the sketch keeps p25 as its lowest, used for p75 and above).
            # p50 is the load-aware prediction, not yesterday's median.
            use_prediction = name == "p50" or not dist
            value = figures.decode_tps if use_prediction else getattr(dist, _THROUGHPUT_PERCENTILE[name])
            if value is not None and value < limit:
                return True
        else:
            value_ms = getattr(dist, name) if dist else figures.ttft_ms
            if value_ms is not None and value_ms / 1000.0 > limit:
                return True
    return False


def soft_thresholds(candidates: list[Candidate], prefs: Preferences,
                    stats: Mapping[str, EndpointStats]) -> list[Candidate]:
    if prefs.min_throughput is None and prefs.max_latency_s is None:
        return candidates
    meet, miss = [], []
    for c in candidates:
        s = stats.get(c.endpoint.key)
        if _misses(prefs.min_throughput, s, c.figures, True):
            miss.append(replace(c, notes=(*c.notes, "below preferred_min_throughput")))
        elif _misses(prefs.max_latency_s, s, c.figures, False):
            miss.append(replace(c, notes=(*c.notes, "above preferred_max_latency")))
        else:
            meet.append(c)
    return meet + miss


def prefer_order(candidates: list[Candidate], order: Sequence[str]) -> list[Candidate]:
    if not order:
        return candidates
    first: list[Candidate] = []
    for name in order:
        first += [c for c in candidates if c not in first and matches(c.endpoint, (name,))]
    return first + [c for c in candidates if c not in first]
