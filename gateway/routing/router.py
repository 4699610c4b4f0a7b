"""The `Router`: builds each request's plan -- the "which upstream, and why" of the gateway.

Per model asked for (the model, then `models` fallbacks, in order; a fallback model named by an
Anthropic `fallbacks` entry with a speed or a request of its own ranked for those):

    hard filters -> tier groups -> figures -> rank -> spill premium -> soft thresholds -> order
    (cached per (model, preferences, request shape): filters forever, the ranking for 250 ms)

then, per request, with live in-flight counts: re-predict the head of each tier group at the load
it would have with this request added (speed.py) and pick the best -- for `sort: throughput` the
least predicted time for this request plus what it adds to the requests already there, a premium
tier preferred while it is not slower, an endpoint at its concurrency limit never -- breaking near
ties by power of two choices on load; a conversation sticks to the endpoint that served its last
turn; now and then an endpoint whose stats have gone stale is explored so that recoveries are
noticed. Without a sort, the first pick is random, weighted toward the cheaper -- for a prompt of
1,024+ tokens (agent traffic) the least predicted end-to-end time, as `sort: e2e`. A turn whose
session's cache is held by an endpoint stays there while the cache is worth more than the time the
holder would cost (stay.py).

State here is local to this replica: load models, session affinity, caches. Reads of telemetry go
through the store's cached view; nothing here does I/O.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.background import RefreshAhead
from gateway.config import Catalogue, Endpoint
from gateway.context import Candidate, ChatRequest, Exclusion, Plan, Preferences
from gateway.errors import InvalidRequest, ModelNotFound, NoMatchingEndpoint
from gateway.routing.curve import Curve, curve
from gateway.routing.explore import Explorer
from gateway.routing.figures import failure_rate, figures_for, output_tokens
from gateway.routing.filters import RequestShape, exclusion_reason, matches, request_shape
from gateway.routing.live import predicted, score_live
from gateway.routing.pick import best_of_head, cheap_weighted, fallback_order, fastest_now
from gateway.routing.ranked import Ranked, Scored, Static
from gateway.routing.ranked_build import DERIVE_SESSION_ABOVE, build_ranked, cache_pays
from gateway.routing.recheck import DEFAULT_RECHECK, RecheckPolicy
from gateway.routing.speed import SpeedModel
from gateway.routing.stay import judge_stay, richest_holder
from gateway.routing.sticky import SessionAffinity, derived_session_key
from gateway.routing.tiers import tier_exclusion, tier_ranks
from gateway.telemetry.sample import AttemptSample, Outcome, stalled
from gateway.telemetry.stats import EndpointStats
from gateway.telemetry.store import TelemetryStore

STATS_WINDOW_S = 300  # also the shared speed-vs-load fit's window (every replica's samples)
_MAX_CACHE = 4096


@dataclass(frozen=True, slots=True)
class RouterSettings:
    explore_rate: float = 0.05  # share of requests that try a stale endpoint first
    cold_explore_rate: float = 0.5  # ... and one never measured: measure it soon, then judge it
    stale_after_s: float = 10.0  # an endpoint with no sample for this long is explored (once per this)
    sticky_idle_s: float = 600.0
    ranking_ttl_s: float = 0.25
    head_size: int = 4  # leading candidates per tier group re-predicted with live load per request
    live_max: int = 8  # ... and at most this many in all
    near_equal: float = 0.10  # within 10% of the best counts as equal for power of two choices
    recheck: RecheckPolicy = DEFAULT_RECHECK  # an endpoint that slowed all at once, re-checked (recheck.py)


def split_suffix(model: str) -> tuple[str, str | None]:
    """`"name:nitro"` -> `("name", "nitro")`. Model names may contain slashes, not colons."""
    name, sep, suffix = model.rpartition(":")
    return (name, suffix) if sep and name else (model, None)


class Router:
    def __init__(self, catalogue: Catalogue, telemetry: TelemetryStore,
                 settings: RouterSettings | None = None, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 unavailable: Callable[[str], bool] | None = None) -> None:
        self.catalogue = catalogue
        self._endpoints = {e.key: e for e in catalogue.endpoints()}
        self._uncached_limits = any(e.max_uncached_input_tokens is not None for e in self._endpoints.values())
        self.telemetry = telemetry
        # Whether health keeps an endpoint from being tried now (a 429's cool-down, an open circuit):
        # the live choice passes such an endpoint over rather than leave the request to its fallback.
        self.unavailable = unavailable
        self.settings = settings or RouterSettings()
        self.sessions = SessionAffinity(self.settings.sticky_idle_s, clock)
        self._rng = rng or random.Random()
        self._clock = clock
        self._speed: dict[str, SpeedModel] = {}
        self._explorer = Explorer(self.settings, telemetry.in_flight, self._rng, clock)
        # Keyed by (model, preferences, request shape, the session's holder judged warm: `_warm_holder`).
        self._static: dict[tuple[str, Preferences, RequestShape, str | None], Static] = {}
        self._ranked: dict[tuple[str, Preferences, RequestShape, str | None], Ranked] = {}
        self._ahead = RefreshAhead()  # a ranking in use is rebuilt by a timer, not by a request

    def carry_over(self, old: Router) -> None:
        """After a reload: keep what `old` learnt (speed-vs-load models and capacities learned from
        429s, when stale endpoints were explored, conversations' endpoints), by endpoint key."""
        self.sessions = old.sessions
        self._speed = old._speed
        self._explorer.carry_over(old._explorer)

    # -- learning from what happened -----------------------------------------------------------
    def observe(self, sample: AttemptSample, session_key: str | None = None) -> None:
        if sample.decode_tps is not None or sample.ttft_s is not None or sample.outcome == Outcome.RATE_LIMITED:
            model = self._speed.get(sample.endpoint_key)
            if model is None:
                model = self._speed[sample.endpoint_key] = SpeedModel()
            if sample.outcome == Outcome.RATE_LIMITED:
                model.rate_limited(sample.in_flight_at_start, self._clock())
            else:
                first = model.tps.w < 0.5 and sample.decode_tps is not None
                slowed_at = model.slowed_at
                restarted = model.observe(sample.load, sample.decode_tps, sample.fitted_ttft_s, self._clock(),
                                          sample.started_at,
                                          stalled(sample.loop_lag_s - sample.ttft_lag_s,
                                                  sample.e2e_s - (sample.ttft_s or 0.0)))
                # Its first measured speed replaces a claim, a sudden slow-down the old fit: do not
                # wait for the ranking's TTL.
                if first or restarted:
                    self._ranked.clear()
                if model.slowed_at != slowed_at:
                    self._explorer.slowed(sample.endpoint_key)
        if session_key is not None and sample.outcome == "ok":
            self.sessions.remember(session_key, sample.endpoint_key, sample.input_tokens)

    def progress(self, endpoint_key: str, load: float, decode_tps: float, sent_at: float) -> None:
        """A running stream's decode rate so far (the recorder's `progress`): acted on only when it
        says the endpoint changed (speed.py), then at once, while the rest of a burst is being routed."""
        model = self._speed.get(endpoint_key)
        if model is not None and model.progress(load, decode_tps, self._clock(), sent_at):
            self._ranked.clear()
            self._explorer.slowed(endpoint_key)

    # -- the plan ------------------------------------------------------------------------------
    def resolve_model(self, name: str, param: str) -> str:
        model = self.catalogue.resolve_model(name) or self.catalogue.resolve_model(split_suffix(name)[0])
        if model is None:
            if param == "model":
                raise ModelNotFound(name)
            raise InvalidRequest(f"Fallback model '{name}' does not exist.", param=param)
        return model

    def plan(self, request: ChatRequest, prefs: Preferences) -> Plan:
        primary = self.resolve_model(request.model, "model")
        shape = request_shape(request)
        session = request.session_key
        explicit = session is not None
        if session is None and prefs.sticky is not False and shape.prompt_tokens >= DERIVE_SESSION_ABOVE:
            session = derived_session_key(request)
        warm = self._warm_holder(session, shape, prefs)
        own: dict[str, ChatRequest] | None = None
        if request.fallbacks:  # Anthropic's fallbacks with fields of their own: per model
            models, own = self._fallback_models(primary, request, prefs, shape)
        else:
            models = {primary: (prefs, shape)}
            for name in request.fallback_models:  # a model named twice is tried as first named
                models.setdefault(self.resolve_model(name, "models"), (prefs, shape))
        parts: list[Ranked] = []
        excluded: tuple[Exclusion, ...] = ()  # (the one model's own tuple, most requests: not copied twice)
        strategy = None
        now = self._clock()
        for model, (model_prefs, model_shape) in models.items():
            key = (model, model_prefs, model_shape, warm)
            ranked = self._ranked.get(key)  # one lookup while the ranking is fresh: it keeps its `Static`
            static = ranked.static if ranked is not None else self._static_part(key)
            if strategy is None:
                strategy = static.strategy
            excluded = excluded + static.excluded if excluded else static.excluded
            if static.eligible:
                if ranked is None or now >= ranked.expires:
                    ranked = self._ranked_part(key, static, now)
                elif now >= ranked.expires - self.settings.ranking_ttl_s / 2:
                    self._ahead.schedule(key, ranked.expires - self.settings.ranking_ttl_s / 10 - now,
                                         self._rebuild, key, ranked)
                parts.append(ranked)
        if not parts:
            reasons = "; ".join(f"{e.endpoint_key}: {e.reason}" for e in excluded)
            raise NoMatchingEndpoint(f"No endpoint can serve this request. {reasons}", param="model")

        head = parts[0]
        if session is None and (prefs.sticky or (prefs.sticky is None and head.cache_pays)):
            session = derived_session_key(request)
        # Only the first choice is made per request; the rest of the order is the cached ranking
        # (with sort: throughput, the live candidates' scores now first: `pick.fallback_order`).
        scored, trial = score_live(head, self.telemetry.in_flight_of, self.unavailable) \
            if head.live_choice and head.live else (None, 0)
        chosen = self._choose(head, prefs, session, explicit, scored, trial)
        if scored is None:
            i = head.index[chosen.endpoint.key]
            candidates = head.candidates if i == 0 and chosen is head.candidates[0] else \
                (chosen, *head.candidates[:i], *head.candidates[i + 1:])  # slices: C speed
        else:
            candidates = fallback_order(head, scored, chosen)
        for part in parts[1:]:
            candidates += part.candidates
        spills = parts[0].spills if len(parts) == 1 else tuple(s for part in parts for s in part.spills)
        # Positional: a NamedTuple's keyword arguments cost a µs.
        return Plan(primary, candidates, excluded, strategy or "default", spills, session, own)

    def _fallback_models(self, primary: str, request: ChatRequest, prefs: Preferences, shape: RequestShape
                         ) -> tuple[dict[str, tuple[Preferences, RequestShape]], dict[str, ChatRequest] | None]:
        """Per model, in order, the preferences and shape it is ranked by, and the fallback models'
        own requests: a `fallbacks` entry's speed in place of the request's, its request's shape (its
        max_tokens). A model named twice is served as first named; the model asked for as asked."""
        models = {primary: (prefs, shape)}
        own: dict[str, ChatRequest] = {}
        for entry in request.fallbacks:
            model = self.resolve_model(entry.model, "models")
            if model in models:
                continue
            entry_prefs = prefs if entry.speed is None else prefs._replace(speed=entry.speed)
            if entry.request is not None:
                own[model] = entry.request
            models[model] = (entry_prefs, shape if entry.request is None else request_shape(entry.request))
        return models, own or None

    def _warm_holder(self, session: str | None, shape: RequestShape, prefs: Preferences) -> str | None:
        """The session's last endpoint, if `max_uncached_input_tokens` would filter it out as for a cold
        prompt while the cache it holds leaves less than that uncached: judged warm, it stays a candidate."""
        if not self._uncached_limits:  # no endpoint has the limit: nothing to judge (most catalogues)
            return None
        holder = self.sessions.holder(session) if session is not None and prefs.sticky is not False else None
        endpoint = None if holder is None else self._endpoints.get(holder.endpoint_key)
        limit = None if endpoint is None else endpoint.max_uncached_input_tokens
        if limit is None or holder is None or shape.prompt_tokens <= limit:
            return None
        return holder.endpoint_key if shape.prompt_tokens - holder.input_tokens <= limit else None

    def _static_part(self, key: tuple[str, Preferences, RequestShape, str | None]) -> Static:
        """Which endpoints of the model may serve, by (model, preferences, request shape, the session's
        holder judged warm)."""
        hit = self._static.get(key)
        if hit is not None:
            return hit
        model, prefs, shape, warm = key
        endpoints = self.catalogue.models[model]
        ranks = tier_ranks(prefs.speed, prefs.sort, (e.tier for e in endpoints), prefs.allow_fallbacks)
        eligible, excluded = [], []
        for e in endpoints:
            reason = exclusion_reason(e, shape, prefs, e.key == warm)
            # An endpoint named by its id in `only` was asked for, whatever its tier.
            named = prefs.only is not None and (e.id in prefs.only or e.key in prefs.only)
            if reason is None and e.tier not in ranks and not named:
                reason = tier_exclusion(e.tier, prefs.speed)
            if reason is None and not prefs.allow_fallbacks and prefs.order and not matches(e, prefs.order):
                reason = "not in provider.order (allow_fallbacks: false)"
            if reason is None:
                eligible.append((e, ranks.get(e.tier, 0)))
            else:
                excluded.append(Exclusion(e.key, reason))
        if len(self._static) > _MAX_CACHE:
            self._static.clear()
        strategy = f"policy={prefs.policy_name} sort={prefs.sort.value if prefs.sort else 'default'}" \
                   f" speed={prefs.speed.value if prefs.speed else 'unset'}"
        static = self._static[key] = Static(tuple(eligible), tuple(excluded), strategy)
        return static

    def speed_model(self, endpoint_key: str) -> SpeedModel | None:
        return self._speed.get(endpoint_key)

    def _capacity(self, endpoint_key: str) -> int | None:
        model = self._speed.get(endpoint_key)
        return None if model is None else model.capacity(self._clock())

    def _candidate(self, endpoint: Endpoint, tier_rank: int, shape: RequestShape,
                   stats: EndpointStats, n_tokens: int) -> Candidate:
        in_flight = self.telemetry.in_flight(endpoint.key)
        figures = figures_for(endpoint, stats, self._speed.get(endpoint.key), in_flight,
                              shape.prompt_tokens, shape.max_tokens, self._capacity(endpoint.key), n_tokens)
        return Candidate(endpoint, figures, tier_rank)

    def _rebuild(self, key: tuple[str, Preferences, RequestShape, str | None], old: Ranked) -> None:
        """`RefreshAhead`'s timer: the ranking `old`, rebuilt just before it expires, unless it has
        been dropped or replaced meanwhile (a first measurement or a slow-down clears the cache)."""
        if self._ranked.get(key) is old:
            self._ranked_part(key, old.static, self._clock())

    def _ranked_part(self, key: tuple[str, Preferences, RequestShape, str | None], static: Static,
                     now: float) -> Ranked:
        """The ranking of `_static_part(key)`'s endpoints, built now, kept `ranking_ttl_s`."""
        _, prefs, shape, _ = key
        stats = {e.key: self.telemetry.stats(e.key, STATS_WINDOW_S) for e, _ in static.eligible}
        n_tokens = output_tokens(shape.max_tokens, stats.values())
        candidates = [self._candidate(e, tier_rank, shape, stats[e.key], n_tokens)
                      for e, tier_rank in static.eligible]
        if len(self._ranked) > _MAX_CACHE:
            self._ranked.clear()
        ranked = self._ranked[key] = build_ranked(static, prefs, shape, stats, n_tokens, candidates, self._curve,
                                                  self.settings, now)
        return ranked

    def _choose(self, ranked: Ranked, prefs: Preferences, session: str | None, explicit: bool,
                scored: list[Scored] | None, trial: int) -> Candidate:
        """The first candidate, chosen now: sticky, explored, or the best with live load (`scored`, with
        the `trial` share: live.py)."""
        default = ranked.candidates[0]
        sticky, moved = self._sticky(ranked, session, explicit, prefs, scored)
        if sticky is not None:
            return sticky
        if moved is not None:  # the holder was judged not worth it: chosen as without a session, explained
            chosen = self._choose(ranked, prefs, None, False, scored, trial)
            return Candidate(chosen.endpoint, chosen.figures, chosen.tier_rank, (*chosen.notes, moved))
        if prefs.order:
            return default
        if ranked.sort is not None:
            explored = self._explorer.pick(ranked, default, scored)
            if explored is not None:
                return Candidate(explored.endpoint, explored.figures, explored.tier_rank, (*explored.notes, "explore"))
        elif ranked.slower:
            rechecked = self._explorer.passed_over(ranked)
            if rechecked is not None:
                return Candidate(rechecked.endpoint, rechecked.figures, rechecked.tier_rank,
                                 (*rechecked.notes, "recheck"))
        if scored is not None:  # sort: throughput
            return fastest_now(ranked, scored, self.settings.near_equal, self._rng,
                               lambda s: predicted(ranked, s, trial))
        if len(ranked.lead) < 2 or ranked.lead[0] is not default:
            return default
        if ranked.sort is None:
            return cheap_weighted(ranked.lead, self._rng, ranked.lead_weights)
        return best_of_head(ranked.lead[: self.settings.head_size], ranked.sort, self.telemetry.in_flight,
                            self.settings.near_equal, self._rng)

    def _curve(self, endpoint: Endpoint, stats: EndpointStats) -> Curve:
        k = endpoint.key
        return curve(endpoint, self._speed.get(k), stats.fit_tps, stats.fit_ttft, failure_rate(stats),
                     self._capacity(k), stats.timeout_rate, stats.fit_prefill)

    def _sticky(self, ranked: Ranked, session: str | None, explicit: bool, prefs: Preferences,
                scored: list[Scored] | None) -> tuple[Candidate | None, str | None]:
        """(the holder of the session's cache, if the turn stays there; else why it moves, if it had one)."""
        if session is None or prefs.sticky is False:
            return None, None
        holders = self.sessions.holders(session)
        # A rule sticks to the last turn's endpoint; the trade-off weighs the cache most worth going to.
        holder = (holders[0] if holders else None) if prefs.sticky or ranked.sort is None else \
            richest_holder(ranked, holders)
        c = ranked.by_key.get(holder.endpoint_key) if holder is not None else None
        if c is None or c.notes or holder is None:  # gone from the plan, spilled or below a threshold
            return None, None
        if not (explicit or prefs.sticky or cache_pays(c.endpoint) or ranked.prompt_tokens >= DERIVE_SESSION_ABOVE):
            return None, None
        # A rule where the policy makes it one, and for a small prompt without a sort: that default picks
        # any endpoint of the lead at random, the holder is as good a pick, and a conversation that
        # flapped between near-equal endpoints would lose its cache for nothing.
        if prefs.sticky or ranked.sort is None:
            return Candidate(c.endpoint, c.figures, c.tier_rank, ("sticky",)), None
        verdict, figures = judge_stay(self, ranked, c, holder, scored)
        if not verdict.stay:
            return None, verdict.why
        return Candidate(c.endpoint, figures or c.figures, c.tier_rank, ("sticky", verdict.why)), None
