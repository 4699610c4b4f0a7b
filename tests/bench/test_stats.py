from __future__ import annotations

import pytest

from gateway.bench.stats import percentile


def test_linear_interpolation_between_order_statistics() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 25) == pytest.approx(1.75)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0


def test_matches_numpy_default_on_an_odd_sample() -> None:
    values = [10.0, 20.0, 30.0, 40.0, 1000.0]
    assert percentile(values, 50) == 30.0
    assert percentile(values, 95) == pytest.approx(40.0 + 0.8 * 960.0)


def test_empty_and_single() -> None:
    assert percentile([], 50) is None
    assert percentile(iter(()), 95) is None
    assert percentile([7.0], 25) == 7.0


@pytest.mark.parametrize("q", [-1, 100.5])
def test_rejects_out_of_range(q: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0], q)
