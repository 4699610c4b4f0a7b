"""The live choice's per-request arithmetic (routing/live.py, pick.py): the same numbers and draws as the
generic code it stands in for, to the bit -- the per-request shortcuts must not change a decision."""

from __future__ import annotations

import itertools
import random

import pytest

from gateway.routing.curve import ERROR_PENALTY, Curve
from gateway.routing.live import Fixed
from gateway.routing.pick import two_of
from gateway.telemetry.prefill import PrefillLine

# Curves of every shape `Fixed` distinguishes: a measured prefill line, the load line plus an advertised
# prefill rate, a load line alone, no TTFT at all, no decode rate; with a limit, a claim, optimism, errors.
CURVES = [
    Curve((0.004, 0.0003), (0.3, 0.02), 6, 1.0, error_rate=0.1, hang_rate=0.05,
          prefill=PrefillLine(0.2, 0.00011, 0.03, 9.0)),
    Curve((0.0021, 0.00007), (0.25, 0.011), None, 0.5, prefill_s_per_token=1 / 7000),
    Curve((0.01, 0.0001), (0.4, 0.0), 3, 1.0, claimed=True, prefill=PrefillLine(0.3, None, 0.0, 1.0),
          prefill_s_per_token=1 / 3000),
    Curve((0.003, 0.0), None, None, 1.0, error_rate=0.3),
    Curve((0.003, 0.0002), None, 4, 1.0, prefill_s_per_token=1 / 5000),
    Curve(None, (0.5, 0.01), None, 1.0),
]


@pytest.mark.parametrize("curve", CURVES)
@pytest.mark.parametrize(("n_tokens", "uncached"), [(1, 0), (512, 10), (300, 30_000), (4096, 120_000)])
def test_a_fixed_curve_predicts_exactly_as_the_curve(curve: Curve, n_tokens: int, uncached: int) -> None:
    """`clean_e2e` per request is `Curve.predict`'s clean score and end-to-end time, equal as floats
    (throughput), and with e2e the router's own-time score; `predict` the prediction the router uses."""
    fixed = Fixed(curve, n_tokens, uncached)
    for in_flight, trial in itertools.product(range(8), (2, 3, 5, None)):
        p = curve.predict(in_flight, n_tokens, trial, uncached)
        assert fixed.clean_e2e(in_flight, trial, False) == (p.clean_s, p.e2e_s)
        assert fixed.predict(in_flight, trial, False) == p
        clean, e2e = fixed.clean_e2e(in_flight, trial, True)
        own = p.e2e_s * curve.penalty if p.clean_s != float("inf") else p.clean_s
        assert (clean, e2e) == (own, p.e2e_s)
        q = fixed.predict(in_flight, trial, True)
        assert (q.clean_s, q.score_s, q.e2e_s, q.ttft_s) == \
            (own, own * (1.0 + ERROR_PENALTY * curve.error_rate), p.e2e_s, p.ttft_s)


@pytest.mark.parametrize("n", range(2, 25))
def test_two_of_draws_the_two_sample_draws(n: int) -> None:
    items = [f"e{i}" for i in range(n)]
    for seed in range(40):
        a, b = random.Random(seed), random.Random(seed)
        assert list(two_of(items, a)) == b.sample(items, 2)
        assert a.random() == b.random()  # and leaves the generator where `sample` does
