"""The speed-vs-load model (routing/speed.py): local forgetting fits, the shared fit, advertised claims,
surprises and stalls, capacity. (What a request is predicted from it: test_curve.py.)"""

import math
from pathlib import Path

import pytest

from gateway.routing.curve import predict
from gateway.routing.speed import CAPACITY_PROBE_S, SpeedModel
from gateway.telemetry.fit import LoadFit
from gateway.telemetry.sample import STALLED_SHARE, stalled
from tests.routing.helpers import one_endpoint


def _tps(model: SpeedModel | None, in_flight: int, ep, shared: LoadFit | None = None) -> float:  # type: ignore[no-untyped-def]
    p = predict(ep, model, shared, None, in_flight, 100)
    assert p.decode_tps is not None
    return p.decode_tps


def test_learns_slowdown_with_concurrency(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t, n in enumerate([0, 8, 16, 32, 0, 8, 16, 32] * 3):
        model.observe(n, 112 / (1 + 0.0092 * n), None, now=t * 0.01)
    # Predicted at the load with this request added: in_flight + 1.
    assert abs(_tps(model, -1, ep) - 112) < 2
    assert abs(_tps(model, 62, ep) - 112 / (1 + 0.0092 * 63)) < 2


def test_reacts_within_a_few_samples_and_forgets_with_time(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t in range(20):
        model.observe(0, 300.0, 0.2, now=t * 0.1)
    for t in range(4):
        model.observe(0, 60.0, 0.2, now=2 + t * 0.1)
    assert _tps(model, -1, ep) < 150  # a slow-down shows within a few requests
    model.observe(0, 300.0, 0.2, now=60.0)  # long after: the old samples are forgotten
    assert _tps(model, -1, ep) == pytest.approx(300.0)


def test_never_predicts_speedup_with_load(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t, n in enumerate([0, 10, 20] * 4):
        model.observe(n, 100 + n, None, now=t * 0.01)  # noise that looks like a speed-up
    assert _tps(model, 40, ep) <= _tps(model, 0, ep)


def test_slope_from_the_shared_fit_when_local_load_never_varied(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t in range(5):
        model.observe(2, 100.0, None, now=t * 0.01)  # always at 2 in flight: no local slope
    shared = LoadFit()
    for n in (0, 4, 8) * 3:
        shared.add(n, (1 + 0.1 * n) / 120)  # other replicas saw 10% per user
    # Level from the local fit (100 tok/s at 2), slope from the shared one.
    assert _tps(model, 1, ep, shared) == pytest.approx(100.0, rel=0.01)
    assert _tps(model, 9, ep, shared) < 80
    assert _tps(None, -1, ep, shared) == pytest.approx(120.0, rel=0.01)  # no local data: the shared level


def test_capacity_learned_from_429s_and_probed_again(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path, max_concurrency=10)
    model = SpeedModel()
    model.observe(0, 100.0, 0.1, now=0.0)
    model.rate_limited(4, now=1.0)
    assert model.capacity(1.0) == 4
    assert math.isinf(predict(ep, model, None, None, 4, 10, capacity=model.capacity(1.0)).score_s)
    assert math.isfinite(predict(ep, model, None, None, 3, 10, capacity=model.capacity(1.0)).score_s)
    assert model.capacity(1.0 + CAPACITY_PROBE_S + 0.1) == 5  # a while without 429: try one more
    assert math.isinf(predict(ep, model, None, None, 10, 10).score_s)  # the catalogue's limit


def test_a_429_answering_a_capacity_probe_is_no_news_and_the_next_probe_waits_longer() -> None:
    model = SpeedModel()
    model.rate_limited(4, now=0.0)  # news: it takes 4
    assert not model.probing(3)  # a 429 with fewer in flight would be news again
    assert model.capacity(CAPACITY_PROBE_S + 0.1) == 5  # the probe
    assert model.probing(4) and not model.probing(3)
    model.rate_limited(4, now=11.0)  # the probe's 429 ...
    model.rate_limited(4, now=11.0)  # ... and one sent beside it: the limit stands
    assert model.capacity(11.0) == 4
    assert model.capacity(11.0 + CAPACITY_PROBE_S + 0.1) == 4  # the next probe waits twice as long
    assert model.capacity(11.0 + 2 * CAPACITY_PROBE_S + 0.1) == 5
    model.rate_limited(2, now=40.0)  # fewer than the limit: news, probed again at the first interval
    assert not model.probing(1) and model.capacity(40.0) == 2
    assert model.capacity(40.0 + CAPACITY_PROBE_S + 0.1) == 3


def test_seen_only_when_crowded_is_not_judged_slow_at_any_load(tmp_path: Path) -> None:
    # Advertised 200 tok/s; every sample so far ran at ~8-11 others in flight, at ~50 tok/s: a steep
    # slow-down, but one the claim can explain (PLAUSIBLE_SLOWDOWN).
    ep = one_endpoint(tmp_path, advertised={"tokens_per_second": 200})
    model = SpeedModel()
    for t, n in enumerate([8, 9, 10, 11, 11]):
        model.observe(n, 50.0, None, now=t * 0.01)
    assert _tps(model, 9, ep) < 60  # where it was measured: as measured
    assert _tps(model, 0, ep) > 120  # alone: between the brochure and that, so it is tried there


def test_a_claim_the_measurements_contradict_is_dropped(tmp_path: Path) -> None:
    # Advertised 500 tok/s; measured at 70 with a few others in flight: no slow-down explains that.
    ep = one_endpoint(tmp_path, advertised={"tokens_per_second": 500})
    model = SpeedModel()
    for t, n in enumerate([3, 4, 5, 4]):
        model.observe(n, 70.0, None, now=t * 0.01)
    assert _tps(model, 0, ep) < 80  # judged by what it does, also alone


def test_a_sample_far_slower_than_the_fit_restarts_it_and_older_evidence_is_dropped(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t in range(10):
        model.observe(10, 200.0, 0.3, now=t * 0.1, sent_at=100.0 + t * 0.1)
    # Slowed to a third: the first request sent after it says so, and the fit starts from it.
    assert model.observe(10, 65.0, 0.3, now=1.1, sent_at=102.0) is True
    assert _tps(model, 9, ep) == pytest.approx(65.0, rel=0.05)
    # A request sent before that one ends later, at the old speed: it describes the endpoint as it was.
    assert model.observe(10, 200.0, 0.3, now=1.2, sent_at=101.9) is False
    assert _tps(model, 9, ep) == pytest.approx(65.0, rel=0.05)
    # Back to full speed, seen by requests sent later: the fit follows within a few samples.
    for t in range(3):
        model.observe(10, 200.0, 0.3, now=5.0 + t * 0.1, sent_at=106.0 + t * 0.1)
    assert _tps(model, 9, ep) > 150


def test_a_sample_at_another_load_or_a_faster_one_is_not_a_change(tmp_path: Path) -> None:
    # Seen alone at 400 tok/s, then at ~5 in flight: a steep slow-down with load, not a change, while
    # the slope is not yet measured (PLAUSIBLE_SLOWDOWN allows for it).
    model = SpeedModel()
    for t in range(3):
        model.observe(0, 400.0, 0.06, now=t * 0.1, sent_at=t * 0.1)
    assert model.observe(5, 130.0, 0.06, now=0.5, sent_at=0.5) is False
    assert model.progress(6, 110.0, now=0.6, sent_at=0.6) is False
    # Measured steep (50% per user): faster at low load is the slope, and never restarts the fit (a
    # restart from it would lose the slope that keeps a burst off this endpoint).
    steep = SpeedModel()
    for t, n in enumerate([1, 3, 5, 7] * 3):
        steep.observe(n, 400 / (1 + 0.5 * n), 0.06, now=t * 0.01, sent_at=t * 0.01)
    assert steep.observe(0, 400.0, 0.06, now=1.0, sent_at=1.0) is False
    assert steep.progress(8, 400 / (1 + 0.5 * 9), now=1.1, sent_at=1.1) is False  # a user more than it says


def test_a_sample_far_faster_than_the_fit_rescales_it_keeping_its_slope(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t, n in enumerate([1, 3, 5, 7] * 3):  # slowed, and steep: 20% per user
        model.observe(n, 100 / (1 + 0.2 * n), 0.1, now=t * 0.01, sent_at=t * 0.01)
    assert model.slowed_at == -math.inf
    # Three times as fast again (a slow-down ended): the first request sent after it says so ...
    assert model.observe(3, 300 / 1.6, 0.1, now=1.0, sent_at=1.0) is True
    # ... and the fit is at the new level at once, its slope relative to it kept (at 5 in flight: 300 / 2).
    assert _tps(model, 0, ep) == pytest.approx(300 / 1.2, rel=0.1)
    assert _tps(model, 4, ep) == pytest.approx(300 / 2.0, rel=0.1)
    # A request sent before it, ending at the old speed, describes the endpoint as it was.
    assert model.observe(3, 100 / 1.6, 0.1, now=1.1, sent_at=0.5) is False
    assert _tps(model, 4, ep) == pytest.approx(300 / 2.0, rel=0.1)
    assert model.slowed_at == -math.inf  # a speed-up: nothing to re-check
    # Seen only when crowded, no slope measured: faster alone is the load, not a change.
    crowded = SpeedModel()
    for t in range(4):
        crowded.observe(10, 50.0, 0.1, now=t * 0.01, sent_at=t * 0.01)
    assert crowded.observe(0, 200.0, 0.1, now=0.1, sent_at=0.1) is False


def test_a_rate_measured_through_the_gateways_own_stall_is_no_surprise_either_way(tmp_path: Path) -> None:
    # 600 tok/s read through a 300 ms stall of the gateway's loop measured 170 (and one read just
    # after it, all at once, 1,700): not the endpoint's news. It still counts in the fit, as one sample.
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t in range(10):
        model.observe(2, 600.0, 0.03, now=t * 0.1, sent_at=t * 0.1)
    assert model.observe(2, 170.0, 0.03, now=1.1, sent_at=1.0, lagged=True) is False
    assert model.observe(2, 1700.0, 0.03, now=1.2, sent_at=1.1, lagged=True) is False
    assert model.slowed_at == -math.inf
    assert _tps(model, 2, ep) > 300  # blended, not restarted from it
    assert model.observe(2, 170.0, 0.03, now=1.3, sent_at=1.2) is True  # the same rate, no stall: a change
    assert stalled(0.3, 0.4) and stalled(STALLED_SHARE * 0.1, 0.1) and stalled(0.05, 0.0)
    assert not stalled(0.005, 0.1) and not stalled(0.0, 0.0)


def test_progress_acts_only_on_a_slow_down(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t in range(10):
        model.observe(10, 200.0, 0.3, now=t * 0.1, sent_at=t * 0.1)
    before = model.tps.state()
    assert model.progress(10, 180.0, now=1.1, sent_at=1.0) is False  # as expected: left to its own sample
    assert model.progress(10, 900.0, now=1.1, sent_at=1.0) is False  # faster: left to it too
    assert model.tps.state() == before
    assert model.progress(10, 60.0, now=1.2, sent_at=1.05) is True  # a third: the endpoint changed
    assert _tps(model, 9, ep) == pytest.approx(60.0, rel=0.05)
    # Streams sent before it, still running at the old speed, do not undo it; its own end counts.
    assert model.progress(10, 200.0, now=1.3, sent_at=1.0) is False
    assert model.observe(10, 200.0, 0.3, now=1.4, sent_at=0.9) is False
    assert model.observe(10, 62.0, 0.3, now=4.0, sent_at=1.05) is False
    assert _tps(model, 9, ep) == pytest.approx(61.0, rel=0.05)



def test_after_a_slow_down_a_recovery_seen_at_low_load_is_judged_by_the_old_fits_shape(tmp_path: Path) -> None:
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    for t, n in enumerate([4, 6, 8, 10, 12] * 3):  # 260 tok/s alone, 5% slower per extra user
        model.observe(n, 260 / (1 + 0.05 * n), 0.3, now=t * 0.01, sent_at=t * 0.01)
    # Slowed to a third, seen crowded (8 in flight): the fit restarts from those samples alone ...
    assert model.observe(8, 260 / 3 / 1.4, 0.3, now=1.0, sent_at=1.0) is True
    for t in range(3):
        model.observe(8, 260 / 3 / 1.4, 0.3, now=1.1 + t * 0.1, sent_at=1.1 + t * 0.1)
    # ... and a re-check alone, at full speed again, is a recovery: by the endpoint's own shape (5% per
    # user), a third of the speed is not what one request fewer explains. (Without it, any speed-up at
    # lower load up to PLAUSIBLE_SLOWDOWN per user was allowed: 4.5 x from 8 to 1 in flight.)
    assert model.observe(1, 260 / 1.05, 0.3, now=3.0, sent_at=3.0) is True
    assert _tps(model, 0, ep) > 200


def test_a_slope_hidden_by_noise_at_one_load_keeps_the_shape_last_measured(tmp_path: Path) -> None:
    # A steep endpoint (per user 400 / (1 + 0.5 (c - 1))), measured across loads; then only at about
    # two in flight, with the noise of a busy machine: the fit's slope is no longer confident. It is
    # still as steep, and a burst must not be predicted to run there at almost full speed.
    ep = one_endpoint(tmp_path)
    model = SpeedModel()
    t = 0.0
    for n in [1, 4, 8, 2, 6, 10] * 3:
        t += 0.05
        model.observe(n, 400 / (1 + 0.5 * n), None, now=t)
    assert _tps(model, 9, ep) < 100  # learnt: ~73 tok/s at 10 in flight
    for noise in [0.6, 1.4, 0.7, 1.3, 0.8, 1.2, 0.6, 1.4] * 2:
        t += 0.05
        model.observe(2, noise * 400 / 2, None, now=t)
    assert model.tps.confident_slope() is None  # the local fit alone would fall back to 1% per user
    assert _tps(model, 9, ep) < 100
