"""What a request is predicted to get from an endpoint (routing/curve.py): the prior from advertised
figures, the marginal cost of joining a crowd, and what a failure costs with its fallback behind it."""

import math
from pathlib import Path

import pytest

from gateway.routing.curve import HANG_S, Curve, fallback_scores, predict
from gateway.routing.speed import SpeedModel
from tests.routing.helpers import one_endpoint


def test_prior_from_advertised_figures(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path, advertised={"tokens_per_second": 200, "ttft_ms": 300})
    p = predict(ep, None, None, None, 0, 100)
    assert p.decode_tps == pytest.approx(200 / 1.01, rel=0.01)
    assert p.ttft_s == pytest.approx(0.3)
    assert p.e2e_s == pytest.approx(0.3 + 100 / p.decode_tps)
    unknown = predict(one_endpoint(tmp_path), None, None, None, 0, 100)
    assert unknown.decode_tps is None and math.isinf(unknown.score_s)


def test_marginal_cost_counts_the_requests_already_there(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t, n in enumerate([0, 4, 8] * 4):
        model.observe(n, 100 / (1 + 0.2 * n), 0.1, now=t * 0.01)
    idle, busy = predict(ep, model, None, None, 0, 100), predict(ep, model, None, None, 6, 100)
    assert idle.marginal_s == 0
    # Six others each decode ~50 more tokens at 0.2/100 s per token slower: ~0.6 s in all.
    assert busy.marginal_s == pytest.approx(6 * 50 * 0.002, rel=0.05)
    assert busy.load == 7 and busy.score_s > busy.e2e_s


def test_a_failure_costs_what_it_falls_back_to() -> None:
    def scores(first: Curve, second_clean: float) -> float:
        a = first.predict(0, 100)
        b = Curve((0.01 * second_clean, 0.0), None, None, 1.0).predict(0, 100)
        return fallback_scores([a.clean_s, b.clean_s], [first, Curve(None, None, None, 1.0)], [a, b])[0]

    fails_fast = Curve((0.01, 0.0), (0.05, 0.0), None, 1.0, error_rate=0.2)
    own = fails_fast.predict(0, 100).clean_s  # 1 s of decode
    # A 503 answered at once, an endpoint as good behind it: a failure costs the 50 ms it took.
    assert scores(fails_fast, 1.0) == pytest.approx(own + 0.2 * 0.05)
    # Behind it one three times slower: a failure costs that one's time.
    assert scores(fails_fast, 3.0) == pytest.approx(0.8 * own + 0.2 * (0.05 + 3.0))
    # Failures that hang cost the first-token budget first.
    hangs = Curve((0.01, 0.0), (0.05, 0.0), None, 1.0, error_rate=0.2, hang_rate=0.2)
    assert scores(hangs, 1.0) == pytest.approx(own + 0.2 * HANG_S)
    # Nothing else to fall back to: the flat penalty, as the cached ranking prices it.
    alone = fallback_scores([own, math.inf], [fails_fast, fails_fast], [fails_fast.predict(0, 100)] * 2)
    assert alone[0] == pytest.approx(fails_fast.predict(0, 100).score_s) and alone[0] > own * 1.3


def test_error_rate_penalises(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path, advertised={"tokens_per_second": 100})
    assert predict(ep, None, None, None, 0, 100, error_rate=0.2).score_s > \
        predict(ep, None, None, None, 0, 100).score_s * 1.3
