from __future__ import annotations

import pytest

from gateway.bench.cost import Pricing
from gateway.bench.metrics import error_kind, summarize
from tests.bench.factories import result, run


def test_figures_of_a_level() -> None:
    results = [
        result(index=i, ttft_s=0.2 + 0.01 * i, answer_s=0.3 + 0.01 * i, e2e_s=1.0 + 0.1 * i,
               decode_s=0.5, output_tokens=101, prompt_tokens=40, endpoint="sim/fast")
        for i in range(4)
    ]
    stats = summarize(run(results, wall_s=2.0, level=4), Pricing(input=1.0, output=2.0))
    assert (stats.requests, stats.errors, stats.error_rate) == (4, 0, 0.0)
    assert stats.decode_tps_p50 == pytest.approx(200.0)  # (101 - 1) / 0.5
    assert stats.ttft_ms_p50 == pytest.approx(215.0)
    assert stats.ttft_ms_p95 == pytest.approx(228.5)  # 220 + 0.85 * 10
    assert stats.answer_ms_p50 == pytest.approx(315.0)
    assert stats.e2e_ms_p50 == pytest.approx(1150.0)
    assert stats.e2e_ms_p95 == pytest.approx(1285.0)
    assert stats.output_tokens == 404 and stats.prompt_tokens == 160
    assert stats.aggregate_tps == pytest.approx(202.0)
    assert stats.cost_per_1m_output == 2.0
    assert stats.blended_cost_per_1m_output == pytest.approx((160 * 1.0 + 404 * 2.0) / 404)
    assert stats.endpoints == (("sim/fast", 4),)
    assert stats.client_cpu == pytest.approx(0.05)


def test_failures_count_as_errors_and_not_as_latencies() -> None:
    results = [
        result(index=0),
        result(index=1, ok=False, error="connect: refused", status=None, ttft_s=None, answer_s=None,
               e2e_s=0.001, decode_s=None, output_tokens=0, prompt_tokens=0),
        result(index=2, ok=False, error="http 503: busy", status=503, ttft_s=None, answer_s=None,
               e2e_s=0.002, decode_s=None, output_tokens=0, prompt_tokens=0),
        # A stream cut after 20 tokens: its tokens were delivered, so aggregate counts them.
        result(index=3, ok=False, error="stream: RemoteProtocolError: cut", output_tokens=20, e2e_s=0.3),
    ]
    stats = summarize(run(results, wall_s=1.0), Pricing(hourly_cost=36.0))
    assert stats.errors == 3 and stats.error_rate == 0.75
    assert stats.e2e_ms_p50 == pytest.approx(450.0)  # only the successful request
    assert stats.output_tokens == 121
    assert stats.cost_per_1m_output == pytest.approx(36.0 / (121 * 3600) * 1e6)
    assert stats.error_kinds == (("connect", 1), ("http 503", 1), ("stream", 1))


def test_every_request_failed() -> None:
    failed = result(ok=False, error="timeout", ttft_s=None, answer_s=None, decode_s=None, output_tokens=0)
    stats = summarize(run([failed, failed], wall_s=1.0), Pricing(hourly_cost=10.0))
    assert stats.error_rate == 1.0
    assert stats.decode_tps_p50 is None and stats.ttft_ms_p50 is None and stats.e2e_ms_p95 is None
    assert stats.aggregate_tps == 0.0 and stats.cost_per_1m_output is None


def test_decode_rate_needs_two_tokens() -> None:
    assert result(output_tokens=1, decode_s=0.0).decode_tps is None
    assert result(output_tokens=2, decode_s=0.0).decode_tps is None
    assert result(output_tokens=11, decode_s=0.1).decode_tps == pytest.approx(100.0)


def test_error_kind() -> None:
    assert error_kind("http 429: Rate limit reached") == "http 429"
    assert error_kind("connect: All connection attempts failed") == "connect"
    assert error_kind("timeout") == "timeout"
    assert error_kind("error event: Simulated error event") == "error event"
