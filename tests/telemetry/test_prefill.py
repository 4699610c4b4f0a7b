"""Tests of gateway.telemetry.prefill: the TTFT curve against prompt size and load."""

from __future__ import annotations

import random

import pytest

from gateway.telemetry.prefill import PrefillFit


def noisy_samples(fit: PrefillFit, rng: random.Random, n: int, prefill_tps: float, base_s: float,
                  queue_s: float) -> None:
    for _ in range(n):
        uncached = rng.choice((200, 800, 2_000, 6_000, 15_000, 40_000)) * rng.uniform(0.8, 1.2)
        load = rng.randint(0, 12)
        ttft = (base_s + uncached / prefill_tps + queue_s * load) * rng.lognormvariate(0.0, 0.15)
        fit.add(uncached, load, ttft)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recovers_a_known_prefill_rate_within_ten_percent_from_noisy_samples(seed: int) -> None:
    fit = PrefillFit()
    noisy_samples(fit, random.Random(seed), 400, prefill_tps=4_000.0, base_s=0.3, queue_s=0.05)
    line = fit.line()
    assert line is not None and line.prefill_tps is not None
    assert line.prefill_tps == pytest.approx(4_000.0, rel=0.10)
    assert line.queue_s == pytest.approx(0.05, abs=0.03)


def test_a_flat_endpoint_under_noise_gets_no_prefill_rate() -> None:
    rng = random.Random(5)
    fit = PrefillFit()
    for _ in range(200):
        fit.add(rng.choice((500, 5_000, 30_000)), rng.randint(0, 4), 0.4 * rng.lognormvariate(0.0, 0.3))
    line = fit.line()
    assert line is not None and line.per_token_s is None
    assert line.base_s == pytest.approx(0.4, rel=0.2)


def test_one_prompt_size_measures_no_rate_and_folds_into_the_base() -> None:
    fit = PrefillFit()
    for load in (0, 0, 1, 1):
        fit.add(1_000, load, 0.5 + 0.1 * load)
    line = fit.line()
    assert line is not None and line.per_token_s is None
    assert line.queue_s == pytest.approx(0.1)
    assert line.ttft_s(1_000, 0) == pytest.approx(0.5)


def test_sums_merge_and_subtract_exactly_and_forget() -> None:
    rng = random.Random(9)
    a, b = PrefillFit(), PrefillFit()
    noisy_samples(a, rng, 50, 10_000.0, 0.2, 0.0)
    noisy_samples(b, rng, 50, 10_000.0, 0.2, 0.0)
    both = a.copy()
    both.merge(b)
    assert both.w == 100
    both.subtract(b)
    assert both.state() == pytest.approx(a.state())
    fields = dict(a.fields("pf"))
    again = PrefillFit()
    for f, v in fields.items():
        again.add_field(f.rsplit(":", 1)[1], v)
    assert again.state() == a.state()
    a.scale(0.0)
    assert a.line() is None and not list(a.fields("pf"))


def test_bucket_fits_ttft_against_uncached_input_and_keeps_stayed_cache_hits() -> None:
    from gateway.telemetry.bucket import Bucket
    from gateway.telemetry.sample import AttemptSample, Outcome
    from gateway.telemetry.window import summarize

    bucket = Bucket()
    for i, (tokens, cached) in enumerate([(2_000, 0), (10_000, 0), (20_000, 18_000), (30_000, 0), (6_000, 0)]):
        ttft = 0.2 + (tokens - cached) / 5_000.0
        bucket.add_sample(AttemptSample("m/a", 0.0, Outcome.OK, 200, ttft, ttft, 100.0, 1.0, input_tokens=tokens,
                                        cached_input_tokens=cached, stayed=i == 2), 1.0)
    for back in (Bucket.from_fields(bucket.to_fields()), Bucket.thaw(bucket.freeze()), bucket.copy()):
        stats = summarize(back, window_s=60, now=1.0, newest=1.0)
        shown = stats.to_json()["prefill"]
        assert shown["prefill_tps"] == pytest.approx(5_000, rel=0.01)
        assert shown["base_ms"] == pytest.approx(200, rel=0.01)
        assert shown["cache_hit_ratio"] == pytest.approx(0.9)
