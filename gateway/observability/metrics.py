"""Prometheus metrics of one gateway process (`GET /metrics`), and the calls that record them.

Does: build every `ultraroute_*` family in a per-app `CollectorRegistry` (never prometheus-client's
global default registry); record one upstream attempt (`attempt()`, called by the Recorder), a
fallback, a same-endpoint retry, a circuit change, a route selection, the event loop's lag, an
overload refusal and a Responses WebSocket opening or closing; read in-flight counts and Redis errors
only when scraped; render the exposition text.

Does not: do I/O, decide anything, or merge processes. prometheus-client's multiprocess mode is not
used: each `serve --workers` worker is a replica with its own `/metrics` (a scrape reaches one of
them), so Prometheus should scrape every worker, or run one worker per container and sum replicas.

Labels are bounded by the catalogue (model, endpoint id, provider, tier), the `Outcome` values,
short fixed reasons and the client APIs' names (the adapters in gateway/apis/). Never a user, key
or request id.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config import Catalogue, Endpoint
from gateway.context import Plan
from gateway.observability.loop_metrics import LoopCounter, LoopFamily, LoopHistogram
from gateway.telemetry.sample import AttemptSample, Outcome

if TYPE_CHECKING:  # dispatch imports record, which imports this module
    from gateway.dispatch import Served

CONTENT_TYPE = CONTENT_TYPE_LATEST
ENDPOINT_LABELS = ("model", "endpoint", "tier")


# Neighbouring bounds differ by at most 1.33x from 10 ms to 60 s: histogram_quantile interpolates
# within one bucket, so a quantile read back is never off by more than that ratio, and 200 ms and
# 800 ms profiles are seven buckets apart.
LATENCY_BUCKETS = (
    0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075,
    0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75,
    1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.5,
    10.0, 12.5, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
)
# End-to-end latency needs less resolution; 1-2-3-5 per decade keeps the series count down.
DURATION_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0)
# 5 to 5000 tok/s, neighbours at most 1.5x apart (1.33x above 100 tok/s, where tiers differ).
TPS_BUCKETS = (
    5.0, 7.5, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0, 75.0,
    100.0, 125.0, 150.0, 200.0, 250.0, 300.0, 400.0, 500.0, 600.0, 750.0,
    1000.0, 1250.0, 1500.0, 2000.0, 2500.0, 3000.0, 4000.0, 5000.0,
)
# The loop's own lag: ~0 when idle; tens of ms is a busy core; seconds is a saturated or blocked one.
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ROUTE_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1)
TOKEN_KINDS = ("input", "cached_input", "cache_write_input", "output", "reasoning")
_SAFE_REASON = re.compile(r"^[a-z0-9_]{1,40}$")


def _reason(reason: str) -> str:
    """Reasons are short fixed words; anything else collapses to one value, so labels stay bounded."""
    return reason if _SAFE_REASON.match(reason) else "other"


@dataclass(frozen=True, slots=True)
class _Series:
    """The children of one endpoint, bound once: a request then costs no label lookups."""

    requests: Mapping[str, LoopCounter]  # by outcome
    ttft: LoopHistogram
    ttfat: LoopHistogram
    decode: LoopHistogram
    duration: LoopHistogram
    tokens: tuple[LoopCounter, ...]  # TOKEN_KINDS order
    cost: LoopCounter


class _ScrapeTime(Collector):
    """In-flight counts and Redis errors, read from their owners when Prometheus scrapes."""

    def __init__(self, endpoints: tuple[Endpoint, ...], in_flight: Callable[[str], int],
                 redis_errors: Callable[[], int]) -> None:
        self.endpoints = endpoints
        self._in_flight = in_flight
        self._redis_errors = redis_errors
        self.extra_redis_errors = 0  # from Metrics.redis_error(): Redis users other than telemetry

    def _families(self) -> tuple[GaugeMetricFamily, CounterMetricFamily]:
        in_flight = GaugeMetricFamily("ultraroute_endpoint_in_flight",
                                      "Upstream attempts in flight from this replica.", labels=ENDPOINT_LABELS)
        errors = CounterMetricFamily("ultraroute_redis_errors", "Failed Redis round trips (flush, refresh).")
        return in_flight, errors

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        in_flight, errors = self._families()
        for e in self.endpoints:
            in_flight.add_metric((e.model, e.id, e.tier.value), self._in_flight(e.key))
        errors.add_metric((), self._redis_errors() + self.extra_redis_errors)
        return in_flight, errors


class _Nested(Collector):
    """A registry's families as one collector of another registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


