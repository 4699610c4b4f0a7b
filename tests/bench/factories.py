"""Builders of bench records for the unit tests: plausible defaults, override what the test is about."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.bench.models import LevelRun, LevelStats, RequestResult


def result(**fields: Any) -> RequestResult:
    base = RequestResult(target="a", level=1, index=0, ok=True, error=None, status=200, endpoint=None,
                         started_s=0.0, ttft_s=0.2, answer_s=0.25, e2e_s=0.45, decode_s=0.25,
                         output_tokens=101, prompt_tokens=50, usage_reported=True)
    return replace(base, **fields)


def run(results: list[RequestResult], wall_s: float = 1.0, target: str = "a", level: int = 1) -> LevelRun:
    return LevelRun(target=target, level=level, wall_s=wall_s, results=tuple(results), client_cpu_s=0.1)


def stats(**fields: Any) -> LevelStats:
    base = LevelStats(
        target="a", level=1, requests=4, errors=0, error_rate=0.0, decode_tps_p25=390.0,
        decode_tps_p50=400.0, ttft_ms_p50=200.0, ttft_ms_p95=210.0, answer_ms_p50=250.0,
        answer_ms_p95=260.0, e2e_ms_p50=450.0, e2e_ms_p95=460.0, output_tokens=400, prompt_tokens=200,
        wall_s=1.8, aggregate_tps=222.2, client_cpu=0.05, pricing="per_token", cost_per_1m_output=9.6,
        blended_cost_per_1m_output=10.8, endpoints=(("sim/fast", 4),), error_kinds=(),
    )
    return replace(base, **fields)
