"""The `Router`: builds each request's plan -- the "which upstream, and why" of the gateway.

Per model asked for (the model, then `models` fallbacks, in order):

    hard filters -> tier groups -> figures -> rank -> spill premium -> soft thresholds -> order
    (cached per (model, preferences, request shape): filters forever, the ranking for 250 ms)

then, per request, with live in-flight counts: re-predict the head of the first tier group and pick
among near-equal candidates by power of two choices on load; a conversation sticks to the endpoint
that served its last turn; now and then an endpoint whose stats have gone stale is explored so that
recoveries are noticed. Without a sort, the first pick is random, weighted toward the cheaper.

State here is local to this replica: load models, session affinity, caches. Reads of telemetry go
through the store's cached view; nothing here does I/O.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gateway.config import Catalogue, Endpoint
from gateway.context import Candidate, ChatRequest, Exclusion, Plan, Preferences, Spill
from gateway.errors import InvalidRequest, ModelNotFound, NoMatchingEndpoint
from gateway.policy import Sort
from gateway.routing.figures import LoadModel, figures_for
from gateway.routing.filters import RequestShape, exclusion_reason, matches, request_shape
from gateway.routing.ranking import prefer_order, rank, soft_thresholds, sort_value, spill_premium
from gateway.routing.sticky import SessionAffinity, derived_session_key
from gateway.routing.tiers import tier_exclusion, tier_ranks
from gateway.telemetry.sample import AttemptSample
from gateway.telemetry.stats import EndpointStats
from gateway.telemetry.store import TelemetryStore

STATS_WINDOW_S = 300
_MAX_CACHE = 4096


@dataclass(frozen=True, slots=True)
class RouterSettings:
    explore_rate: float = 0.05  # share of requests that try a stale endpoint first
    cold_explore_rate: float = 0.5  # ... and one never measured: measure it soon, then judge it
    stale_after_s: float = 10.0  # an endpoint with no sample for this long is worth exploring
    sticky_idle_s: float = 600.0
    ranking_ttl_s: float = 0.25
    head_size: int = 4  # how many leading candidates are re-predicted with live load per request
    near_equal: float = 0.10  # within 10% of the best counts as equal for power of two choices


def split_suffix(model: str) -> tuple[str, str | None]:
    """`"name:nitro"` -> `("name", "nitro")`. Model names may contain slashes, not colons."""
    name, sep, suffix = model.rpartition(":")
    return (name, suffix) if sep and name else (model, None)


@dataclass(frozen=True, slots=True)
class _Static:
    eligible: tuple[tuple[Endpoint, int], ...]  # endpoint, tier rank
    excluded: tuple[Exclusion, ...]


@dataclass(frozen=True, slots=True)
class _Ranked:
    expires: float
    candidates: tuple[Candidate, ...]
    spills: tuple[Spill, ...]


class Router:
    def __init__(self, catalogue: Catalogue, telemetry: TelemetryStore,
                 settings: RouterSettings | None = None, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalogue = catalogue
        self.telemetry = telemetry
        self.settings = settings or RouterSettings()
        self.sessions = SessionAffinity(self.settings.sticky_idle_s, clock)
        self._rng = rng or random.Random()
        self._clock = clock
        self._load: dict[str, LoadModel] = {}
        self._static: dict[tuple[str, Preferences, RequestShape], _Static] = {}
        self._ranked: dict[tuple[str, Preferences, RequestShape], _Ranked] = {}

    # -- learning from what happened -----------------------------------------------------------
    def observe(self, sample: AttemptSample, session_key: str | None = None) -> None:
        if sample.decode_tps is not None:
            model = self._load.get(sample.endpoint_key)
            if model is None:
                model = self._load[sample.endpoint_key] = LoadModel()
            model.observe(sample.in_flight_at_start, sample.decode_tps, self._clock())
        if session_key is not None and sample.outcome == "ok":
            self.sessions.remember(session_key, sample.endpoint_key)

    # -- the plan ------------------------------------------------------------------------------
    def resolve_model(self, name: str, param: str) -> str:
        base, _ = split_suffix(name)
        model = self.catalogue.resolve_model(name) or self.catalogue.resolve_model(base)
        if model is None:
            if param == "model":
                raise ModelNotFound(name)
            raise InvalidRequest(f"Fallback model '{name}' does not exist.", param=param)
        return model

    def plan(self, request: ChatRequest, prefs: Preferences) -> Plan:
        primary = self.resolve_model(request.model, "model")
        models = [primary, *(self.resolve_model(m, "models") for m in request.fallback_models)]
        shape = request_shape(request)
        candidates: list[Candidate] = []
        excluded: list[Exclusion] = []
        spills: list[Spill] = []
        for model in dict.fromkeys(models):
            static = self._static_part(model, prefs, shape)
            excluded += static.excluded
            if not static.eligible:
                continue
            ranked = self._ranked_part(model, prefs, shape, static)
            candidates += self._per_request(list(ranked.candidates), prefs)
            spills += ranked.spills
        if not candidates:
            reasons = "; ".join(f"{e.endpoint_key}: {e.reason}" for e in excluded)
            raise NoMatchingEndpoint(f"No endpoint can serve this request. {reasons}", param="model")

        session = request.session_key
        explicit = session is not None
        if session is None and prefs.sticky is not False:
            session = derived_session_key(request)
        candidates, stuck = self._stick(candidates, session, explicit, prefs)
        if not stuck:
            candidates = self._explore(candidates, prefs)
        strategy = f"policy={prefs.policy_name} sort={prefs.sort.value if prefs.sort else 'default'}" \
                   f" speed={prefs.speed.value if prefs.speed else 'unset'}"
        return Plan(model=primary, candidates=tuple(candidates), excluded=tuple(excluded),
                    strategy=strategy, spills=tuple(spills), session_key=session)

    def _static_part(self, model: str, prefs: Preferences, shape: RequestShape) -> _Static:
        key = (model, prefs, shape)
        hit = self._static.get(key)
        if hit is not None:
            return hit
        endpoints = self.catalogue.models[model]
        ranks = tier_ranks(prefs.speed, prefs.sort, (e.tier for e in endpoints), prefs.allow_fallbacks)
        eligible, excluded = [], []
        for e in endpoints:
            reason = exclusion_reason(e, shape, prefs)
            if reason is None and e.tier not in ranks:
                reason = tier_exclusion(e.tier, prefs.speed)
            if reason is None and not prefs.allow_fallbacks and prefs.order and not matches(e, prefs.order):
                reason = "not in provider.order (allow_fallbacks: false)"
            if reason is None:
                eligible.append((e, ranks[e.tier]))
            else:
                excluded.append(Exclusion(e.key, reason))
        if len(self._static) > _MAX_CACHE:
            self._static.clear()
        static = self._static[key] = _Static(tuple(eligible), tuple(excluded))
        return static

    def _candidate(self, endpoint: Endpoint, tier_rank: int, shape: RequestShape,
                   stats: EndpointStats) -> Candidate:
        in_flight = self.telemetry.in_flight(endpoint.key)
        figures = figures_for(endpoint, stats, self._load.get(endpoint.key), in_flight,
                              shape.prompt_tokens, shape.max_tokens)
        return Candidate(endpoint, figures, tier_rank)

    def _ranked_part(self, model: str, prefs: Preferences, shape: RequestShape,
                     static: _Static) -> _Ranked:
        key = (model, prefs, shape)
        now = self._clock()
        hit = self._ranked.get(key)
        if hit is not None and now < hit.expires:
            return hit
        stats: dict[str, EndpointStats] = {}
        candidates = []
        for endpoint, tier_rank in static.eligible:
            stats[endpoint.key] = s = self.telemetry.stats(endpoint.key, STATS_WINDOW_S)
            candidates.append(self._candidate(endpoint, tier_rank, shape, s))
        ordered = rank(candidates, prefs.sort)
        ordered, spills = spill_premium(ordered)
        ordered = soft_thresholds(ordered, prefs, stats)
        ordered = prefer_order(ordered, prefs.order)
        if len(self._ranked) > _MAX_CACHE:
            self._ranked.clear()
        expires = now + self.settings.ranking_ttl_s
        ranked = self._ranked[key] = _Ranked(expires, tuple(ordered), tuple(spills))
        return ranked

    def _per_request(self, candidates: list[Candidate], prefs: Preferences) -> list[Candidate]:
        """Choose the first candidate with live load: the cached ranking is up to 250 ms old."""
        if prefs.order or not candidates:
            return candidates
        lead_rank = candidates[0].tier_rank
        group = [c for c in candidates if c.tier_rank == lead_rank and not c.notes]
        if len(group) < 2:
            return candidates
        if prefs.sort is None:
            choice = self._cheap_weighted(group)
        else:
            choice = self._best_of_head(group[: self.settings.head_size], prefs.sort)
        rest = [c for c in candidates if c.endpoint.key != choice.endpoint.key]
        return [choice, *rest]

    def _live(self, c: Candidate) -> Candidate:
        """The candidate with its in-flight count, and so its predicted decode rate, as of now."""
        in_flight = self.telemetry.in_flight(c.endpoint.key)
        load = self._load.get(c.endpoint.key)
        tps = load.predict(in_flight) if load is not None and load.weight >= 1.0 else c.figures.decode_tps
        return replace(c, figures=replace(c.figures, decode_tps=tps, in_flight=in_flight))

    def _best_of_head(self, head: list[Candidate], sort: Sort) -> Candidate:
        live = sorted((self._live(c) for c in head), key=lambda c: sort_value(sort, c.figures))
        best = sort_value(sort, live[0].figures)
        tolerance = self.settings.near_equal * abs(best)
        near = [c for c in live if abs(sort_value(sort, c.figures) - best) <= tolerance]
        if len(near) < 2:
            return live[0]
        a, b = self._rng.sample(near, 2)  # power of two choices: the less loaded of two
        return a if a.figures.in_flight <= b.figures.in_flight else b

    def _cheap_weighted(self, group: list[Candidate]) -> Candidate:
        costs = [c.figures.cost_usd for c in group]
        known = [x for x in costs if x]
        fallback = sum(known) / len(known) if known else 1.0
        weights = [1.0 / (x or fallback) for x in costs]
        return self._rng.choices(group, weights=weights)[0]

    def _stick(self, candidates: list[Candidate], session: str | None, explicit: bool,
               prefs: Preferences) -> tuple[list[Candidate], bool]:
        if session is None or prefs.sticky is False:
            return candidates, False
        endpoint_key = self.sessions.get(session)
        if endpoint_key is None:
            return candidates, False
        for c in candidates:
            if c.endpoint.key != endpoint_key or c.notes:
                continue
            price = c.endpoint.price
            pays = price is not None and price.cached_input is not None and price.cached_input < price.input
            if explicit or prefs.sticky or pays:
                rest = [o for o in candidates if o is not c]
                return [replace(c, notes=("sticky",)), *rest], True
        return candidates, False

    def _explore(self, candidates: list[Candidate], prefs: Preferences) -> list[Candidate]:
        if prefs.sort is None or prefs.order or len(candidates) < 2:
            return candidates
        lead_rank = candidates[0].tier_rank
        group = [c for c in candidates[1:] if c.tier_rank == lead_rank]
        cold = [c for c in group if c.figures.source != "measured"]
        if cold and self._rng.random() < self.settings.cold_explore_rate:
            pick = self._rng.choice(cold)
        elif self._rng.random() < self.settings.explore_rate:
            stale = [c for c in group if self._is_stale(c)]
            if not stale:
                return candidates
            pick = self._rng.choice(stale)
        else:
            return candidates
        return [replace(pick, notes=(*pick.notes, "explore")), *(c for c in candidates if c is not pick)]

    def _is_stale(self, c: Candidate) -> bool:
        age = self.telemetry.stats(c.endpoint.key, STATS_WINDOW_S).age_s
        return age is None or age > self.settings.stale_after_s