def store_redis_errors(store: object) -> Callable[[], int]:
    """The count a `RedisStore` keeps in `redis_errors`; a `MemoryStore` has none (always 0)."""
    return lambda: int(getattr(store, "redis_errors", 0))


class Metrics:
    """Every metric of one gateway process, in its own registry. Built by `open_services()`."""

    def __init__(self, catalogue: Catalogue, in_flight: Callable[[str], int],
                 redis_errors: Callable[[], int]) -> None:
        # Two registries: `_rest` holds prometheus-client's own families, which `generate_latest` renders;
        # `registry` holds every family (the lock-free ones and `_rest`), for a reader that collects.
        self.registry = CollectorRegistry(auto_describe=True)
        r = self._rest = CollectorRegistry(auto_describe=True)
        by_endpoint = list(ENDPOINT_LABELS)
        # What every request records (attempts, route selection, client requests): lock-free families
        # (loop_metrics.py). The rest are rarer and stay prometheus-client's own.
        self._requests = LoopFamily("ultraroute_requests", "Upstream attempts, by how they ended (status = "
                                    "outcome).", ["model", "endpoint", "provider", "tier", "status"])
        self._ttft = LoopFamily("ultraroute_ttft_seconds", "Request sent to the first token of any kind.",
                                by_endpoint, buckets=LATENCY_BUCKETS)
        self._ttfat = LoopFamily("ultraroute_time_to_first_answer_token_seconds",
                                 "Request sent to the first non-reasoning token.", by_endpoint, buckets=LATENCY_BUCKETS)
        self._decode = LoopFamily("ultraroute_decode_tokens_per_second",
                                  "Output tokens after the first / time after the first token, per attempt.",
                                  by_endpoint, buckets=TPS_BUCKETS)
        self._duration = LoopFamily("ultraroute_request_duration_seconds",
                                    "Request sent to the last byte, successful attempts.", by_endpoint,
                                    buckets=DURATION_BUCKETS)
        self._tokens = LoopFamily("ultraroute_tokens", "Tokens by kind (input includes the prompt-cache "
                                  "reads cached_input and writes cache_write_input; output includes reasoning).",
                                  [*by_endpoint, "kind"])
        self._cost = LoopFamily("ultraroute_cost_usd", "What the attempts cost, in USD.",
                                ["model", "endpoint", "provider", "tier"])
        self._client_requests = LoopFamily("ultraroute_client_requests", "Requests by the client API they came "
                                           "in by (chat, responses, messages, completions, embeddings) and the "
                                           "HTTP status class they ended with.", ["api", "status"])
        self._route = LoopFamily("ultraroute_route_selection_seconds", "Time to plan one request (select stage).",
                                 [], buckets=ROUTE_BUCKETS)
        self._route_all = self._route.histogram()
        self._loop_families = (self._requests, self._ttft, self._ttfat, self._decode, self._duration, self._tokens,
                               self._cost, self._client_requests, self._route)
        for family in self._loop_families:
            self.registry.register(family)
        self.registry.register(_Nested(r))
        self._fallbacks = Counter("ultraroute_fallbacks", "Requests served by another endpoint than the first "
                                  "planned, by the first reason.", ["from_tier", "to_tier", "reason"], registry=r)
        self._retries = Counter("ultraroute_retries", "Second tries at the same endpoint.",
                                [*by_endpoint, "reason"], registry=r)
        self._rejected = Counter("ultraroute_rejected_requests", "Requests refused before any upstream was "
                                 "called, by client API and reason (unauthenticated, forbidden, client_rate_limited, "
                                 "budget_exceeded, invalid_request, model_not_found, ...).", ["api", "reason"],
                                 registry=r)
        self._by_api: dict[tuple[str, int], LoopCounter] = {}
        self._circuit = Gauge("ultraroute_endpoint_circuit_open", "1 while the endpoint's circuit is open.",
                              by_endpoint, registry=r)
        self._probes = Counter("ultraroute_probes", "Background probes of open circuits (health_probe.py) and "
                               "warm-up completions (warm_up.py), by outcome; not client traffic, so not "
                               "in ultraroute_requests_total.",
                               [*by_endpoint, "outcome"], registry=r)
        self._probe_cost = Counter("ultraroute_probe_cost_usd", "What the background probes cost, in USD "
                                   "(not in ultraroute_cost_usd_total).", by_endpoint, registry=r)
        self._lag = Histogram("ultraroute_event_loop_lag_seconds", "How late this process's event loop ran "
                              "a timer (sampled every 50 ms): the gateway's own queueing, excluded from "
                              "upstream budgets.", buckets=LAG_BUCKETS, registry=r)
        self._tier_mismatch = Counter("ultraroute_served_tier_mismatch", "Answers whose provider reported "
                                      "another tier than the endpoint's service_tier asked for (Anthropic "
                                      "usage.speed, OpenAI service_tier): a silent downgrade.",
                                      ["endpoint", "asked", "served"], registry=r)
        self._overloaded = Counter("ultraroute_overloaded", "Requests refused with 503 overloaded: this process "
                                   "was at gateway.max_in_flight.", registry=r)
        self._queue_depth = Gauge("ultraroute_queue_depth", "Requests waiting for their turn at an endpoint "
                                  "(its provider's rate limit, its max_concurrency).", by_endpoint, registry=r)
        self._queue_lines: dict[tuple[str, str], int] = {}  # (endpoint key, line) -> its depth
        self._queue_wait = Histogram("ultraroute_queue_wait_seconds", "How long a request waited for its turn "
                                     "at an endpoint, admitted or spilled.", by_endpoint,
                                     buckets=LATENCY_BUCKETS, registry=r)
        self._websockets = Gauge("ultraroute_websocket_connections", "Responses WebSocket connections "
                                 "(GET /v1/responses upgrades) open now.", registry=r)
        self._labels = {e.key: (e.model, e.id, e.tier.value) for e in catalogue.endpoints()}
        self._scrape = _ScrapeTime(catalogue.endpoints(), in_flight, redis_errors)
        r.register(self._scrape)
        self._tiers = {e.key: e.tier.value for e in catalogue.endpoints()}
        # Every catalogue series exists from the start at 0, so rate() sees the first increment too.
        self._series = {e.key: self._bind(e) for e in catalogue.endpoints()}

    def _bind(self, e: Endpoint) -> _Series:
        labels = (e.model, e.id, e.tier.value)
        self._circuit.labels(*labels).set(0)
        return _Series(
            requests={o.value: self._requests.counter(e.model, e.id, e.provider.name, e.tier.value, o.value)
                      for o in Outcome},
            ttft=self._ttft.histogram(*labels),
            ttfat=self._ttfat.histogram(*labels),
            decode=self._decode.histogram(*labels),
            duration=self._duration.histogram(*labels),
            tokens=tuple(self._tokens.counter(*labels, kind) for kind in TOKEN_KINDS),  # type: ignore[arg-type]
            cost=self._cost.counter(e.model, e.id, e.provider.name, e.tier.value),
        )

    def catalogue_changed(self, catalogue: Catalogue) -> None:
        """After a reload: series for new endpoints start at 0; in-flight gauges follow the catalogue.
        Series of removed endpoints stay (their counters must not go back to nothing mid-scrape)."""
        self._scrape.endpoints = catalogue.endpoints()
        for e in catalogue.endpoints():
            if self._tiers.get(e.key) != e.tier.value or e.key not in self._series:
                self._tiers[e.key] = e.tier.value
                self._series[e.key] = self._bind(e)

    # -- recording ------------------------------------------------------------------------------
    def attempt(self, endpoint: Endpoint, sample: AttemptSample) -> None:
        """One upstream attempt, finished or failed (from `Recorder.record`)."""
        s = self._series.get(endpoint.key)
        if s is None:  # not in the catalogue this was built from (tests); bound on first use
            s = self._series[endpoint.key] = self._bind(endpoint)
        s.requests[sample.outcome.value].inc()
        if sample.ttft_s is not None:
            s.ttft.observe(sample.ttft_s)
        if sample.ttfat_s is not None:
            s.ttfat.observe(sample.ttfat_s)
        if sample.decode_tps is not None:
            s.decode.observe(sample.decode_tps)
        if sample.outcome is Outcome.OK:  # a fast failure is not a fast request
            s.duration.observe(sample.e2e_s)
        for counter, n in zip(s.tokens, (sample.input_tokens, sample.cached_input_tokens,
                                         sample.cache_write_input_tokens, sample.output_tokens,
                                         sample.reasoning_tokens), strict=True):
            if n:
                counter.inc(n)
        if sample.cost_usd > 0:
            s.cost.inc(sample.cost_usd)

    def probe(self, endpoint: Endpoint, sample: AttemptSample) -> None:
        """One background probe (`health_probe.Prober`) or warm-up completion (`warm_up.WarmUp`)."""
        labels = (endpoint.model, endpoint.id, endpoint.tier.value)
        self._probes.labels(*labels, sample.outcome.value).inc()
        if sample.cost_usd > 0:
            self._probe_cost.labels(*labels).inc(sample.cost_usd)

    def fallback(self, from_tier: str, to_tier: str, reason: str) -> None:
        self._fallbacks.labels(from_tier, to_tier, _reason(reason)).inc()

    def served_tier_mismatch(self, endpoint: Endpoint, asked: str, served: str) -> None:
        self._tier_mismatch.labels(endpoint.key, _reason(asked), _reason(served)).inc()

    def retry(self, endpoint: Endpoint, reason: str) -> None:
        self._retries.labels(endpoint.model, endpoint.id, endpoint.tier.value, _reason(reason)).inc()

    def circuit(self, endpoint: Endpoint, open: bool) -> None:
        self._circuit.labels(endpoint.model, endpoint.id, endpoint.tier.value).set(1 if open else 0)

    def rejected(self, reason: str, api: str = "chat") -> None:
        self._rejected.labels(_reason(api), _reason(reason)).inc()

    def client_request(self, api: str, status: int) -> None:
        """One request, served or refused, by client API: counted once, when it ends. The children are
        bound on first use: a request then costs one dict lookup, not a label lookup."""
        key = (api, status // 100)
        child = self._by_api.get(key)
        if child is None:
            child = self._by_api[key] = self._client_requests.counter(_reason(api), f"{status // 100}xx")
        child.inc()

    def event_loop_lag(self, seconds: float) -> None:
        self._lag.observe(seconds)

    def overloaded(self, api: str = "chat") -> None:
        """One request refused for overload; also counted in rejected{reason="overloaded"}."""
        self._overloaded.inc()
        self.rejected("overloaded", api)

    def websocket(self, opened: bool) -> None:
        """A Responses WebSocket connection opened (True) or closed (False)."""
        if opened:
            self._websockets.inc()
        else:
            self._websockets.dec()

    def queue(self, endpoint_key: str, depth: int, waited_s: float | None, line: str = "rate_limit") -> None:
        """One of an endpoint's queues changed -- `line` "rate_limit" (shaper.py) or "capacity"
        (capacity.py): its depth now, and the wait of a request leaving it. The gauge is both lines'."""
        labels = self._labels.get(endpoint_key)
        if labels is None:
            return
        self._queue_lines[(endpoint_key, line)] = depth
        other = self._queue_lines.get((endpoint_key, "capacity" if line == "rate_limit" else "rate_limit"), 0)
        self._queue_depth.labels(*labels).set(depth + other)
        if waited_s is not None:
            self._queue_wait.labels(*labels).observe(waited_s)

    def route_selection(self, seconds: float) -> None:
        self._route_all.observe(seconds)

    def redis_error(self) -> None:
        """A failed Redis call outside the telemetry store (whose own count is read at scrape time)."""
        self._scrape.extra_redis_errors += 1

    def tier_of(self, endpoint_key: str) -> str:
        return self._tiers.get(endpoint_key, "unknown")

    # -- exposition -----------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The text `GET /metrics` returns (`CONTENT_TYPE`): the lock-free families render themselves
        (loop_metrics.py: most of the lines, at a tenth of generate_latest's cost), then the rest."""
        return "".join(family.render() for family in self._loop_families).encode() + generate_latest(self._rest)


def count_fallback(metrics: Metrics, plan: Plan, served: Served) -> None:
    """From `_serve`: a request not served by the endpoint it planned on first counts one fallback,
    from the tier of the first endpoint passed over (spilled, skipped or failed), for its reason."""
    if not (plan.spills or served.skips or served.attempts):
        return  # served as planned: most requests, on their way to the first token
    hops = [(metrics.tier_of(f"{plan.model}/{s.endpoint_id}"), s.reason) for s in plan.spills]
    hops += [(s.tier, s.reason) for s in served.skips] + [(a.tier, a.reason) for a in served.attempts]
    if hops:
        metrics.fallback(hops[0][0], served.stream.endpoint.tier.value, hops[0][1])
