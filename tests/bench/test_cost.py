from __future__ import annotations

import pytest

from gateway.bench.cost import Pricing, blended_cost_per_1m_output, cost_per_1m_output


def test_per_token_cost_is_the_output_price_at_any_load() -> None:
    pricing = Pricing(input=2.40, output=9.60)
    assert pricing.kind == "per_token"
    assert cost_per_1m_output(pricing, 50.0) == 9.60
    assert cost_per_1m_output(pricing, 12_000.0) == 9.60
    assert cost_per_1m_output(pricing, 0.0) == 9.60


def test_hourly_cost_divides_by_measured_tokens_per_hour() -> None:
    pricing = Pricing(hourly_cost=36.0)
    assert pricing.kind == "hourly"
    # 100 tok/s = 360,000 tok/h: $36 / 0.36M tokens = $100 per 1M.
    assert cost_per_1m_output(pricing, 100.0) == pytest.approx(100.0)
    # Four times the throughput on the same machine: a quarter of the cost per token.
    assert cost_per_1m_output(pricing, 400.0) == pytest.approx(25.0)
    assert cost_per_1m_output(Pricing(hourly_cost=25.0), 1250.0) == pytest.approx(25.0 / 4.5)


def test_hourly_cost_without_output_is_not_a_number() -> None:
    assert cost_per_1m_output(Pricing(hourly_cost=36.0), 0.0) is None


def test_no_pricing_no_cost() -> None:
    assert cost_per_1m_output(None, 100.0) is None
    assert blended_cost_per_1m_output(None, 10, 10, 100.0) is None


def test_blended_charges_the_prompts_too() -> None:
    pricing = Pricing(input=1.0, output=2.0)
    # 1,000 prompt tokens ($0.001) + 500 output tokens ($0.001) = $0.002 for 500 output tokens.
    assert blended_cost_per_1m_output(pricing, 1000, 500, 123.0) == pytest.approx(4.0)
    assert blended_cost_per_1m_output(pricing, 1000, 0, 0.0) is None
    hourly = Pricing(hourly_cost=36.0)
    assert blended_cost_per_1m_output(hourly, 10_000, 500, 100.0) == pytest.approx(100.0)


@pytest.mark.parametrize("fields", [{}, {"input": 1.0}, {"input": 1.0, "output": 2.0, "hourly_cost": 3.0},
                                    {"output": 1.0, "hourly_cost": 3.0}, {"hourly_cost": -1.0}])
def test_exactly_one_valid_pricing_kind(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Pricing(**fields)


def test_describe() -> None:
    assert Pricing(input=0.3, output=1.2).describe() == "$0.3/$1.2 per 1M in/out"
    assert Pricing(hourly_cost=25).describe() == "$25/h"
