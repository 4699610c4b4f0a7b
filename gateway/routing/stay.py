"""Whether a conversation's turn stays on the endpoint holding its prompt cache: the numbers for
`sticky.stay_or_move`, from the router's ranking and live scores.

Per request with a known holder (sticky.py): how much of the prompt it likely holds (its last turn's
input x its measured cache hit ratio for sessions that stayed; until measured, 1 where its price has a
cached-input discount, else 0: `likely_hit`), what one uncached
prompt token costs it in TTFT (its fitted prefill rate, else advertised, else a GPU host's), what share
of the bill the cached price saves, and how much slower than the best other candidate it is predicted
to be, both judged cold, by the request's sort: the live score for `throughput` and `e2e` (load now),
TTFT for `latency` (the cached ranking's figures), and for `price` the cost alone (the holder's with its
cached input against the others' cold). Without a sort, an agent-sized prompt is judged as `e2e`; a
small one stays by rule (router.py).

Nothing here does I/O; the router calls `judge_stay` only for a request whose session has a holder.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from gateway.config import Endpoint
from gateway.context import Candidate
from gateway.policy import Sort
from gateway.routing.curve import ERROR_PENALTY, Curve
from gateway.routing.figures import Figures, estimated_cost, with_prediction
from gateway.routing.live import Fixed
from gateway.routing.sticky import DEFAULT_S_PER_PROMPT_TOKEN, Holder, Verdict, stay_or_move
from gateway.telemetry.stats import EndpointStats

# The sorts as plain names: an enum member's lookup on its class costs ~0.2 µs (Python 3.11).
_PRICE, _E2E, _LATENCY = Sort.PRICE, Sort.E2E, Sort.LATENCY

if TYPE_CHECKING:
    from gateway.routing.ranked import Ranked, Scored
    from gateway.routing.router import Router


def likely_hit(endpoint: Endpoint, stats: EndpointStats) -> float:
    """The share of a staying session's prompt this endpoint will have cached: as measured, else 1 where
    its price has a cached-input discount (it caches), else 0 (a host that prices no cache keeps none)."""
    ratio = stats.tokens.cache_hit_ratio
    if ratio is not None:
        return ratio
    price = endpoint.price
    return 1.0 if price is not None and price.cached_input is not None and price.cached_input < price.input else 0.0


def richest_holder(ranked: Ranked, holders: tuple[Holder, ...]) -> Holder | None:
    """Of the endpoints that served a session (its last turn's first), the one likely to hold most of this
    prompt in its cache, among those in the plan's lead: usually the last turn's, but one the session
    left for a turn -- its holder full or slower for a moment, the detour on a host that caches nothing --
    still holds what it was sent then, and going back costs only the turns added since."""
    if len(holders) == 1:  # (most sessions: nothing to weigh it against)
        c = ranked.by_key.get(holders[0].endpoint_key)
        return None if c is None or c.notes else holders[0]
    best, most = None, -1.0
    for h in holders:
        c = ranked.by_key.get(h.endpoint_key)
        if c is None or c.notes:  # gone from the plan, spilled or below a threshold
            continue
        held = min(h.input_tokens, ranked.prompt_tokens) * likely_hit(c.endpoint, ranked.stats[h.endpoint_key])
        if held > most:
            best, most = h, held
    return best


def cache_credit(endpoint: Endpoint, stats: EndpointStats, curve: Curve, prompt_tokens: int) -> float:
    """Seconds the cache this prompt builds here will save the session's next turn, if it stays: the
    live choice of an agent-sized prompt subtracts it from each candidate's time, as an oracle that
    knows caches values where a session's next turns will be cheap, not only this turn's time."""
    return prompt_tokens * likely_hit(endpoint, stats) * (curve.s_per_prompt_token() or DEFAULT_S_PER_PROMPT_TOKEN)


class Warm(NamedTuple):
    """What a holder's cache is worth to a request, from the ranking's stats: kept with the ranking."""

    cached: int  # prompt tokens it likely holds
    cost: float | None  # the request's cost there with them cached
    saved_share: float  # the share of the bill they save (0..1)


def warm_figures(endpoint: Endpoint, stats: EndpointStats, held_tokens: int, prompt: int, max_tokens: int) -> Warm:
    """`Warm` of a holder whose last turn there had `held_tokens` of input, for a `prompt`-token request."""
    cached = int(min(held_tokens, prompt) * likely_hit(endpoint, stats))
    cold_cost = estimated_cost(endpoint, prompt, max_tokens, stats)
    warm_cost = estimated_cost(endpoint, prompt, max_tokens, stats, cached)
    return Warm(cached, warm_cost, 0.0 if not cold_cost or warm_cost is None else (cold_cost - warm_cost) / cold_cost)


def judge_stay(router: Router, ranked: Ranked, c: Candidate, holder: Holder,
               scored: list[Scored] | None) -> tuple[Verdict, Figures | None]:
    """The verdict, and the holder's figures predicted with its cache (None where not re-predicted)."""
    key = c.endpoint.key
    stats = ranked.stats[key]
    prompt = ranked.prompt_tokens
    max_tokens = ranked.n_tokens
    warm = ranked.warm.get((key, holder.input_tokens))
    if warm is None:  # the same for every turn it judges with this much cached while the ranking holds: once
        warm = ranked.warm[key, holder.input_tokens] = warm_figures(c.endpoint, stats, holder.input_tokens, prompt,
                                                                    max_tokens)
    cached, warm_cost, saved_share = warm
    near = router.settings.near_equal
    if ranked.sort is _PRICE:
        costs = [o.figures.cost_usd for o in ranked.lead if o is not c and o.figures.cost_usd is not None]
        best = min(costs, default=math.inf)
        if warm_cost is None or warm_cost <= best * (1.0 + near):
            return Verdict(True, f"stays: cached input saves {saved_share:.0%} of the bill"), None
        return Verdict(False, "moves: cheaper elsewhere even with its cache"), None
    fixed = ranked.held.get(key)
    if fixed is None:  # its curve fixed to this request as a cold prompt: once per ranking, kept beside it
        curve = ranked.curves.get(key)
        if curve is None:  # not one of the live heads
            curve = ranked.curves[key] = router._curve(c.endpoint, stats)
        fixed = ranked.held[key] = Fixed(curve, max_tokens, prompt)
    curve = fixed.curve
    s_per_token = curve.s_per_prompt_token() or DEFAULT_S_PER_PROMPT_TOKEN
    in_flight = router.telemetry.in_flight(key)
    if scored is not None:  # throughput, e2e: the live scores, load as of now
        own, best = None, math.inf  # its own score and the best other's, in one pass
        for s in scored:
            if s[4].endpoint.key != key:
                if s[0] < best:
                    best = s[0]
            elif own is None:
                own = s[0]
        if own is None:
            clean, e2e_s = fixed.clean_e2e(in_flight, None, False)  # `Curve.predict`'s, as floats
            own = e2e_s if ranked.sort is _E2E and not math.isinf(clean) else \
                clean * (1.0 + ERROR_PENALTY * curve.error_rate)  # its `score_s`
    else:
        def metric(f: Figures) -> float:
            if ranked.sort is _LATENCY:
                return math.inf if f.ttft_ms is None else f.ttft_ms / 1000.0
            return math.inf if f.e2e_s is None else f.e2e_s

        own = metric(c.figures)
        best = min((metric(o.figures) for o in ranked.lead if o is not c), default=math.inf)
    if math.isinf(own) and not math.isinf(best):
        return Verdict(False, "moves: holder full or unmeasured"), None
    extra = -math.inf if math.isinf(best) else own - best
    tolerance = 0.0 if math.isinf(best) else near * best
    verdict = stay_or_move(extra, cached, s_per_token, saved_share, tolerance)
    if not verdict.stay:
        return verdict, None
    warm = curve.predict(in_flight, max_tokens, None, max(prompt - cached, 0))
    figures = with_prediction(c.figures, warm)
    return verdict, Figures(figures.decode_tps, figures.ttft_ms, warm_cost, figures.in_flight, figures.samples,
                            figures.source, figures.load, figures.e2e_s, figures.marginal_s, figures.score_s,
                            figures.capacity)
