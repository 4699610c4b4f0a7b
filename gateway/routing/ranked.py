"""What the router caches per (model, preferences, request shape): the filters' verdict (`Static`,
kept until the catalogue changes) and the ranking with what the per-request choice needs from it
(`Ranked`, kept `ranking_ttl_s`). Plain data, built in router.py, read by the choice's helpers
(stay.py, explore.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.config import Endpoint
from gateway.context import Candidate, Exclusion, Spill
from gateway.policy import Sort
from gateway.routing.curve import Curve
from gateway.routing.live import Fixed
from gateway.telemetry.stats import EndpointStats

if TYPE_CHECKING:
    from gateway.routing.stay import Warm


@dataclass(frozen=True, slots=True)
class Static:
    eligible: tuple[tuple[Endpoint, int], ...]  # endpoint, tier rank
    excluded: tuple[Exclusion, ...]
    strategy: str  # the plan's, from the preferences alone: made once, not per request


# A live candidate scored now (live.py): (score, tier rank, in flight, predicted end-to-end s, candidate,
# its index in `Ranked.live`).
Scored = tuple[float, int, int, float, Candidate, int]


@dataclass(frozen=True, slots=True)
class Ranked:
    """One model's ranking, and what the per-request choice needs from it, precomputed."""

    static: Static  # what it ranks
    expires: float
    candidates: tuple[Candidate, ...]
    spills: tuple[Spill, ...]
    lead: tuple[Candidate, ...]  # the first tier group, minus spilled and soft-missed endpoints
    lead_weights: list[float]  # without a sort: `lead`'s cumulative weights for pick.cheap_weighted
    live: tuple[Candidate, ...]  # re-predicted per request (throughput): each group's head, soft misses out
    not_live: tuple[Candidate, ...]  # `candidates` minus `live`, in order: the tail of a throughput plan
    not_live_index: dict[str, int]  # endpoint key -> position in `not_live`
    curves: dict[str, Curve]  # live endpoint key -> its speed-vs-load curve
    fixed: tuple[Fixed, ...]  # per live candidate: its curve fixed to this request shape (live.py)
    live_ranks: tuple[int, ...]  # per live candidate: its tier rank ...
    live_keys: tuple[str, ...]  # ... and its endpoint key
    claims: bool  # some live candidate's speed is only claimed: the trial share limits it (live.py)
    flaky: bool  # some live candidate fails some attempts: its failures are priced (curve.fallback_scores)
    n_tokens: int  # output tokens expected of the request
    live_choice: bool  # sort: throughput: chosen live among `live`, stale ones explored for sure
    cold: tuple[Candidate, ...]  # first-group endpoints never measured
    stale: tuple[Candidate, ...]  # first-group endpoints with no recent sample
    # Premium endpoints spilled behind the next tier as predicted slower: without a sort nothing else
    # explores, and they are re-checked (explore.py `passed_over`), or one false slow-down would stand.
    slower: tuple[Candidate, ...]
    by_key: dict[str, Candidate]
    index: dict[str, int]  # endpoint key -> position in `candidates`
    cache_pays: bool  # some endpoint's cached input is cheaper: stickiness pays without a session id
    prompt_tokens: int  # the request's estimated prompt (its shape's)
    stats: dict[str, EndpointStats]  # the window's stats the ranking was built from, by endpoint key
    sort: Sort | None
    credits: tuple[float, ...]  # per live candidate: what caching this prompt there saves a next turn (e2e)
    most_credit: float  # the largest of `credits`
    # e2e: per stale candidate, the least end-to-end time it has been measured or claimed to give this
    # request alone (`explore.best_case_s`): exploring one that could not beat the best now only costs its user.
    best_case: dict[str, float]
    # Per session holder judged (stay.py): its curve fixed to this request as a cold prompt, by endpoint key,
    held: dict[str, Fixed]
    warm: dict[tuple[str, int], Warm]  # ... and what its cache is worth, by (endpoint key, tokens it was sent)

