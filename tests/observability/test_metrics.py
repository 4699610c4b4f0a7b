"""`gateway.observability.metrics`: what the registry holds after recording attempts, fallbacks, retries and circuits.

Unit tests, no processes: a two-endpoint catalogue, samples recorded directly or through the Recorder.
"""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import Catalogue, Endpoint, build_catalogue, parse_catalogue
from gateway.context import Attempt, Plan, Spill
from gateway.dispatch import Served, Skip
from gateway.health.board import HealthBoard
from gateway.observability.metrics import LATENCY_BUCKETS, TPS_BUCKETS, Metrics, count_fallback
from gateway.record import Recorder
from gateway.routing.router import Router
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.upstreams.stream import Meter

ALLOWED_LABELS = {"api", "model", "endpoint", "provider", "tier", "status", "kind", "from_tier", "to_tier", "reason",
                  "le"}


@pytest.fixture
def catalogue() -> Catalogue:
    price = {"input": 1, "output": 2}
    data = {"providers": {"fw": {"base_url": "http://fw.test/v1"}, "gq": {"base_url": "http://gq.test/v1"}},
            "models": {"m": {"endpoints": [
                {"provider": "fw", "model": "up", "tier": "fast", "id": "fw/fast", "price": price},
                {"provider": "gq", "model": "up", "tier": "standard", "id": "gq/std", "price": price},
            ]}}}
    return build_catalogue(parse_catalogue(data, "t.yaml"), "t.yaml", env={})


def endpoint(catalogue: Catalogue, endpoint_id: str) -> Endpoint:
    return next(e for e in catalogue.endpoints() if e.id == endpoint_id)


def sample(key: str, outcome: Outcome = Outcome.OK, **fields: Any) -> AttemptSample:
    values: dict[str, Any] = dict(ttft_s=0.21, ttfat_s=0.3, decode_tps=420.0, e2e_s=0.5, input_tokens=100,
                                  cached_input_tokens=40, cache_write_input_tokens=30, output_tokens=60,
                                  reasoning_tokens=10, cost_usd=0.002)
    values.update(fields)
    return AttemptSample(endpoint_key=key, started_at=time.time(), outcome=outcome, status=200, **values)


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_an_attempt_lands_in_every_per_endpoint_family(catalogue: Catalogue) -> None:
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    fast = endpoint(catalogue, "fw/fast")
    metrics.attempt(fast, sample(fast.key))
    labels = {"model": "m", "endpoint": "fw/fast", "tier": "fast"}
    assert value(metrics, "ultraroute_requests_total", **labels, provider="fw", status="ok") == 1
    assert value(metrics, "ultraroute_ttft_seconds_count", **labels) == 1
    assert value(metrics, "ultraroute_ttft_seconds_sum", **labels) == pytest.approx(0.21)
    assert value(metrics, "ultraroute_ttft_seconds_bucket", **labels, le="0.2") == 0
    assert value(metrics, "ultraroute_ttft_seconds_bucket", **labels, le="0.25") == 1
    assert value(metrics, "ultraroute_time_to_first_answer_token_seconds_sum", **labels) == pytest.approx(0.3)
    assert value(metrics, "ultraroute_decode_tokens_per_second_bucket", **labels, le="500.0") == 1
    assert value(metrics, "ultraroute_request_duration_seconds_count", **labels) == 1
    tokens = {kind: value(metrics, "ultraroute_tokens_total", **labels, kind=kind)
              for kind in ("input", "cached_input", "cache_write_input", "output", "reasoning")}
    assert tokens == {"input": 100, "cached_input": 40, "cache_write_input": 30, "output": 60, "reasoning": 10}
    assert value(metrics, "ultraroute_cost_usd_total", model="m", endpoint="fw/fast", provider="fw",
                 tier="fast") == pytest.approx(0.002)
    # The other endpoint's series exist from the start, at zero, so rate() sees their first increment.
    assert value(metrics, "ultraroute_requests_total", model="m", endpoint="gq/std", provider="gq",
                 tier="standard", status="ok") == 0


def test_a_failed_attempt_counts_by_outcome_and_not_as_a_duration(catalogue: Catalogue) -> None:
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    fast = endpoint(catalogue, "fw/fast")
    metrics.attempt(fast, sample(fast.key, Outcome.SERVER_ERROR, ttft_s=None, ttfat_s=None, decode_tps=None,
                                 e2e_s=0.01, input_tokens=0, cached_input_tokens=0, output_tokens=0,
                                 reasoning_tokens=0, cost_usd=0.0))
    labels = {"model": "m", "endpoint": "fw/fast", "tier": "fast"}
    assert value(metrics, "ultraroute_requests_total", **labels, provider="fw", status="server_error") == 1
    assert value(metrics, "ultraroute_requests_total", **labels, provider="fw", status="ok") == 0
    assert value(metrics, "ultraroute_ttft_seconds_count", **labels) == 0
    assert value(metrics, "ultraroute_request_duration_seconds_count", **labels) == 0  # a fast failure is not fast


