"""Curves: an endpoint's predicted speed against load, fixed for per-request use, and what a request
is predicted to get from it.

`predict()` returns, for a request of `n` output tokens joining `load` requests in flight: its decode
rate and TTFT (with the prompt's uncached tokens at the endpoint's fitted prefill rate, once one is
measured: telemetry/prefill.py), its end-to-end time, and the time it adds to the requests already there (each of the
`load` others decodes its remaining ~n/2 tokens at the slower rate): the marginal cost that keeps
the router from piling onto the endpoint that looked fastest until it is no longer fast. The score
`sort: throughput` minimises is the decode time of this request plus that marginal cost, with the
endpoint's failures priced by what they cost: in the live choice the time a failure takes plus its
fallback's (`fallback_scores`), in the cached ranking, which does not know the fallback, a flat factor.

`curve()` builds one from the local fit, the shared one and the advertised prior (speed.py says
which wins); `Curve.predict` is a few multiplications per candidate. Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from gateway.config import Endpoint
from gateway.routing.speed import DEFAULT_RELATIVE_SLOWDOWN, SpeedModel, fit_line
from gateway.telemetry.fit import LoadFit
from gateway.telemetry.prefill import PrefillFit, PrefillLine

# A failed attempt costs roughly another try elsewhere: expected time is scaled by 1 + this x error rate
# where the alternative is not known (the cached ranking). The live choice knows it (`fallback_scores`).
ERROR_PENALTY = 2.0
HANG_S = 2.0  # what a timeout costs before the fallback starts: the dispatcher's least first-token budget
# Optimism in the face of few samples: an endpoint with under CONFIDENT_WEIGHT recent local samples
# is scored this much better, so that one noisy sample (a first request's cold connection, an
# exploration during a stall) does not shut it out: it gets a few more requests and is then judged.
# A real slow-down (a third of the speed) is far outside it.
CONFIDENT_WEIGHT = 3.0
OPTIMISM = 1.0
# Trust but verify: an endpoint never measured (its speed is only the catalogue's claim) is sent at
# most this many requests at once, or its fair share of what is in flight, until its first sample.
# Otherwise a burst at start-up goes wholly to whichever endpoint advertises the most (a false claim
# of 500 tok/s took a whole first wave of 24 users), and that wave is the tail of the whole run.
TRIAL_CONCURRENCY = 2


class Prediction(NamedTuple):
    """(A tuple: several are made per request, and a NamedTuple is built in C.)"""

    decode_tps: float | None
    ttft_s: float | None
    load: int  # in flight with this request added: what it was judged at
    e2e_s: float  # predicted end-to-end for n tokens (inf when unknown or full)
    marginal_s: float  # time this request adds to the requests already in flight
    score_s: float  # what the ranking minimises: (decode time + marginal) x the error penalty (and optimism)
    clean_s: float = math.inf  # score_s as if it never failed: `fallback_scores` prices the failures


def concurrency_limit(endpoint: Endpoint, learned: int | None) -> int | None:
    """The catalogue's `max_concurrency` or the capacity learned from 429s, whichever is lower."""
    limits = [x for x in (endpoint.max_concurrency, learned) if x is not None]
    return min(limits) if limits else None


@dataclass(frozen=True, slots=True)
class Curve:
    """One endpoint's predicted speed against load, ready for per-request use: two lines and a limit.
    Built with the ranking (every 250 ms); `predict` is a few multiplications per candidate."""

    tps: tuple[float, float] | None  # s per token = a + b x load
    ttft: tuple[float, float] | None  # TTFT s = a + b x load
    limit: int | None  # max concurrency (catalogue or learned)
    penalty: float  # 1 / OPTIMISM while few local samples, else 1
    claimed: bool = False  # the speed is the catalogue's claim only: never measured (TRIAL_CONCURRENCY)
    error_rate: float = 0.0  # attempts that fail (429s apart: capacity) ...
    hang_rate: float = 0.0  # ... of which time out (HANG_S each); the others fail about when a token would come
    # TTFT against the prompt's uncached tokens (telemetry/prefill.py), once a prefill rate is measured;
    # else `prefill_s_per_token` (the advertised rate) on top of the load line, else the load line alone.
    prefill: PrefillLine | None = None
    prefill_s_per_token: float | None = None

    def ttft_s(self, in_flight: int, uncached_tokens: int) -> float | None:
        """Predicted TTFT of a prompt with `uncached_tokens` not in this endpoint's cache, joining
        `in_flight` others."""
        if self.prefill is not None and self.prefill.per_token_s is not None:
            return self.prefill.ttft_s(uncached_tokens, in_flight)
        ttft = None if self.ttft is None else self.ttft[0] + self.ttft[1] * (in_flight + 1)
        if self.prefill_s_per_token is not None and uncached_tokens:
            return (ttft or 0.0) + uncached_tokens * self.prefill_s_per_token
        return ttft

    def s_per_prompt_token(self) -> float | None:
        """Seconds one uncached prompt token adds to TTFT: measured, else advertised, else unknown."""
        if self.prefill is not None and self.prefill.per_token_s is not None:
            return self.prefill.per_token_s
        return self.prefill_s_per_token

    def predict(self, in_flight: int, n_tokens: int, trial_limit: int | None = None,
                uncached_tokens: int = 0) -> Prediction:
        """What a request of `n_tokens` output tokens and `uncached_tokens` of prompt to prefill would
        get joining `in_flight` others (module doc). `trial_limit`: the most a `claimed` endpoint may
        take now (the router's fair share)."""
        load = in_flight + 1
        ttft = self.ttft_s(in_flight, uncached_tokens)
        if self.tps is None:
            return Prediction(None, ttft, load, math.inf, 0.0, math.inf)
        a, b = self.tps
        per_token = a + b * load
        e2e = (ttft or 0.0) + n_tokens * per_token
        marginal = in_flight * (n_tokens / 2.0) * b  # each other's remaining tokens, each b slower
        full = (self.limit is not None and load > self.limit) or \
            (self.claimed and trial_limit is not None and load > trial_limit)
        # Throughput is decode speed (OpenRouter's sense): TTFT is reported, ranked by `sort: latency`.
        clean = math.inf if full else (n_tokens * per_token + marginal) * self.penalty
        return Prediction(1.0 / per_token, ttft, load, e2e, marginal, clean * (1.0 + ERROR_PENALTY * self.error_rate),
                          clean)

    def fail_s(self, p: Prediction) -> float:
        """Seconds a failed attempt costs before its fallback starts."""
        if self.error_rate <= 0:
            return 0.0
        hangs = min(self.hang_rate, self.error_rate)
        return (hangs * HANG_S + (self.error_rate - hangs) * (p.ttft_s or 0.0)) / self.error_rate


