"""The numbers an endpoint is ranked by: predicted decode rate, TTFT and price for this request.

Measured figures win over advertised ones as soon as an endpoint has samples; the catalogue's
`advertised` figures are priors, used only until then. Decode rate and TTFT are predicted *at the load
the endpoint would have with this request added* (speed.py: a fitted curve of speed against load per
endpoint), with the end-to-end time and the time the request would add to those already there.

This module computes figures; it does not order or filter endpoints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from gateway.config import Endpoint
from gateway.routing.curve import Prediction, concurrency_limit, predict
from gateway.routing.speed import SpeedModel
from gateway.telemetry.stats import EndpointStats

# Output tokens assumed when the request does not cap them, to price a request.
DEFAULT_OUTPUT_TOKENS = 512
MIN_SAMPLES = 3


class Figures(NamedTuple):
    """(A tuple: one is made per live choice, and a NamedTuple is built in C, a frozen dataclass field by field.)"""

    decode_tps: float | None  # predicted per-user decode rate at `load`
    ttft_ms: float | None
    cost_usd: float | None  # estimated cost of this request; None if unknown
    in_flight: int
    samples: int
    source: str  # "measured" | "advertised" | "none"
    load: int = 0  # in flight with this request added: the load it was judged at
    e2e_s: float | None = None  # predicted end-to-end for this request
    marginal_s: float = 0.0  # time it would add to the requests already in flight
    score_s: float = math.inf  # what throughput selection minimises (curve.py)
    capacity: int | None = None  # max_concurrency or learned from 429s, whichever is lower


def estimated_cost(endpoint: Endpoint, prompt_tokens: int, max_tokens: int | None,
                   stats: EndpointStats, cached_tokens: int = 0) -> float | None:
    """USD for this request: `cached_tokens` of its prompt at the cached price, all at the rates of its
    context size (`price.long_context`)."""
    output = max_tokens or DEFAULT_OUTPUT_TOKENS
    if endpoint.price is not None:
        return endpoint.price.cost(prompt_tokens, cached_tokens, output)
    if endpoint.hourly_cost is not None and stats.requests and stats.window_s:
        # Rented capacity: what a token really costs is the hourly price over measured throughput.
        aggregate_tps = stats.tokens.output / stats.window_s
        if aggregate_tps > 0:
            return endpoint.hourly_cost / (aggregate_tps * 3600.0) * output
    return None


def output_tokens(max_tokens: int | None, stats: Iterable[EndpointStats]) -> int:
    """Output tokens to expect, the same for every candidate of a request: its cap, else the mean of
    the model's recent answers, else a default."""
    if max_tokens:
        return max_tokens
    ok = out = 0
    for s in stats:
        if s.ok >= MIN_SAMPLES:
            ok, out = ok + s.ok, out + s.tokens.output
    return max(1, out // ok) if ok and out else DEFAULT_OUTPUT_TOKENS


def failure_rate(stats: EndpointStats) -> float:
    """Errors that make an endpoint flaky; 429s are capacity, learned apart (speed.py)."""
    return max(0.0, stats.error_rate - stats.rate_limited_rate)


def figures_for(endpoint: Endpoint, stats: EndpointStats, model: SpeedModel | None, in_flight: int,
                prompt_tokens: int, max_tokens: int | None, capacity: int | None = None,
                n_tokens: int | None = None) -> Figures:
    """`stats` (the window's, every replica's) gives the shared speed-vs-load fit; `model` the local one.
    `n_tokens`: the output expected (`output_tokens`), by default from this endpoint alone."""
    n = n_tokens or output_tokens(max_tokens, (stats,))
    # Ranked as a cold prompt: whether this endpoint holds the session's prefix is the router's per
    # request question (sticky.py).
    p = predict(endpoint, model, stats.fit_tps, stats.fit_ttft, in_flight, n, failure_rate(stats), capacity,
                stats.fit_prefill, prompt_tokens)
    has_samples = stats.requests > 0 or (model is not None and model.tps.w > 0)
    has_prior = endpoint.advertised.tokens_per_second is not None or endpoint.advertised.ttft_ms is not None
    return with_prediction(Figures(
        decode_tps=None, ttft_ms=None,
        cost_usd=estimated_cost(endpoint, prompt_tokens, max_tokens, stats),
        in_flight=in_flight,
        samples=stats.requests,
        source="measured" if has_samples else ("advertised" if has_prior else "none"),
        capacity=concurrency_limit(endpoint, capacity),
    ), p)


def with_prediction(f: Figures, p: Prediction) -> Figures:
    return Figures(p.decode_tps, None if p.ttft_s is None else p.ttft_s * 1000.0, f.cost_usd, p.load - 1,
                   f.samples, f.source, p.load, None if math.isinf(p.e2e_s) else p.e2e_s, p.marginal_s,
                   p.score_s, f.capacity)
