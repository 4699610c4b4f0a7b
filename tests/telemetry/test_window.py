"""Time-bucketed windows: what each window includes, outcome rates, incremental summaries, memory."""

from __future__ import annotations

import random

import pytest

from gateway.telemetry.bucket import Bucket, merge_all
from gateway.telemetry.sample import Outcome
from gateway.telemetry.window import EndpointWindows, summarize

from .conftest import FakeClock, SampleFactory, build_sample

BUCKET_S = 10.0


@pytest.mark.parametrize("window_s", [60, 300, 1800])
def test_window_includes_and_excludes_by_age(
    window_s: int, clock: FakeClock, make_sample: SampleFactory
) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    now = clock.now + 3.7  # not on a bucket boundary
    ages = {
        "fresh": 0.5,
        "inside": window_s - 1.0,
        "edge_in": float(window_s),  # exactly window_s old: always in
        "far_out": window_s + BUCKET_S + 1.0,  # older than window + one bucket: always out
    }
    for i, age in enumerate(ages.values()):
        w.add(make_sample(at=now - age, input_tokens=10**i))
    st = w.summary(now, window_s)
    assert st.window_s == window_s
    assert st.requests == 3
    assert st.tokens.input == 1 + 10 + 100  # exactly the three newest samples
    assert st.age_s == pytest.approx(0.5)


def test_windows_of_different_lengths_see_different_counts(
    clock: FakeClock, make_sample: SampleFactory
) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    now = clock.now
    for age in range(0, 1790, 5):  # one sample every 5 s for ~30 min
        w.add(make_sample(at=now - age - 0.5))
    s60, s300, s1800 = (w.summary(now, x).requests for x in (60, 300, 1800))
    assert 12 <= s60 <= 12 + 2
    assert 60 <= s300 <= 60 + 2
    assert s1800 == 358
    # the window slides: 100 s later the 60 s window is empty, the long one lost ~20 samples
    later = now + 100
    assert w.summary(later, 60).requests == 0
    assert w.summary(later, 1800).requests == pytest.approx(358 - 20, abs=2)


def test_outcome_rates(clock: FakeClock, make_sample: SampleFactory) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    now = clock.now
    plan = {
        Outcome.OK: 10,
        Outcome.SERVER_ERROR: 2,
        Outcome.TIMEOUT: 3,
        Outcome.CONNECT_ERROR: 1,
        Outcome.RATE_LIMITED: 4,
        Outcome.CANCELLED: 5,
        Outcome.CLIENT_ERROR: 6,
    }
    for outcome, n in plan.items():
        for _ in range(n):
            w.add(make_sample(at=now - 1, outcome=outcome))
    st = w.summary(now, 60)
    accountable = 10 + 2 + 3 + 1 + 4  # cancelled and client errors are not the endpoint's fault
    assert st.requests == sum(plan.values())
    assert st.ok == 10
    assert st.errors == 10
    assert st.error_rate == pytest.approx(10 / accountable)
    assert st.rate_limited_rate == pytest.approx(4 / accountable)
    assert st.timeout_rate == pytest.approx(3 / accountable)
    assert (st.cancelled, st.client_errors) == (5, 6)
    # e2e only from successful attempts
    assert st.e2e_ms is not None and st.e2e_ms.count == 10


def test_empty_window() -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    st = w.summary(1000.0, 300)
    assert st.requests == 0 and st.error_rate == 0.0 and st.age_s is None
    assert st.ttft_ms is None and st.decode_tps is None


def test_percentiles_and_metrics(clock: FakeClock, make_sample: SampleFactory) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    for i in range(1, 101):
        w.add(make_sample(at=clock.now - 1, ttft_ms=float(i * 10), ttfat_ms=float(i * 20),
                          decode_tps=float(i), e2e_ms=1000.0 + i, cost_usd=0.5, reasoning_tokens=2))
    st = w.summary(clock.now, 60)
    assert st.ttft_ms is not None and st.ttfat_ms is not None and st.decode_tps is not None
    assert st.ttft_ms.p50 == pytest.approx(500, rel=0.02)
    assert st.ttft_ms.p99 == pytest.approx(990, rel=0.02)
    assert st.ttfat_ms.p50 == pytest.approx(1000, rel=0.02)
    assert st.decode_tps.p25 == pytest.approx(25.75, rel=0.05)
    assert st.ttft_ms.count == 100
    assert st.cost_usd == pytest.approx(50.0)
    assert st.tokens.reasoning == 200


