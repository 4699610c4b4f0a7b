"""LoadFit: additive least-squares sums that merge across buckets, replicas and Redis fields."""

import pytest

from gateway.telemetry.bucket import Bucket
from gateway.telemetry.fit import LoadFit
from gateway.telemetry.sample import AttemptSample, Outcome


def test_fit_recovers_a_line_and_merges_exactly() -> None:
    a, b = LoadFit(), LoadFit()
    for x in range(0, 10, 2):
        a.add(x, 1 + 0.5 * x)
        b.add(x + 1, 1 + 0.5 * (x + 1))
    a.merge(b)
    mx, my = a.mean()  # type: ignore[misc]
    assert a.slope() == pytest.approx(0.5)
    assert my - 0.5 * mx == pytest.approx(1.0)
    a.subtract(b)
    assert a.w == 5


def test_no_slope_until_load_varies() -> None:
    f = LoadFit()
    for _ in range(5):
        f.add(3, 0.01)
    assert f.slope() is None and f.mean() == (3, 0.01)


def test_bucket_carries_the_fits_through_redis_fields_and_freezing() -> None:
    bucket = Bucket()
    for n in (0, 4, 8):
        s = AttemptSample("m/a", 0.0, Outcome.OK, 200, 0.2 + 0.01 * n, 0.2, 100 / (1 + 0.1 * n), 1.0,
                          in_flight_at_start=n)
        bucket.add_sample(s, 1.0)
    for back in (Bucket.from_fields(bucket.to_fields()), Bucket.thaw(bucket.freeze())):
        assert back.fit_tps.slope() == pytest.approx(0.001)
        assert back.fit_ttft.slope() == pytest.approx(0.01)
        assert back.fit_tps.w == 3


def test_a_slope_counts_only_once_it_stands_out_of_the_noise() -> None:
    noisy, clear = LoadFit(), LoadFit()
    # A flat endpoint on a busy machine: +-30% noise at loads 0..3 fits some slope; it is not confident.
    for x, y in [(0, 1.3), (1, 0.7), (2, 1.3), (3, 1.0), (0, 0.8), (1, 1.2), (2, 0.7), (3, 1.3)]:
        noisy.add(x, y)
    assert noisy.slope() is not None and noisy.confident_slope() is None
    for x, y in [(0, 1.0), (2, 2.1), (4, 2.9), (6, 4.1), (0, 1.1), (2, 1.9), (4, 3.0), (6, 4.0)]:
        clear.add(x, y)  # 50% per user
    assert clear.confident_slope() == pytest.approx(0.5, rel=0.05)
    flat = LoadFit()
    for x in (6, 9, 11, 11):  # all ran at about the same speed: no measured "no slow-down"
        flat.add(x, 0.02)
    assert flat.confident_slope() is None


def test_sample_load_is_the_mean_of_in_flight_at_start_and_end() -> None:
    s = AttemptSample("m/a", 0.0, Outcome.OK, 200, 0.1, 0.1, 100.0, 1.0, in_flight_at_start=0, in_flight_at_end=11)
    assert s.load == 5.5
    assert AttemptSample("m/a", 0.0, Outcome.OK, 200, 0.1, 0.1, 100.0, 1.0, in_flight_at_start=3).load == 3


def test_scale_y_moves_the_line_to_a_new_level_keeping_its_shape() -> None:
    fit = LoadFit()
    for x in (0, 2, 4, 6):
        fit.add(x, 1.0 + 0.5 * x)
    fit.scale_y(0.5)
    assert fit.slope() == pytest.approx(0.25)
    mean = fit.mean()
    assert mean is not None and mean[1] - 0.25 * mean[0] == pytest.approx(0.5)  # the intercept, halved too
