import pytest

from gateway.routing.figures import LoadModel


def test_load_model_learns_slowdown_with_concurrency() -> None:
    model = LoadModel()
    for t, n in enumerate([0, 8, 16, 32, 0, 8, 16, 32] * 3):
        model.observe(n, 112 / (1 + 0.0092 * n), now=t * 0.01)
    assert abs(model.predict(0) - 112) < 2
    assert abs(model.predict(63) - 112 / (1 + 0.0092 * 63)) < 2


def test_load_model_reacts_within_a_few_samples_and_forgets_with_time() -> None:
    model = LoadModel()
    for t in range(20):
        model.observe(0, 300.0, now=t * 0.1)
    for t in range(4):
        model.observe(0, 60.0, now=2 + t * 0.1)
    assert model.predict(0) < 150  # a slow-down shows within a few requests
    model.observe(0, 300.0, now=60.0)  # long after: the old samples are forgotten
    assert model.predict(0) == pytest.approx(300.0)


def test_never_predicts_speedup_with_load() -> None:
    model = LoadModel()
    for t, n in enumerate([0, 10, 20] * 4):
        model.observe(n, 100 + n, now=t * 0.01)  # noise that looks like a speed-up
    assert model.predict(40) <= model.predict(0)