def brute_force(w_samples: list[tuple[float, object]], now: float, window_s: float) -> Bucket:
    first = int((now - window_s) // BUCKET_S)
    cur = int(now // BUCKET_S)
    out = Bucket()
    for t, s in w_samples:
        if first <= int(t // BUCKET_S) <= cur:
            out.add_sample(s, t)  # type: ignore[arg-type]
    return out


def test_incremental_aggregates_match_brute_force() -> None:
    """Sliding aggregates (add settled buckets, subtract expired ones) stay exact, late samples too."""
    r = random.Random(11)
    w = EndpointWindows(BUCKET_S, 1800)
    seen: list[tuple[float, object]] = []
    now = 1_000_000.0
    for _step in range(400):
        now += r.uniform(0, 12)
        for _ in range(r.randint(0, 4)):
            # mostly fresh samples, some late ones into settled buckets
            t = now - (r.uniform(0, 2) if r.random() < 0.8 else r.uniform(0, 400))
            s = build_sample(at=t, ttft_ms=r.uniform(50, 5000), outcome=r.choice(list(Outcome)))
            w.add(s, t)
            seen.append((t, s))
        if r.random() < 0.05:
            w.prune(now)
        window = r.choice([60, 300, 1800])
        got = w.aggregate(now, window)
        want = brute_force(seen, now, window)
        assert got.n == {k: v for k, v in want.n.items() if v}
        assert got.ttft_ms.bins() == want.ttft_ms.bins()
        assert got.tok_in == want.tok_in


def test_set_bucket_and_merge_bucket_keep_aggregates_exact(make_sample: SampleFactory) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    now = 500_000.0
    for age in range(5, 200, 10):
        w.add(make_sample(at=now - age))
    before = w.aggregate(now, 300).requests
    old_idx = int((now - 100) // BUCKET_S)  # a settled bucket inside the running aggregate
    replacement = Bucket()
    for _ in range(7):
        replacement.add_sample(make_sample(at=now - 100), now - 100)
    old_bucket = w.bucket(old_idx)
    assert old_bucket is not None
    old = old_bucket.requests
    w.set_bucket(old_idx, replacement)
    assert w.aggregate(now, 300).requests == before - old + 7
    w.merge_bucket(old_idx, replacement)
    assert w.aggregate(now, 300).requests == before - old + 14
    w.set_bucket(old_idx, None)
    assert w.aggregate(now, 300).requests == before - old


def test_freeze_thaw_round_trip_and_settled_buckets_are_frozen(make_sample: SampleFactory) -> None:
    b = Bucket()
    for i, outcome in enumerate((Outcome.OK, Outcome.TIMEOUT, Outcome.OK)):
        b.add_sample(make_sample(at=50.0, outcome=outcome, ttft_ms=100.0 * (i + 1), cost_usd=0.25), 50.0)
    back = Bucket.thaw(b.freeze())
    assert back.n == {"ok": 2, "timeout": 1} and back.cost == b.cost and back.newest == 50.0
    assert back.to_fields() == b.to_fields()
    assert back.ttft_ms.min == b.ttft_ms.min == pytest.approx(100.0)

    w = EndpointWindows(BUCKET_S, 1800)
    now = 10_000.0
    for age in range(0, 100, 3):
        w.add(make_sample(at=now - age))
    before = w.summary(now, 300)
    w.prune(now)
    frozen = [i for i in w.indices() if isinstance(w._buckets[i], bytes)]
    assert len(frozen) >= 7 and max(frozen) <= int(now // BUCKET_S) - 2
    assert w.summary(now, 300) == before
    w.add(make_sample(at=now - 95))  # a late sample into a frozen bucket thaws it
    assert w.summary(now, 300).requests == before.requests + 1


def test_memory_is_bounded_after_simulated_hours(make_sample: SampleFactory) -> None:
    w = EndpointWindows(BUCKET_S, 1800)
    now = 2_000_000.0
    max_buckets = 0
    for _ in range(6 * 3600 // 2):  # six hours, one sample every 2 s
        now += 2
        w.add(make_sample(at=now, ttft_ms=random.uniform(100, 3000)))
        if int(now) % 60 == 0:
            w.prune(now)
            w.aggregate(now, 1800)
            w.aggregate(now, 60)
        max_buckets = max(max_buckets, len(w))
    assert max_buckets <= 1800 / BUCKET_S + 3 + 6  # retention + pruning granularity
    st = w.summary(now, 1800)
    assert st.requests == pytest.approx(900, abs=10)


def test_summarize_uses_merged_bucket(make_sample: SampleFactory) -> None:
    a, b = Bucket(), Bucket()
    a.add_sample(make_sample(at=1.0), 1.0)
    b.add_sample(make_sample(at=2.0, outcome=Outcome.SERVER_ERROR), 2.0)
    st = summarize(merge_all([a, b]), window_s=60, now=3.0, newest=2.0, in_flight=4)
    assert (st.requests, st.errors, st.in_flight, st.age_s) == (2, 1, 4, 1.0)
