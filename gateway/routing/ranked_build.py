"""A `Ranked` built from one model's candidates with their figures: the ranking (rank, spill premium,
soft thresholds, `provider.order`) and what the per-request choice needs from it, precomputed (its live
heads, their curves fixed to the request, what is stale or cold, the cache credits). Called by the
router every `ranking_ttl_s` per (model, preferences, request shape); nothing here reads telemetry
itself or keeps state."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.config import Endpoint
from gateway.context import Candidate, Preferences
from gateway.policy import Sort
from gateway.routing.curve import Curve
from gateway.routing.explore import best_case_s
from gateway.routing.filters import RequestShape
from gateway.routing.live import Fixed
from gateway.routing.pick import cheap_weights
from gateway.routing.ranked import Ranked, Static
from gateway.routing.ranking import prefer_order, rank, soft_thresholds, spill_premium
from gateway.routing.stay import cache_credit
from gateway.telemetry.stats import EndpointStats

if TYPE_CHECKING:
    from gateway.routing.router import RouterSettings

# An agent-sized prompt: a conversation the client does not name is named by its first messages
# (sticky.py) once its prompt is this large -- below, a cache saves too little to weigh (and identical
# short prompts are not one session) -- and without a sort it is routed by predicted end-to-end time.
DERIVE_SESSION_ABOVE = 1024
_E2E, _THROUGHPUT = Sort.E2E, Sort.THROUGHPUT


def build_ranked(static: Static, prefs: Preferences, shape: RequestShape, stats: dict[str, EndpointStats],
                 n_tokens: int, candidates: list[Candidate], curve_of: Callable[[Endpoint, EndpointStats], Curve],
                 settings: RouterSettings, now: float) -> Ranked:
    """The ranking of `static`'s endpoints (`candidates`, with the window's `stats` by endpoint key and
    the output `n_tokens` expected), built `now`, kept `settings.ranking_ttl_s`. `curve_of`: an
    endpoint's speed-vs-load curve (the router's models)."""
    # Without a sort, an agent-sized prompt is routed by its predicted end-to-end time: where a
    # large prompt goes decides its prefill time and which cache it builds, and spreading it by
    # price alone made sessions ~2x slower than an oracle and, cache missed, not cheaper.
    sort = prefs.sort
    if sort is None and shape.prompt_tokens >= DERIVE_SESSION_ABOVE:
        sort = _E2E
    ordered = rank(candidates, sort)
    ordered, spills = spill_premium(ordered)
    ordered = soft_thresholds(ordered, prefs, stats)
    ordered = prefer_order(ordered, prefs.order)
    lead_rank = ordered[0].tier_rank
    group = [c for c in ordered if c.tier_rank == lead_rank]
    live: list[Candidate] = []
    per_group: dict[int, int] = {}
    for c in ordered:
        if len(live) < settings.live_max and per_group.get(c.tier_rank, 0) < settings.head_size \
                and not c.notes[1:] and c.notes in ((), ("slower",), ("capacity",)):
            per_group[c.tier_rank] = per_group.get(c.tier_rank, 0) + 1
            live.append(c)
    curves = {}
    for c in live:
        k = c.endpoint.key
        curves[k] = curve_of(c.endpoint, stats[k])
    stale_after = settings.stale_after_s
    stale = tuple(c for c in (live if sort is _THROUGHPUT or sort is _E2E else group)
                  if (age := stats[c.endpoint.key].age_s) is None or age > stale_after)
    lead = tuple(c for c in group if not c.notes)
    not_live = tuple(c for c in ordered if c not in live)
    credits = tuple(cache_credit(c.endpoint, stats[c.endpoint.key], curves[c.endpoint.key], shape.prompt_tokens)
                    for c in live) if sort is _E2E and shape.prompt_tokens >= DERIVE_SESSION_ABOVE else ()
    return Ranked(
        static=static,
        expires=now + settings.ranking_ttl_s,
        candidates=tuple(ordered),
        spills=tuple(spills),
        lead=lead,
        lead_weights=cheap_weights(lead) if sort is None and len(lead) >= 2 else [],
        live=tuple(live),
        not_live=not_live,
        not_live_index={c.endpoint.key: i for i, c in enumerate(not_live)},
        curves=curves,
        # Uncached: all as cold prompts, the session's holder is judged apart (stay.py).
        fixed=tuple(Fixed(curves[c.endpoint.key], n_tokens, shape.prompt_tokens) for c in live),
        live_ranks=tuple(c.tier_rank for c in live),
        live_keys=tuple(c.endpoint.key for c in live),
        claims=any(curves[c.endpoint.key].claimed for c in live),
        flaky=any(curves[c.endpoint.key].error_rate > 0 for c in live),
        n_tokens=n_tokens,
        live_choice=sort is _THROUGHPUT or sort is _E2E,
        cold=tuple(c for c in group if c.figures.source != "measured"),
        stale=stale,
        slower=tuple(c for c in ordered if "slower" in c.notes) if spills else (),
        by_key={c.endpoint.key: c for c in ordered},
        index={c.endpoint.key: i for i, c in enumerate(ordered)},
        cache_pays=any(cache_pays(c.endpoint) for c in ordered),
        prompt_tokens=shape.prompt_tokens,
        stats=stats,
        sort=sort,
        credits=credits,
        most_credit=max(credits, default=0.0),
        best_case={c.endpoint.key: best_case_s(c.endpoint, curves[c.endpoint.key], n_tokens, shape.prompt_tokens)
                   for c in stale} if sort is _E2E else {},
        held={},
        warm={},
    )


def cache_pays(endpoint: Endpoint) -> bool:
    """Its cached input is cheaper: stickiness pays without a session id."""
    price = endpoint.price
    return price is not None and price.cached_input is not None and price.cached_input < price.input