def test_in_flight_and_redis_errors_are_read_at_scrape_time(catalogue: Catalogue) -> None:
    in_flight = {"m/fw/fast": 3, "m/gq/std": 0}
    store_errors = [2]
    metrics = Metrics(catalogue, in_flight.__getitem__, lambda: store_errors[0])
    assert value(metrics, "ultraroute_endpoint_in_flight", model="m", endpoint="fw/fast", tier="fast") == 3
    in_flight["m/fw/fast"] = 1
    store_errors[0] = 5
    metrics.redis_error()
    assert value(metrics, "ultraroute_endpoint_in_flight", model="m", endpoint="fw/fast", tier="fast") == 1
    assert value(metrics, "ultraroute_redis_errors_total") == 6


def test_queue_depth_is_both_lines_of_an_endpoint(catalogue: Catalogue) -> None:
    """An endpoint can have a provider rate limit (shaper.py) and a `max_concurrency` (capacity.py):
    the gauge shows everyone waiting, in either line; each wait is observed."""
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    labels = {"model": "m", "endpoint": "fw/fast", "tier": "fast"}
    metrics.queue("m/fw/fast", 2, None)
    metrics.queue("m/fw/fast", 3, None, line="capacity")
    assert value(metrics, "ultraroute_queue_depth", **labels) == 5
    metrics.queue("m/fw/fast", 1, 0.2)
    metrics.queue("m/fw/fast", 0, 0.4, line="capacity")
    assert value(metrics, "ultraroute_queue_depth", **labels) == 1
    assert value(metrics, "ultraroute_queue_wait_seconds_count", **labels) == 2


def test_fallbacks_retries_circuits_and_route_selection(catalogue: Catalogue) -> None:
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    fast = endpoint(catalogue, "fw/fast")
    metrics.fallback("fast", "standard", "upstream_5xx")
    metrics.fallback("fast", "standard", "upstream_5xx")
    metrics.fallback("fast", "standard", "Something: user 42 said no")  # not a fixed word: collapsed
    assert value(metrics, "ultraroute_fallbacks_total", from_tier="fast", to_tier="standard",
                 reason="upstream_5xx") == 2
    assert value(metrics, "ultraroute_fallbacks_total", from_tier="fast", to_tier="standard", reason="other") == 1
    metrics.retry(fast, "upstream_5xx")
    assert value(metrics, "ultraroute_retries_total", model="m", endpoint="fw/fast", tier="fast",
                 reason="upstream_5xx") == 1
    labels = {"model": "m", "endpoint": "fw/fast", "tier": "fast"}
    assert value(metrics, "ultraroute_endpoint_circuit_open", **labels) == 0
    metrics.circuit(fast, True)
    assert value(metrics, "ultraroute_endpoint_circuit_open", **labels) == 1
    metrics.circuit(fast, False)
    assert value(metrics, "ultraroute_endpoint_circuit_open", **labels) == 0
    metrics.route_selection(0.0004)
    assert value(metrics, "ultraroute_route_selection_seconds_count") == 1
    assert value(metrics, "ultraroute_route_selection_seconds_bucket", le="0.0005") == 1


def served_by(ep: Endpoint, attempts: tuple[Attempt, ...] = (), skips: tuple[Skip, ...] = ()) -> Served:
    return Served(SimpleNamespace(endpoint=ep), attempts, 0.0, 0, skips)  # type: ignore[arg-type]


def test_count_fallback_takes_the_first_hop(catalogue: Catalogue) -> None:
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    std = endpoint(catalogue, "gq/std")
    failed = Attempt("m/fw/fast", "fw/fast", "fast", Outcome.RATE_LIMITED, 429, "rate_limited", 0.1)
    count_fallback(metrics, Plan(model="m", candidates=()), served_by(std, attempts=(failed,)))
    count_fallback(metrics, Plan(model="m", candidates=(), spills=(Spill("fw/fast", "slower"),)),
                   served_by(std, attempts=(failed,)))
    count_fallback(metrics, Plan(model="m", candidates=()),
                   served_by(std, skips=(Skip("fw/fast", "fast", "circuit_open"),), attempts=(failed,)))
    count_fallback(metrics, Plan(model="m", candidates=()), served_by(std))  # served first time: none
    for reason in ("rate_limited", "slower", "circuit_open"):
        assert value(metrics, "ultraroute_fallbacks_total", from_tier="fast", to_tier="standard",
                     reason=reason) == 1, reason


