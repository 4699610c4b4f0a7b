"""The quantile sketch: accuracy, exact merge, subtract, and the Redis field round trip."""

from __future__ import annotations

import math
import random

import pytest

from gateway.telemetry.sketch import MIN_VALUE, RELATIVE_ACCURACY, Sketch, bucket_index, bucket_value

QS = (0.01, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999)


def exact_quantile_bounds(sorted_values: list[float], q: float) -> tuple[float, float]:
    rank = q * (len(sorted_values) - 1)
    return sorted_values[math.floor(rank)], sorted_values[math.ceil(rank)]


def assert_accurate(sk: Sketch, values: list[float], tol: float = RELATIVE_ACCURACY) -> None:
    ordered = sorted(values)
    for q in QS:
        est = sk.quantile(q)
        assert est is not None
        lo, hi = exact_quantile_bounds(ordered, q)
        assert lo * (1 - tol) - 1e-9 <= est <= hi * (1 + tol) + 1e-9, (q, est, lo, hi)


@pytest.mark.parametrize(
    "dist",
    [
        lambda r: r.lognormvariate(math.log(400), 0.8),  # latency-like, long tail
        lambda r: r.uniform(1, 10_000),
        lambda r: r.expovariate(1 / 50.0) + 0.01,
        lambda r: r.paretovariate(1.5) * 100,
    ],
    ids=["lognormal", "uniform", "exponential", "pareto"],
)
def test_quantiles_within_relative_accuracy(dist) -> None:
    r = random.Random(7)
    values = [dist(r) for _ in range(20_000)]
    sk = Sketch()
    for v in values:
        sk.add(v)
    assert sk.count == len(values)
    assert sk.sum == pytest.approx(sum(values))
    assert_accurate(sk, values)


def test_bucket_value_is_within_accuracy_of_its_members() -> None:
    for x in (0.01, 0.5, 1.0, 3.3, 410.0, 99_999.0):
        assert abs(bucket_value(bucket_index(x)) - x) <= RELATIVE_ACCURACY * x * 1.0000001


def test_merge_equals_sketch_of_union_exactly() -> None:
    r = random.Random(1)
    a_vals = [r.lognormvariate(6, 1) for _ in range(3000)]
    b_vals = [r.uniform(5, 50) for _ in range(2000)]
    a, b, union = Sketch(), Sketch(), Sketch()
    for v in a_vals:
        a.add(v)
        union.add(v)
    for v in b_vals:
        b.add(v)
        union.add(v)
    a.merge(b)
    assert a.bins() == union.bins()
    assert a.count == union.count == 5000
    assert a.sum == pytest.approx(union.sum)
    assert (a.min, a.max) == (union.min, union.max)
    assert a.quantiles([0.25, 0.5, 0.99]) == union.quantiles([0.25, 0.5, 0.99])


def test_subtract_undoes_merge() -> None:
    a, b = Sketch(), Sketch()
    for v in (1, 2, 3, 100, 200):
        a.add(v)
    for v in (3, 4, 5000):
        b.add(v)
    before = a.bins()
    a.merge(b)
    a.subtract(b)
    assert a.bins() == before
    assert a.count == 5


def test_fields_round_trip() -> None:
    r = random.Random(3)
    sk = Sketch()
    for _ in range(1000):
        sk.add(r.lognormvariate(5, 1))
    fields = sk.to_fields("ttft_ms")
    assert all(k.startswith(("s:ttft_ms:", "sum:ttft_ms")) for k in fields)
    # Redis hands everything back as strings
    back = Sketch.from_fields("ttft_ms", {k: str(v) for k, v in fields.items()} | {"s:other:3": "9"})
    assert back.bins() == sk.bins()
    assert back.count == sk.count
    assert back.sum == pytest.approx(sk.sum)
    for q in (0.5, 0.9, 0.99):
        a, b = back.quantile(q), sk.quantile(q)
        assert a is not None and b is not None
        assert a == pytest.approx(b, rel=2 * RELATIVE_ACCURACY)


def test_fields_from_two_replicas_add_up_like_hincrby() -> None:
    a, b = Sketch(), Sketch()
    for v in (10, 20, 30):
        a.add(v)
    for v in (20, 40):
        b.add(v)
    summed: dict[str, float] = {}
    for f in (a.to_fields("x"), b.to_fields("x")):
        for k, v in f.items():
            summed[k] = summed.get(k, 0) + v
    merged = Sketch.from_fields("x", summed)
    a.merge(b)
    assert merged.bins() == a.bins()
    assert merged.count == 5


def test_zero_negative_and_non_finite_values() -> None:
    sk = Sketch()
    sk.add(0.0)
    sk.add(-5.0)
    sk.add(float("nan"))
    sk.add(float("inf"))
    assert sk.count == 2
    q = sk.quantile(0.5)
    assert q is not None and q == pytest.approx(MIN_VALUE, rel=RELATIVE_ACCURACY)


def test_empty_sketch() -> None:
    sk = Sketch()
    assert sk.quantile(0.5) is None
    assert sk.quantiles([0.5]) == []
    assert sk.to_fields("x") == {}


def test_state_round_trip_and_copy_independence() -> None:
    r = random.Random(5)
    sk = Sketch()
    for _ in range(500):
        sk.add(r.uniform(100, 2000))
    back = Sketch.from_state(sk.to_state())
    assert back.bins() == sk.bins() and (back.count, back.sum, back.min, back.max) == (
        sk.count, sk.sum, sk.min, sk.max)
    other = sk.copy()
    sk.add(5000.0)
    assert sk.count == 501 and other.count == 500
    assert sk.quantile(1.0) == pytest.approx(5000.0, rel=RELATIVE_ACCURACY)