def fallback_scores(clean: list[float], curves: list[Curve], predictions: list[Prediction]) -> list[float]:
    """The live choice's scores, from each candidate's `clean` one (inf: full or kept out): an
    attempt that fails falls back to the best of the others, so an endpoint failing a share `e` of
    its attempts costs (1 - e) x its own time + e x (the time the failure takes + the fallback's),
    not a flat factor: a 503 answered at once, with an endpoint as good as this one behind it, costs
    little; a hang, or a much slower fallback, costs much. With no other candidate (all full), the
    flat ERROR_PENALTY. Never less than its own time: failing is no way to reach a faster endpoint
    (that one is chosen directly)."""
    if all(c.error_rate <= 0 for c in curves):
        return clean
    best = min(range(len(clean)), key=clean.__getitem__)
    second = min((x for j, x in enumerate(clean) if j != best), default=math.inf)
    scores = list(clean)
    for i, c in enumerate(curves):
        e, own = c.error_rate, clean[i]
        if e <= 0 or math.isinf(own):
            continue
        alt = second if i == best else clean[best]
        p = predictions[i]
        scores[i] = p.score_s if math.isinf(alt) else (1.0 - e) * own + e * (c.fail_s(p) + max(alt, own))
    return scores


def curve(endpoint: Endpoint, model: SpeedModel | None, shared_tps: LoadFit | None,
          shared_ttft: LoadFit | None, error_rate: float = 0.0, capacity: int | None = None,
          hang_rate: float = 0.0, shared_prefill: PrefillFit | None = None) -> Curve:
    """The endpoint's curve from its local fits, the shared ones and the advertised prior (module doc)."""
    advertised = endpoint.advertised.tokens_per_second
    prior = 1.0 / advertised if advertised else None
    tps_line = fit_line(model.tps if model else None, shared_tps, None, prior, model.shape() if model else None)
    claimed = tps_line is None
    if tps_line is None and prior is not None:
        tps_line = (prior, DEFAULT_RELATIVE_SLOWDOWN * prior)
    ttft_line = fit_line(model.ttft if model else None, shared_ttft, 0.0)
    if ttft_line is None and endpoint.advertised.ttft_ms:
        ttft_line = (endpoint.advertised.ttft_ms / 1000.0, 0.0)
    penalty = 1.0 / OPTIMISM if model is not None and 0 < model.tps.w < CONFIDENT_WEIGHT else 1.0
    prefill = None if shared_prefill is None else shared_prefill.line()
    advertised_prefill = endpoint.advertised.prefill_tokens_per_second
    return Curve(tps_line, ttft_line, concurrency_limit(endpoint, capacity), penalty, claimed, error_rate,
                 hang_rate, prefill, None if advertised_prefill is None else 1.0 / advertised_prefill)


def predict(endpoint: Endpoint, model: SpeedModel | None, shared_tps: LoadFit | None,
            shared_ttft: LoadFit | None, in_flight: int, n_tokens: int, error_rate: float = 0.0,
            capacity: int | None = None, shared_prefill: PrefillFit | None = None,
            uncached_tokens: int = 0) -> Prediction:
    """`curve(...).predict(in_flight, n_tokens, uncached_tokens=...)`."""
    return curve(endpoint, model, shared_tps, shared_ttft, error_rate, capacity,
                 shared_prefill=shared_prefill).predict(in_flight, n_tokens, uncached_tokens=uncached_tokens)
