from __future__ import annotations

import pytest

from gateway.bench.compare import compare
from tests.bench.factories import stats


def _pair(level: int, a_tps: float, b_tps: float, a_cost: float | None, b_cost: float | None,
          a_agg: float = 1000.0, b_agg: float = 500.0) -> list:
    return [
        stats(target="ultra", level=level, decode_tps_p50=a_tps, cost_per_1m_output=a_cost,
              aggregate_tps=a_agg, e2e_ms_p50=500.0),
        stats(target="std", level=level, decode_tps_p50=b_tps, cost_per_1m_output=b_cost,
              aggregate_tps=b_agg, e2e_ms_p50=2000.0),
    ]


def test_multiples_per_level() -> None:
    comparison = compare(_pair(1, 400.0, 100.0, 9.6, 1.2), "ultra", "std")
    (row,) = comparison.levels
    assert row.level == 1
    assert row.speed_x == pytest.approx(4.0)
    assert row.price_x == pytest.approx(8.0)
    assert row.aggregate_x == pytest.approx(2.0)
    assert row.e2e_x == pytest.approx(4.0)
    assert row.worth_it is False


def test_verdict_mixed_levels_with_hourly_prices() -> None:
    # Hourly pricing: the price multiple moves with load; speed 6.3x at c=1 for 2.0x, 1.9x at c=64 for 8.0x.
    data = _pair(1, 630.0, 100.0, 20.0, 10.0) + _pair(64, 190.0, 100.0, 80.0, 10.0)
    comparison = compare(data, "ultra", "std")
    assert [r.worth_it for r in comparison.levels] == [True, False]
    assert comparison.verdict == (
        "ultra is 1.9x-6.3x as fast per user as std at 2.0x-8.0x the price per 1M output tokens: "
        "worth it at c=1, not at c=64"
    )


def test_verdict_never_worth_it() -> None:
    data = _pair(1, 400.0, 100.0, 9.6, 1.2) + _pair(4, 390.0, 98.0, 9.6, 1.2)
    assert compare(data, "ultra", "std").verdict == (
        "ultra is 4.0x as fast per user as std at 8.0x the price per 1M output tokens: "
        "not worth it at any level measured"
    )


def test_verdict_always_worth_it_and_cheaper_shown_with_two_decimals() -> None:
    data = _pair(1, 400.0, 100.0, 9.6, 159.4) + _pair(4, 390.0, 97.0, 9.6, 40.8)
    assert compare(data, "ultra", "std").verdict == (
        "ultra is 4.0x as fast per user as std at 0.06x-0.24x the price per 1M output tokens: "
        "worth it at every level measured (c=1,4)"
    )


def test_verdict_slower_tier() -> None:
    data = _pair(1, 80.0, 100.0, 2.4, 1.2)
    assert compare(data, "ultra", "std").verdict == (
        "ultra is 0.80x as fast per user as std (slower) at 2.0x the price per 1M output tokens: "
        "not worth it at any level measured"
    )


def test_verdict_without_prices() -> None:
    verdict = compare(_pair(1, 400.0, 100.0, None, 1.2), "ultra", "std").verdict
    assert verdict == ("ultra is 4.0x as fast per user as std; no price for both, so no verdict "
                       "(use --price, --hourly-cost or --catalogue)")


def test_level_without_data_is_named() -> None:
    data = _pair(1, 400.0, 100.0, 2.4, 1.2) + _pair(64, None, 100.0, 2.4, 1.2)  # type: ignore[arg-type]
    comparison = compare(data, "ultra", "std")
    assert comparison.levels[1].speed_x is None and comparison.levels[1].worth_it is None
    assert comparison.verdict.endswith("worth it at every level measured (c=1); no data at c=64")


def test_no_common_data() -> None:
    data = _pair(1, None, None, 2.4, 1.2)  # type: ignore[arg-type]
    verdict = compare(data, "ultra", "std").verdict
    assert verdict == "ultra vs std: no level where both produced tokens; no verdict"


def test_a_tier_that_refuses_requests_is_not_worth_it() -> None:
    from dataclasses import replace

    data = _pair(1, 400.0, 100.0, 2.4, 1.2) + _pair(64, 900.0, 100.0, 2.4, 1.2)
    data[2] = replace(data[2], errors=13, error_rate=0.2)  # ultra at c=64: rate limited
    comparison = compare(data, "ultra", "std")
    assert [r.worth_it for r in comparison.levels] == [True, False]
    assert comparison.levels[1].error_rate_a == 0.2 and comparison.levels[1].error_rate_b == 0.0
    assert comparison.verdict == (
        "ultra is 4.0x-9.0x as fast per user as std at 2.0x the price per 1M output tokens: "
        "worth it at c=1, not at c=64; ultra failed 20% at c=64"
    )
