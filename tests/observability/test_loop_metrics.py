"""`gateway.observability.loop_metrics`: lock-free families render what prometheus-client's own would."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.loop_metrics import LoopFamily

BOUNDS = (0.1, 0.25, 1.0)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if not s.name.endswith("_created")}


def test_a_histogram_renders_as_prometheus_clients_own() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    family = LoopFamily("t_seconds", "doc", ["endpoint"], buckets=BOUNDS)
    ours.register(family)
    reference = Histogram("t_seconds", "doc", ["endpoint"], buckets=BOUNDS, registry=theirs)
    for value in (0.05, 0.1, 0.2, 0.25, 0.9, 5.0, 1.0):  # bounds themselves count as "le"
        family.histogram("a").observe(value)
        reference.labels("a").observe(value)
    assert samples(ours) == samples(theirs)
    assert samples(ours)[("t_seconds_bucket", (("endpoint", "a"), ("le", "0.25")))] == 4


def test_a_counter_renders_as_a_total_and_nan_is_not_observed() -> None:
    registry = CollectorRegistry()
    counter = LoopFamily("t_requests", "doc", ["status"])
    histogram = LoopFamily("t_lag", "doc", [], buckets=BOUNDS)
    registry.register(counter)
    registry.register(histogram)
    counter.counter("ok").inc()
    counter.counter("ok").inc(2)
    histogram.histogram().observe(math.nan)
    assert registry.get_sample_value("t_requests_total", {"status": "ok"}) == 3
    assert registry.get_sample_value("t_lag_count") == 0 and registry.get_sample_value("t_lag_sum") == 0


def test_labels_must_match_the_family() -> None:
    with pytest.raises(ValueError, match="expected labels"):
        LoopFamily("t_requests", "doc", ["status"]).counter("ok", "extra")