def test_the_recorder_feeds_the_metrics(catalogue: Catalogue) -> None:
    store = MemoryStore()
    metrics = Metrics(catalogue, store.in_flight, lambda: 0)
    recorder = Recorder(store, Router(catalogue, store), HealthBoard(), metrics)
    std = endpoint(catalogue, "gq/std")
    in_flight = recorder.begin(std)
    assert value(metrics, "ultraroute_endpoint_in_flight", model="m", endpoint="gq/std", tier="standard") == 1
    meter = Meter(t_sent=time.perf_counter() - 1.0, t_first=time.perf_counter() - 0.8, token_chunks=3,
                  t_last=time.perf_counter() - 0.1, usage={"prompt_tokens": 7, "completion_tokens": 3})
    meter.t_first_answer = meter.t_first
    recorder.record(std, meter, Outcome.OK, 200, time.time(), in_flight)
    labels = {"model": "m", "endpoint": "gq/std", "tier": "standard"}
    assert value(metrics, "ultraroute_requests_total", **labels, provider="gq", status="ok") == 1
    assert value(metrics, "ultraroute_ttft_seconds_sum", **labels) == pytest.approx(0.2, abs=0.02)
    assert value(metrics, "ultraroute_tokens_total", **labels, kind="output") == 3
    assert value(metrics, "ultraroute_endpoint_in_flight", **labels) == 0


def test_exposition_is_every_family_as_prometheus_client_renders_them(catalogue: Catalogue) -> None:
    """`exposition()` renders the lock-free families itself: the same text as `generate_latest`
    over the registry that holds every family."""
    metrics = Metrics(catalogue, lambda key: 3, lambda: 1)
    fast = endpoint(catalogue, "fw/fast")
    metrics.attempt(fast, sample(fast.key))
    metrics.attempt(fast, sample(fast.key, Outcome.TIMEOUT, ttft_s=None, decode_tps=None))
    metrics.fallback("fast", "standard", "timeout")
    metrics.client_request("messages", 200)
    metrics.route_selection(2e-5)
    metrics.event_loop_lag(0.003)
    text = metrics.exposition().decode()
    assert text == generate_latest(metrics.registry).decode()
    assert 'ultraroute_requests_total{endpoint="fw/fast",model="m",provider="fw",status="timeout",tier="fast"} 1.0' \
        in text.splitlines()
    assert 'ultraroute_endpoint_in_flight{endpoint="gq/std",model="m",tier="standard"} 3.0' in text.splitlines()


def test_exposition_is_bounded_and_private_to_the_app(catalogue: Catalogue) -> None:
    metrics = Metrics(catalogue, lambda key: 0, lambda: 0)
    other = Metrics(catalogue, lambda key: 0, lambda: 0)  # two apps in one process do not collide
    fast = endpoint(catalogue, "fw/fast")
    metrics.attempt(fast, sample(fast.key))
    metrics.fallback("fast", "standard", "timeout")
    assert value(other, "ultraroute_requests_total", model="m", endpoint="fw/fast", provider="fw",
                 tier="fast", status="ok") == 0
    assert REGISTRY.get_sample_value("ultraroute_requests_total", {"model": "m", "endpoint": "fw/fast",
                                     "provider": "fw", "tier": "fast", "status": "ok"}) is None
    families = list(text_string_to_metric_families(metrics.exposition().decode()))
    names = {f.name for f in families}
    assert {"ultraroute_requests", "ultraroute_ttft_seconds", "ultraroute_fallbacks",
            "ultraroute_endpoint_in_flight", "ultraroute_redis_errors"} <= names
    labels = {label for f in families for s in f.samples for label in s.labels}
    assert labels <= ALLOWED_LABELS, labels - ALLOWED_LABELS
    # Bucket resolution: neighbours at most 1.33x apart for latency, so 200 vs 800 ms is unambiguous.
    assert max(b / a for a, b in itertools.pairwise(LATENCY_BUCKETS)) <= 1.34
    assert LATENCY_BUCKETS[0] == 0.01 and LATENCY_BUCKETS[-1] == 60
    assert TPS_BUCKETS[0] == 5 and TPS_BUCKETS[-1] == 5000
