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


def test_render_writes_what_generate_latest_writes() -> None:
    """Byte for byte: label names sorting before and after `le`, a value needing escapes, counts past
    Go's switch to exponents, a counter and a histogram without labels."""
    registry = CollectorRegistry()
    histogram = LoopFamily("t_seconds", 'doc with \\ and\nnewline', ["model", "endpoint", "tier"], buckets=BOUNDS)
    counter = LoopFamily("t_requests", "doc", ["status", "api"])
    bare = LoopFamily("t_lag", "doc", [], buckets=BOUNDS)
    for family in (histogram, counter, bare):
        registry.register(family)
    histogram.histogram('m "quoted"', "a\\b", "fast\nx").observe(0.2)
    for value in (0.05, 0.3, 7.0):
        histogram.histogram("m", "e", "standard").observe(value)
    counter.counter("ok", "chat").inc(12_345_678)
    counter.counter("error", "messages").inc(0.5)
    bare.histogram().observe(1.0)
    assert "".join(f.render() for f in (histogram, counter, bare)) == generate_latest(registry).decode()
    assert 't_seconds_bucket{endpoint="e",le="1.0",model="m",tier="standard"} 2.0' in histogram.render()


def test_render_follows_children_made_after_the_first_scrape() -> None:
    registry = CollectorRegistry()
    family = LoopFamily("t_seconds", "doc", ["endpoint"], buckets=BOUNDS)
    registry.register(family)
    family.histogram("a").observe(0.1)
    family.render()
    family.histogram("b").observe(2.0)
    family.histogram("a").observe(0.5)
    assert family.render() == generate_latest(registry).decode()
